"use strict";
// The session core: the session's connections (one NodeSession per server, the wait pool), the
// cluster routing of keys, the bindings the server keeps alive and their re-attach, loss dispatch
// (to holds and to elections' candidates), and the commands every object sends. It imports none
// of the objects: they take a SessionCore, and the public Session (../session.ts) adds the
// factories on top of it. The acquire path is ./acquire.ts.
Object.defineProperty(exports, "__esModule", { value: true });
exports.SessionCore = void 0;
const node_crypto_1 = require("node:crypto");
const node_events_1 = require("node:events");
const adapter_1 = require("../adapter");
const errors_1 = require("../errors");
const slot_1 = require("../slot");
const bindings_1 = require("./bindings");
const node_session_1 = require("./node-session");
const util_1 = require("./util");
const wait_pool_1 = require("./wait-pool");
const STANDALONE = "";
/**
 * The session without its factories: what the objects (locks, semaphores, latches, elections)
 * are built on. `SessionCore.open` opens one for an election given a client instead of a session.
 */
class SessionCore extends node_events_1.EventEmitter {
    token;
    leaseMs;
    /** @internal */ adapter;
    /** @internal */ pingIntervalMs;
    /** @internal Elections' candidates campaigning or leading: bindingId(key, candidate) -> entry. */
    elections = new Map();
    /** @internal */ pingTimeoutMs;
    nodes = new Map();
    bindings = new Map();
    /** @internal The connections waits are made on (the acquire path, ./acquire.ts, takes and gives them). */
    pool;
    slots;
    slotsLoading;
    counter = 0;
    closing = false;
    /** @internal */ keepProcessAlive;
    /**
     * The shortest lease the server keeps alive (`keepalive_min_lease_ms` of `INFO lock`, read when
     * the session opened); undefined if the server does not tell (then the server itself refuses).
     */
    minLeaseMs;
    /** @internal */
    constructor(client, opts) {
        super();
        this.adapter = (0, adapter_1.adapterFor)(client);
        this.token = (0, node_crypto_1.randomBytes)(16).toString("hex");
        this.leaseMs = opts.leaseMs ?? 30000;
        this.pingIntervalMs = opts.pingIntervalMs ?? 1000;
        this.pingTimeoutMs = opts.pingTimeoutMs ?? 3000;
        this.keepProcessAlive = opts.keepProcessAlive ?? false;
        this.pool = new wait_pool_1.WaitPool(this.adapter, this.keepProcessAlive);
        // An 'error' event without a listener would throw: errors are reported through promises.
        this.on("error", () => { });
    }
    /** A session core over `client`, opened (see `Session.open`). */
    static async open(client, opts = {}) {
        const s = new SessionCore(client, opts);
        await s.start();
        return s;
    }
    /** @internal Reads the server's shortest kept-alive lease, checks ours, connects (or loads the cluster's slots). */
    async start() {
        await this.readMinLease();
        this.checkLease(this.leaseMs);
        if (!this.adapter.cluster)
            await this.nodeSession(STANDALONE);
        else
            await this.loadSlots();
    }
    async readMinLease() {
        let text;
        try {
            text = await this.adapter.call(undefined, ["INFO", "lock"]);
        }
        catch (e) {
            // A user allowed the lock commands but not INFO: the server refuses a short lease itself.
            if ((0, errors_1.replyCode)(e) === "NOPERM")
                return;
            throw (0, errors_1.toLockError)(e);
        }
        const m = /lock_keepalive_min_lease_ms:(\d+)/.exec(String(text));
        if (m)
            this.minLeaseMs = Number(m[1]);
    }
    /** @internal A lease the server keeps alive for this session: at least the server's floor. */
    checkLease(leaseMs) {
        if (this.minLeaseMs !== undefined ? leaseMs < this.minLeaseMs : leaseMs <= 0)
            throw new errors_1.LeaseTooShortError(leaseMs, this.minLeaseMs ?? 1);
    }
    /** Releases every hold and closes the session's connections (not the client it was opened with). */
    async close() {
        if (this.closing)
            return;
        this.closing = true;
        const releases = [];
        for (const e of [...this.elections.values()])
            releases.push(e.close().catch(() => { }));
        for (const b of [...this.bindings.values()]) {
            for (const h of [...b.holds])
                releases.push(h.releaseAll().catch(() => { }));
        }
        await Promise.all(releases);
        this.pool.close();
        for (const n of this.nodes.values())
            n.close();
        this.nodes.clear();
    }
    get closed() {
        return this.closing;
    }
    /** Connections this session opened for waiting (idle and busy). */
    get waitConnections() {
        return this.pool.size;
    }
    // ------------------------------------------------------------ internals
    /** @internal The PING interval now: pingIntervalMs, or lease/4 of the shortest election campaigning or leading. */
    pingIntervalNow() {
        let ms = this.pingIntervalMs;
        for (const e of this.elections.values())
            ms = Math.min(ms, e.leaseMs / 4);
        return ms;
    }
    /** @internal A candidate starts campaigning (or leading): PINGs at its lease/4 from now. */
    addElection(e) {
        this.elections.set((0, bindings_1.bindingId)(e.key, e.candidate), e);
        this.nodes.get(e.node)?.kick();
    }
    /** @internal */
    removeElection(e) {
        const id = (0, bindings_1.bindingId)(e.key, e.candidate);
        if (this.elections.get(id) === e)
            this.elections.delete(id);
    }
    /** @internal A PING sent at `sent` was answered: leaders on `node` may believe they lead until sent + lease/2. */
    onPong(node, sent) {
        if (this.elections.size === 0)
            return;
        for (const e of this.elections.values())
            if (e.node === node)
                e.pong(sent);
    }
    /** @internal The session connection to `node` dropped (or its server was demoted): its candidates' leaderships are lost. */
    electionsDown(node, reason) {
        if (this.elections.size === 0)
            return;
        for (const e of [...this.elections.values()])
            if (e.node === node)
                e.lose(reason);
    }
    /** @internal The session connection to `node`, if open (campaigns read its epoch and last answered PING). */
    nodeSessionIfAny(node) {
        return this.nodes.get(node);
    }
    /** @internal */
    newOwner() {
        return `${this.token}:${++this.counter}`;
    }
    /** @internal */
    nodeSession(node) {
        const ns = this.nodes.get(node);
        if (ns && ns.up)
            return ns;
        return this.nodeSessionSlow(node);
    }
    async nodeSessionSlow(node) {
        let ns = this.nodes.get(node);
        if (!ns) {
            ns = new node_session_1.NodeSession(this, node);
            this.nodes.set(node, ns);
            try {
                await ns.open();
            }
            catch (e) {
                this.nodes.delete(node);
                throw e;
            }
            return ns;
        }
        if (!ns.up) {
            // One attempt (shared with the reconnect loop): a caller is told the server is unavailable.
            try {
                await ns.open();
            }
            catch (e) {
                throw e instanceof errors_1.LockError ? e : (0, errors_1.toLockError)(e);
            }
        }
        return ns;
    }
    /** @internal Reads the cluster's slot map (again: after MOVED, ASK, TRYAGAIN, NOSESSION). */
    async loadSlots() {
        if (!this.slotsLoading) {
            this.slotsLoading = (async () => {
                let reply;
                try {
                    reply = await this.adapter.call(undefined, ["CLUSTER", "SLOTS"]);
                }
                catch (e) {
                    throw (0, errors_1.toLockError)(e);
                }
                const slots = new Array(16384).fill("");
                for (const range of reply) {
                    const [start, end, master] = range;
                    const host = String(master[0]) || "127.0.0.1";
                    const node = `${host}:${Number(master[1])}`;
                    for (let i = Number(start); i <= Number(end); i++)
                        slots[i] = node;
                }
                this.slots = slots;
            })().finally(() => {
                this.slotsLoading = undefined;
            });
        }
        return this.slotsLoading;
    }
    /** @internal The node serving `key` ("" on a single server). */
    nodeFor(key) {
        if (!this.adapter.cluster)
            return STANDALONE;
        const n = this.slots?.[(0, slot_1.keySlot)(key)];
        return n ? n : this.nodeForCluster(key);
    }
    async nodeForCluster(key) {
        if (!this.slots)
            await this.loadSlots();
        const n = this.slots[(0, slot_1.keySlot)(key)];
        if (!n)
            throw new errors_1.UnavailableError(`no cluster node serves the slot of '${key}'`);
        return n;
    }
    /** @internal A command through the user's client, errors typed. */
    async call(key, args) {
        try {
            return await this.adapter.call(key, args);
        }
        catch (e) {
            throw (0, errors_1.toLockError)(e);
        }
    }
    /** @internal */
    register(hold, node, sem = false) {
        const bs = [];
        for (const key of hold.keys) {
            const id = (0, bindings_1.bindingId)(key, hold.owner);
            let b = this.bindings.get(id);
            if (!b)
                this.bindings.set(id, (b = { id, key, owner: hold.owner, node, leaseMs: hold.leaseMs, sem, holds: [] }));
            b.leaseMs = Math.max(b.leaseMs, hold.leaseMs);
            if (!b.holds.includes(hold))
                b.holds.push(hold);
            bs.push(b);
        }
        hold.bindings = bs;
    }
    /** @internal */
    unregister(hold) {
        const bs = hold.bindings;
        if (!bs)
            return;
        hold.bindings = undefined;
        // The binding objects the hold was registered in (their ids made once: no new key string to hash).
        for (const b of bs) {
            if (this.bindings.get(b.id) !== b)
                continue; // lost: already removed
            const i = b.holds.indexOf(hold);
            if (i >= 0)
                b.holds.splice(i, 1);
            if (b.holds.length === 0)
                this.bindings.delete(b.id);
        }
    }
    /**
     * @internal An owner given to an acquire must hold a lock (not permits) bound to this session
     * now, none of `keys` yet (that is a re-entry; and a cancelled wait's cleanup, a release as the
     * owner, must not drop a hold it already has), and be the owner this Lock object (or its
     * read-write lock's other side) holds as (`current`), if it holds.
     */
    checkOwner(owner, keys, current) {
        if (current !== undefined && current !== owner)
            throw new errors_1.LockError(`this lock object holds as owner '${current}': it cannot also hold as '${owner}'`);
        let held = false;
        for (const b of this.bindings.values()) {
            if (b.owner !== owner)
                continue;
            if (b.sem)
                throw new errors_1.LockError(`owner '${owner}' holds semaphore permits: pass the owner of a lock's hold`);
            if (keys.includes(b.key))
                throw new errors_1.LockError(`owner '${owner}' already holds '${b.key}': re-enter instead`);
            held = true;
        }
        if (!held)
            throw new errors_1.LockError(`owner '${owner}' holds nothing in this session: pass the owner of a live hold`);
    }
    /** @internal */
    bindingsOn(node) {
        return [...this.bindings.values()].filter((b) => b.node === node);
    }
    /** @internal Marks every hold of a binding lost. */
    lose(b, reason) {
        if (this.bindings.get(b.id) !== b)
            return;
        this.bindings.delete(b.id);
        const err = new errors_1.LostError(b.key, b.owner, reason, b.sem ? "semaphore" : "lock");
        for (const h of b.holds)
            h.markLost(err);
        // Whatever is left of it on the server (a hold no longer renewed) goes now rather than at its lease's end.
        if (reason === "down" || reason === "maxhold") {
            void this.adapter.call(b.key, [b.sem ? "SEM.RELEASE" : "LOCK.RELEASE", b.key, b.owner]).catch(() => { });
        }
        this.emit("lost", err);
    }
    /** @internal `<reason> <owner-length> <owner> <key>` or `demoted`. */
    onLossMessage(node, msg) {
        const text = msg.toString("latin1");
        if (text === "demoted") {
            const ns = this.nodes.get(node);
            if (ns)
                ns.demoted = true;
            this.electionsDown(node, "demoted");
            ns?.recycle();
            return;
        }
        const sp1 = msg.indexOf(0x20);
        const sp2 = msg.indexOf(0x20, sp1 + 1);
        if (sp1 < 0 || sp2 < 0)
            return;
        const reason = msg.subarray(0, sp1).toString();
        const len = Number(msg.subarray(sp1 + 1, sp2).toString());
        const owner = msg.subarray(sp2 + 1, sp2 + 1 + len).toString();
        const key = msg.subarray(sp2 + 2 + len).toString();
        const e = this.elections.get((0, bindings_1.bindingId)(key, owner));
        if (e)
            e.lose((["forced", "gone", "idle", "maxhold", "moved"].includes(reason) ? reason : "gone"));
        const b = this.bindings.get((0, bindings_1.bindingId)(key, owner));
        if (!b)
            return;
        const known = ["forced", "gone", "maxhold", "moved"];
        this.lose(b, (known.includes(reason) ? reason : "gone"));
    }
    /**
     * @internal `LOCK.RENEW key owner PX lease SESSION token` for each key (`SEM.RENEW` for a
     * semaphore's permits); NOTOWNER (or a semaphore's EXPIRED) -> lost.
     */
    async reattach(keys, owner, leaseMs, sem = false) {
        for (const key of keys) {
            const b = this.bindings.get((0, bindings_1.bindingId)(key, owner));
            await this.renewBinding(key, owner, b?.leaseMs ?? leaseMs, sem);
        }
    }
    async renewBinding(key, owner, leaseMs, sem) {
        for (;;) {
            const b = this.bindings.get((0, bindings_1.bindingId)(key, owner));
            try {
                const cmd = sem ? "SEM.RENEW" : "LOCK.RENEW";
                await this.adapter.call(key, [cmd, key, owner, "PX", String(leaseMs), "SESSION", this.token]);
                return;
            }
            catch (e) {
                const code = (0, errors_1.replyCode)(e);
                if (code === "NOTOWNER") {
                    if (b)
                        this.lose(b, "notowner");
                    return;
                }
                if (code === "EXPIRED" && sem) {
                    // The permits' lease ended before the re-attach: they are back in the semaphore.
                    if (b)
                        this.lose(b, "gone");
                    return;
                }
                // NOSESSION, READONLY, a connection not back yet (a failover): try again while the binding lives.
                if (!b || this.bindings.get((0, bindings_1.bindingId)(key, owner)) !== b || this.closing)
                    return;
                if (code === "NOSESSION") {
                    if (this.adapter.cluster)
                        await this.loadSlots().catch(() => { });
                    const node = await Promise.resolve(this.nodeFor(key)).catch(() => b.node);
                    if (node !== b.node)
                        b.node = node;
                    await Promise.resolve().then(() => this.nodeSession(node)).catch(() => { });
                }
                await (0, util_1.sleep)(100);
            }
        }
    }
    /** @internal Re-attaches every binding of a node after its session connection came back. */
    async reattachAll(node) {
        await Promise.all(this.bindingsOn(node).map((b) => this.renewBinding(b.key, b.owner, b.leaseMs, b.sem)));
    }
}
exports.SessionCore = SessionCore;
//# sourceMappingURL=session.js.map