"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.MultiLock = exports.RWLock = exports.Lock = exports.Hold = exports.Session = exports.NodeSession = void 0;
const node_crypto_1 = require("node:crypto");
const node_events_1 = require("node:events");
const adapter_1 = require("./adapter");
const errors_1 = require("./errors");
const election_1 = require("./election");
const semaphore_1 = require("./semaphore");
const slot_1 = require("./slot");
const ACQUIRE_CMD = {
    exclusive: "LOCK.ACQUIRE",
    read: "LOCK.RACQUIRE",
    write: "LOCK.WACQUIRE",
    multi: "LOCK.MACQUIRE",
};
const STANDALONE = "";
function sleep(ms) {
    return new Promise((r) => setTimeout(r, ms).unref?.());
}
function parseMoved(e) {
    const code = (0, errors_1.replyCode)(e);
    if (code !== "MOVED" && code !== "ASK")
        return undefined;
    const parts = e.message.split(" ");
    return parts[2];
}
function toBigInt(v) {
    if (typeof v === "bigint")
        return v;
    if (typeof v === "number")
        return BigInt(v);
    if (typeof v === "string")
        return BigInt(v);
    if (Buffer.isBuffer(v))
        return BigInt(v.toString());
    throw new errors_1.LockError(`unexpected reply ${String(v)}`);
}
/** The connection a wait was on broke mid-wait (`cause`: the client's error); a grant may have happened. */
class WaitBroken extends Error {
    constructor(cause) {
        super("the connection of a wait broke", { cause });
    }
}
function bindingId(key, owner) {
    return `${key}\u0000${owner}`;
}
/** The session connection to one server (one per cluster node that owns a held key). */
class NodeSession {
    s;
    node;
    conn;
    up = false;
    closed = false;
    /** Incremented every time the token is (re)registered on a new connection. */
    epoch = 0;
    downSince = 0;
    /** performance.now() when the last PING answered was sent (elections believe they lead until it + lease/2). */
    lastOkPingSent;
    /** Set by a `demoted` message: the drop that follows is reported as such. */
    demoted = false;
    lastPingAt = 0;
    pinging = false;
    pingTimer;
    downTimer;
    reconnecting;
    opening;
    constructor(s, node) {
        this.s = s;
        this.node = node;
    }
    /** Connects, registers the token, subscribes to the loss channel. */
    open() {
        if (!this.opening) {
            this.opening = this.connectOnce().finally(() => {
                this.opening = undefined;
            });
        }
        return this.opening;
    }
    async connectOnce() {
        const conn = await this.s.adapter.connect(this.node || undefined, this.s.keepProcessAlive);
        try {
            try {
                await conn.call(["LOCK.SESSION", this.s.token]);
            }
            catch (e) {
                if ((0, errors_1.replyCode)(e) === "ERR") {
                    const known = await conn.call(["COMMAND", "INFO", "LOCK.ACQUIRE"]).catch(() => undefined);
                    const missing = Array.isArray(known) && known.length > 0 && known[0] == null;
                    if (missing)
                        throw new errors_1.ModuleNotLoadedError();
                    const hasSession = await conn.call(["COMMAND", "INFO", "LOCK.SESSION"]).catch(() => undefined);
                    if (Array.isArray(hasSession) && hasSession.length > 0 && hasSession[0] == null)
                        throw new errors_1.ModuleNotLoadedError("the lock module on this server has no LOCK.SESSION: start the server with --loadmodule /path/to/a current liblock.so");
                }
                throw (0, errors_1.toLockError)(e);
            }
            await conn.subscribe(`__lock__:session:${this.s.token}`, (m) => this.s.onLossMessage(this.node, m));
        }
        catch (e) {
            conn.destroy();
            throw e instanceof errors_1.LockError ? e : (0, errors_1.toLockError)(e);
        }
        if (this.closed) {
            conn.destroy();
            throw new errors_1.LockError("session closed");
        }
        this.conn = conn;
        this.up = true;
        this.epoch++;
        this.lastOkPingSent = undefined;
        this.demoted = false;
        this.lastPingAt = performance.now();
        this.clearDown();
        conn.onEnd(() => this.dropped(conn));
        this.schedulePing(conn, this.s.pingIntervalNow());
    }
    /** The next PING, `delay` ms from now: every pingIntervalMs, every lease/4 while an election campaigns or leads. */
    schedulePing(conn, delay) {
        this.pingTimer = setTimeout(async () => {
            if (conn !== this.conn || conn.ended)
                return;
            let timer;
            const timeout = new Promise((r) => {
                timer = setTimeout(() => r("timeout"), this.s.pingTimeoutMs);
                if (!this.s.keepProcessAlive)
                    timer.unref();
            });
            const sent = performance.now();
            this.lastPingAt = sent;
            this.pinging = true;
            const res = await Promise.race([conn.ping().then(() => "ok", () => "error"), timeout]);
            this.pinging = false;
            clearTimeout(timer);
            if (conn !== this.conn)
                return;
            if (res !== "ok") {
                conn.destroy(); // dropped() follows
                return;
            }
            this.lastOkPingSent = sent;
            this.s.onPong(this.node, sent);
            this.schedulePing(conn, Math.max(0, this.lastPingAt + this.s.pingIntervalNow() - performance.now()));
        }, delay);
        if (!this.s.keepProcessAlive)
            this.pingTimer.unref();
    }
    /** The PING interval may have shortened (an election began): the next PING is scheduled by it. */
    kick() {
        const conn = this.conn;
        if (!conn || this.pinging || conn.ended)
            return;
        clearTimeout(this.pingTimer);
        this.schedulePing(conn, Math.max(0, this.lastPingAt + this.s.pingIntervalNow() - performance.now()));
    }
    dropped(conn) {
        if (conn !== this.conn)
            return;
        this.up = false;
        this.conn = undefined;
        clearTimeout(this.pingTimer);
        if (this.closed)
            return;
        // A leadership is not re-attached: it is lost with its connection.
        this.s.electionsDown(this.node, this.demoted ? "demoted" : "connection");
        this.downSince = Date.now();
        this.s.emit("disconnected", this.node);
        this.watchDown();
        void this.reconnect();
    }
    /** While down: a binding whose lease has passed since the drop is lost. */
    watchDown() {
        clearInterval(this.downTimer);
        this.downTimer = setInterval(() => {
            if (this.up || this.closed)
                return this.clearDown();
            const downFor = Date.now() - this.downSince;
            for (const b of this.s.bindingsOn(this.node)) {
                if (downFor > b.leaseMs)
                    this.s.lose(b, "down");
            }
        }, 50);
        if (!this.s.keepProcessAlive)
            this.downTimer.unref();
    }
    clearDown() {
        clearInterval(this.downTimer);
        this.downTimer = undefined;
    }
    /** Reconnects until it works or the session closes, then re-attaches every binding. */
    reconnect() {
        if (!this.reconnecting) {
            this.reconnecting = (async () => {
                let delay = 50;
                while (!this.closed && !this.up) {
                    try {
                        await this.open();
                    }
                    catch (e) {
                        // Not a blip: said on the session's "error" event (the loop goes on: it may be fixed).
                        if (e instanceof errors_1.ModuleNotLoadedError || e instanceof errors_1.AuthenticationError)
                            this.s.emit("error", e);
                        await sleep(delay);
                        delay = Math.min(delay * 2, 500);
                        continue;
                    }
                }
                if (this.up) {
                    this.s.emit("reconnected", this.node);
                    await this.s.reattachAll(this.node);
                }
            })().finally(() => {
                this.reconnecting = undefined;
            });
        }
        return this.reconnecting;
    }
    /** Forces a new connection (after a `demoted` message or NOSESSION on a live one). */
    recycle() {
        if (this.conn)
            this.conn.destroy();
        else
            void this.reconnect();
    }
    close() {
        this.closed = true;
        this.up = false;
        clearTimeout(this.pingTimer);
        this.clearDown();
        this.conn?.destroy();
        this.conn = undefined;
    }
}
exports.NodeSession = NodeSession;
/**
 * Dedicated connections for waiting: one per concurrent wait, reused after. A connection taken
 * keeps the process alive (a wait in progress is work to finish); an idle one does not, unless
 * the session keeps the process alive.
 */
class WaitPool {
    adapter;
    keepProcessAlive;
    idle = new Map();
    /** Every connection opened and not dropped yet, idle or busy (take and give leave it alone). */
    all = new Set();
    constructor(adapter, keepProcessAlive) {
        this.adapter = adapter;
        this.keepProcessAlive = keepProcessAlive;
    }
    take(node) {
        const list = this.idle.get(node);
        while (list && list.length > 0) {
            const c = list.pop();
            if (c.ended) {
                this.all.delete(c);
                continue;
            }
            if (!this.keepProcessAlive)
                c.setRef(true);
            return c;
        }
        return this.open(node);
    }
    async open(node) {
        const c = await this.adapter.connect(node || undefined, true);
        this.all.add(c);
        return c;
    }
    give(node, c) {
        if (c.ended) {
            this.all.delete(c);
            return;
        }
        if (!this.keepProcessAlive)
            c.setRef(false);
        let list = this.idle.get(node);
        if (!list)
            this.idle.set(node, (list = []));
        list.push(c);
    }
    discard(c) {
        this.all.delete(c);
        c.destroy();
    }
    get size() {
        return this.all.size;
    }
    close() {
        for (const c of this.all)
            c.destroy();
        this.all.clear();
        this.idle.clear();
    }
}
/**
 * A session: one dedicated connection per server that every hold is bound to. The server
 * keeps the holds alive while it lives; holds live out their lease once it is gone.
 */
class Session extends node_events_1.EventEmitter {
    token;
    leaseMs;
    /** @internal */ adapter;
    /** @internal */ pingIntervalMs;
    /** @internal Elections' candidates campaigning or leading: bindingId(key, candidate) -> entry. */
    elections = new Map();
    /** @internal */ pingTimeoutMs;
    nodes = new Map();
    bindings = new Map();
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
    constructor(client, opts) {
        super();
        this.adapter = (0, adapter_1.adapterFor)(client);
        this.token = (0, node_crypto_1.randomBytes)(16).toString("hex");
        this.leaseMs = opts.leaseMs ?? 30000;
        this.pingIntervalMs = opts.pingIntervalMs ?? 1000;
        this.pingTimeoutMs = opts.pingTimeoutMs ?? 3000;
        this.keepProcessAlive = opts.keepProcessAlive ?? false;
        this.pool = new WaitPool(this.adapter, this.keepProcessAlive);
        // An 'error' event without a listener would throw: errors are reported through promises.
        this.on("error", () => { });
    }
    /**
     * Opens a session over `client` (an ioredis `Redis`/`Cluster` or a node-redis client/cluster):
     * a dedicated session connection (`client.duplicate()`), `LOCK.SESSION <token>`, subscribed to
     * its loss channel. Reads the server's shortest kept-alive lease (`INFO lock`) first.
     * Rejects with `LeaseTooShortError` (`leaseMs` below it), `AuthenticationError`,
     * `ModuleNotLoadedError` or `UnavailableError`.
     */
    static async open(client, opts = {}) {
        const s = new Session(client, opts);
        await s.readMinLease();
        s.checkLease(s.leaseMs);
        if (!s.adapter.cluster)
            await s.nodeSession(STANDALONE);
        else
            await s.loadSlots();
        return s;
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
    /** An exclusive, reentrant lock named `key`. */
    lock(key) {
        return new Lock(this, "exclusive", [key], new OwnerSlot(this));
    }
    /** A read-write lock named `key`: `.read` and `.write` share one owner (downgrade, upgrade). */
    rwlock(key) {
        return new RWLock(this, key);
    }
    /** All of `keys` at once, or none (in a cluster they must share a `{hash tag}`). */
    multiLock(keys) {
        return new MultiLock(this, keys);
    }
    /**
     * A counting semaphore named `key` (Redisson's layout). With `permits`, its permits are set
     * once (`SEM.INIT`: nothing changes if it exists), before this object's first command runs.
     */
    semaphore(key, permits) {
        return new semaphore_1.Semaphore(this, key, permits);
    }
    /** The election of a leader for `name` (`ELECT.*`), its leaderships kept by this session. */
    election(name, opts = {}) {
        return new election_1.Election(this, name, opts);
    }
    /** A count-down latch named `key` (Redisson's `RCountDownLatch` layout). */
    latch(key) {
        return new semaphore_1.Latch(this, key);
    }
    using(key, a, b) {
        const opts = typeof a === "function" ? {} : a;
        const fn = typeof a === "function" ? a : b;
        const lock = Array.isArray(key) ? this.multiLock(key) : this.lock(key);
        return lock.using(opts, fn);
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
        this.elections.set(bindingId(e.key, e.candidate), e);
        this.nodes.get(e.node)?.kick();
    }
    /** @internal */
    removeElection(e) {
        const id = bindingId(e.key, e.candidate);
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
            ns = new NodeSession(this, node);
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
    checkKeys(keys) {
        if (keys.length === 0)
            throw new errors_1.LockError("no keys to lock");
        if (this.adapter.cluster && keys.length > 1) {
            const slot = (0, slot_1.keySlot)(keys[0]);
            if (keys.some((k) => (0, slot_1.keySlot)(k) !== slot))
                throw new errors_1.LockError(`a multi-lock's keys must hash to one cluster slot: give them one {hash tag}, e.g. '{order:7}:a', '{order:7}:b' (got ${keys.join(", ")})`);
        }
    }
    /**
     * @internal Sends an acquire: waits on a pooled connection, cancels per the contract, retries
     * NOSESSION once, and queues again (with a fresh owner, or the same one when it cannot change,
     * in the time left) when the connection it waits on breaks while the server can still be reached.
     */
    async acquireRaw(spec) {
        if (this.closing)
            throw new errors_1.LockError("session closed");
        this.checkKeys(spec.keys);
        if (spec.bind && spec.kind !== "latch")
            this.checkLease(spec.leaseMs);
        spec.signal?.throwIfAborted();
        const deadline = spec.timeoutMs !== undefined && spec.timeoutMs > 0 ? performance.now() + spec.timeoutMs : undefined;
        let nosessionRetried = false;
        for (let attempt = 0;; attempt++) {
            // (nodeFor and nodeSession answer at once when they can: no await then.)
            const n = this.nodeFor(spec.keys[0]);
            const node = typeof n === "string" ? n : await n;
            let ns;
            if (spec.bind) {
                const x = this.nodeSession(node);
                ns = x instanceof NodeSession ? x : await x;
            }
            const epoch = ns?.epoch ?? 0;
            const args = this.acquireArgs(spec);
            try {
                const reply = await this.sendAcquire(node, spec, args);
                if (reply != null && ns && spec.kind !== "election" && (ns.epoch !== epoch || !ns.up)) {
                    // Served while the session connection was being replaced: the grant may carry its lease only.
                    await this.reattach(spec.keys, spec.owner, spec.leaseMs, spec.kind === "semaphore").catch(() => { });
                }
                return reply;
            }
            catch (e) {
                if (spec.signal?.aborted && e === spec.signal.reason)
                    throw e;
                if (e instanceof WaitBroken) {
                    await this.requeue(node, spec, e.cause);
                    spec.signal?.throwIfAborted(); // aborted while the old owner was cleaned up: the fresh one was never queued
                    if (deadline !== undefined) {
                        const left = Math.ceil(deadline - performance.now());
                        if (left <= 0)
                            return null; // timed out, as the server would have said
                        spec.timeoutMs = left;
                    }
                    continue;
                }
                const code = (0, errors_1.replyCode)(e);
                if (code === "NOSESSION" && spec.bind && !nosessionRetried) {
                    nosessionRetried = true;
                    if (this.adapter.cluster)
                        await this.loadSlots();
                    const n2 = await this.nodeFor(spec.keys[0]);
                    const ns2 = this.nodes.get(n2);
                    if (ns2 && ns2.up) {
                        ns2.recycle();
                        await sleep(10);
                    }
                    continue;
                }
                if ((code === "MOVED" || code === "ASK" || code === "TRYAGAIN") && attempt < 5) {
                    await this.loadSlots();
                    if (code === "TRYAGAIN")
                        await sleep(50);
                    continue;
                }
                throw (0, errors_1.toLockError)(e);
            }
        }
    }
    /**
     * The connection a wait was on broke (CLIENT KILL, an idle reaper, a blip): on a fresh
     * connection, end the old owner's wait and release a grant that may have crossed the break
     * (the cancel of the contract), then give the wait a fresh owner for its next turn in line, or
     * keep the owner when it cannot change. Keeping it is safe only after the cleanup's release has
     * answered: a grant that crossed the break would otherwise make the next acquire a re-entry.
     * The release names exactly the side or kind waited for, so what the owner held before the wait
     * (its other side of a read-write lock, its other keys) stays; a re-entry never waits, so never
     * comes here. Rejects with the broken connection's error when the session is closing, with
     * AuthenticationError / UnavailableError when no fresh connection can be made.
     */
    async requeue(node, spec, broken) {
        if (this.closing) {
            await this.boundedCleanup(spec);
            throw (0, errors_1.toLockError)(broken);
        }
        let conn;
        try {
            conn = await this.pool.take(node);
        }
        catch (e) {
            void this.boundedCleanup(spec); // through the client, in case it reconnects before the lease ends
            throw (0, errors_1.toLockError)(e);
        }
        try {
            await this.cleanup(spec, (args) => conn.call(args));
        }
        finally {
            this.pool.give(node, conn);
        }
        if (spec.freshOwner)
            spec.owner = spec.freshOwner(); // (a latch wait has no owner and no freshOwner)
    }
    acquireArgs(spec) {
        let args;
        if (spec.kind === "latch")
            args = ["LATCH.AWAIT", spec.keys[0]];
        else if (spec.kind === "election") {
            args = ["ELECT.CAMPAIGN", spec.keys[0], spec.owner];
            if (spec.value !== undefined)
                args.push("VALUE", spec.value);
            args.push("PX", String(spec.leaseMs));
        }
        else if (spec.kind === "semaphore")
            args = ["SEM.ACQUIRE", spec.keys[0], spec.owner, "PERMITS", String(spec.permits ?? 1), "PX", String(spec.leaseMs)];
        else {
            const cmd = ACQUIRE_CMD[spec.kind];
            args =
                spec.kind === "multi"
                    ? [cmd, String(spec.keys.length), ...spec.keys, spec.owner]
                    : [cmd, spec.keys[0], spec.owner];
            args.push("PX", String(spec.leaseMs));
        }
        if (spec.timeoutMs === undefined)
            args.push("BLOCK", "0");
        else if (spec.timeoutMs > 0)
            args.push("BLOCK", String(Math.ceil(spec.timeoutMs)));
        if (spec.kind !== "latch" && spec.kind !== "semaphore" && spec.kind !== "election")
            args.push("FENCE");
        if (spec.bind)
            args.push("SESSION", this.token);
        return args;
    }
    /**
     * After a cancelled wait: `LOCK.CANCEL key owner`, then `LOCK.RELEASE key owner` (MRELEASE for
     * a multi-lock, SEM.RELEASE for a semaphore) for a grant that crossed it. A latch wait has no
     * owner and is given nothing: closing its connection ended it.
     */
    async cleanup(spec, send = (args) => this.adapter.call(spec.keys[0], args)) {
        if (spec.kind === "latch")
            return;
        // First end the wait in the server: once LOCK.CANCEL has answered no grant can reach the
        // owner, so the release below drops exactly what crossed the cancel. (Closing the waiting
        // connection alone leaves a window: a grant written into a socket just closed looks
        // delivered to the server.) A multi-lock waiter leaves every key's queue through one key.
        for (let i = 0; i < 3; i++) {
            try {
                await send(["LOCK.CANCEL", spec.keys[0], spec.owner]);
                break;
            }
            catch (e) {
                if ((0, errors_1.replyCode)(e) !== undefined)
                    break;
                await sleep(50);
            }
        }
        const args = spec.kind === "multi"
            ? ["LOCK.MRELEASE", String(spec.keys.length), ...spec.keys, spec.owner]
            : spec.kind === "election"
                ? ["ELECT.RESIGN", spec.keys[0], spec.owner]
                : [spec.kind === "semaphore" ? "SEM.RELEASE" : "LOCK.RELEASE", spec.keys[0], spec.owner];
        if (spec.kind === "read")
            args.push("READ");
        if (spec.kind === "write")
            args.push("WRITE");
        for (let i = 0; i < 3; i++) {
            try {
                await send(args);
                return;
            }
            catch (e) {
                const code = (0, errors_1.replyCode)(e);
                if (code !== undefined)
                    return; // NOTOWNER: it was never granted (EXPIRED: its lease ended, the permits are back)
                await sleep(50);
            }
        }
    }
    /** The cleanup, waited for at most 2 s (a client queueing offline goes on in the background). */
    boundedCleanup(spec) {
        return Promise.race([this.cleanup(spec), sleep(2000)]);
    }
    sendAcquire(node, spec, args) {
        const waits = spec.timeoutMs === undefined || spec.timeoutMs > 0;
        if (!waits) {
            // A try: through the user's client, which follows MOVED.
            return this.adapter.call(spec.keys[0], args);
        }
        const taken = this.pool.take(node);
        if (taken instanceof Promise) {
            return taken.then((conn) => this.waitOn(node, spec, args, conn), (e) => {
                throw (0, errors_1.toLockError)(e);
            });
        }
        return this.waitOn(node, spec, args, taken);
    }
    /** The wait on a pooled connection: its answer, or the cancel of the contract (close the connection, release the owner). */
    waitOn(node, spec, args, conn) {
        if (!spec.signal && spec.timeoutMs === undefined) {
            // Nothing can cancel this wait but a broken connection: no guard, no listener.
            return conn.call(args).then((reply) => {
                this.pool.give(node, conn);
                return reply;
            }, (e) => this.waitFailed(node, spec, conn, e));
        }
        return new Promise((resolve, reject) => {
            let settled = false;
            let guard;
            const onAbort = () => cancel(spec.signal.reason ?? new DOMException("aborted", "AbortError"));
            const finish = () => {
                settled = true;
                clearTimeout(guard);
                spec.signal?.removeEventListener("abort", onAbort);
            };
            const cancel = (reason) => {
                if (settled)
                    return;
                finish();
                // Closing the connection drops the waiter at once; a grant whose answer was in flight is
                // released by the module; the RELEASE covers one that arrived as the connection closed.
                this.pool.discard(conn);
                this.boundedCleanup(spec).finally(() => reject(reason));
            };
            spec.signal?.addEventListener("abort", onAbort, { once: true });
            if (spec.timeoutMs !== undefined) {
                // The server ends the wait at BLOCK time; this guard only covers a server that stopped answering.
                guard = setTimeout(() => cancel(new errors_1.UnavailableError(`no answer from the server ${spec.timeoutMs + 5000} ms into a wait`)), spec.timeoutMs + 5000);
            }
            conn.call(args).then((reply) => {
                if (settled)
                    return;
                finish();
                this.pool.give(node, conn);
                resolve(reply);
            }, (e) => {
                if (settled)
                    return;
                finish();
                this.waitFailed(node, spec, conn, e).catch(reject);
            });
        });
    }
    /**
     * A wait answered with an error (the connection goes back: rejects with `e`) or broken (it is
     * closed; rejects with WaitBroken, for acquireRaw to clean up and queue again).
     */
    waitFailed(node, spec, conn, e) {
        if ((0, errors_1.replyCode)(e) !== undefined) {
            this.pool.give(node, conn);
            return Promise.reject(e);
        }
        this.pool.discard(conn);
        return Promise.reject(new WaitBroken(e));
    }
    /** @internal */
    register(hold, node, sem = false) {
        const bs = [];
        for (const key of hold.keys) {
            const id = bindingId(key, hold.owner);
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
        const e = this.elections.get(bindingId(key, owner));
        if (e)
            e.lose((["forced", "gone", "idle", "maxhold", "moved"].includes(reason) ? reason : "gone"));
        const b = this.bindings.get(bindingId(key, owner));
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
            const b = this.bindings.get(bindingId(key, owner));
            await this.renewBinding(key, owner, b?.leaseMs ?? leaseMs, sem);
        }
    }
    async renewBinding(key, owner, leaseMs, sem) {
        for (;;) {
            const b = this.bindings.get(bindingId(key, owner));
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
                if (!b || this.bindings.get(bindingId(key, owner)) !== b || this.closing)
                    return;
                if (code === "NOSESSION") {
                    if (this.adapter.cluster)
                        await this.loadSlots().catch(() => { });
                    const node = await Promise.resolve(this.nodeFor(key)).catch(() => b.node);
                    if (node !== b.node)
                        b.node = node;
                    await Promise.resolve().then(() => this.nodeSession(node)).catch(() => { });
                }
                await sleep(100);
            }
        }
    }
    /** @internal Re-attaches every binding of a node after its session connection came back. */
    async reattachAll(node) {
        await Promise.all(this.bindingsOn(node).map((b) => this.renewBinding(b.key, b.owner, b.leaseMs, b.sem)));
    }
}
exports.Session = Session;
/** The owner id a Lock (or both sides of an RWLock) uses while it holds: fresh per first acquisition. */
class OwnerSlot {
    s;
    owner;
    holds = 0;
    constructor(s) {
        this.s = s;
    }
    take() {
        if (!this.owner || this.holds === 0)
            this.owner = this.s.newOwner();
        return this.owner;
    }
    /** A fresh owner for a wait queued again after its connection broke (nothing holds as the old one). */
    renew() {
        this.owner = this.s.newOwner();
        return this.owner;
    }
    /** An owner given by the caller (checked by Session.checkOwner): kept for the other side of a read-write lock. */
    use(owner) {
        this.owner = owner;
        return owner;
    }
}
/**
 * A hold on a lock. `signal` aborts with a `LostError` when the hold is lost. A hold acquired
 * again through the same Lock object (re-entry) is the same Hold with `count` one more;
 * `release()` drops one.
 */
class Hold extends node_events_1.EventEmitter {
    s;
    onEnd;
    bound;
    keys;
    owner;
    /** Fencing token of the latest acquisition (of the first key, for a multi-lock). Below 2^53 today, exact as a bigint. */
    token;
    /** Fencing token per key (a multi-lock). */
    tokens;
    /** Holds this object stands for (re-entries). 0 once released. */
    count = 1;
    leaseMs;
    kind;
    controller;
    lostError;
    /** @internal The session's bindings this hold is in (while bound and not ended). */
    bindings;
    /** @internal */
    constructor(s, kind, keys, owner, tokens, leaseMs, onEnd, bound) {
        super();
        this.s = s;
        this.onEnd = onEnd;
        this.bound = bound;
        this.kind = kind;
        this.keys = keys;
        this.owner = owner;
        this.tokens = tokens;
        this.token = tokens[0];
        this.leaseMs = leaseMs;
    }
    get key() {
        return this.keys[0];
    }
    /** `token` in decimal: for JSON, logs and storage APIs that take no bigint (`JSON.stringify` throws on a bigint). */
    get tokenString() {
        return this.token.toString();
    }
    /** Aborted (with a `LostError` reason) when the hold is lost. */
    get signal() {
        // Made on first use: most holds never look at it.
        if (!this.controller) {
            this.controller = new AbortController();
            if (this.lostError)
                this.controller.abort(this.lostError);
        }
        return this.controller.signal;
    }
    get lost() {
        return this.lostError !== undefined;
    }
    /** @internal A fresh controller made ahead for `signal` (kept only if the hold has none yet). */
    adoptController(c) {
        if (this.controller)
            return;
        this.controller = c;
        if (this.lostError)
            c.abort(this.lostError);
    }
    get released() {
        return this.count === 0;
    }
    /** Calls `cb` once if the hold is lost. */
    onLost(cb) {
        return this.once("lost", cb);
    }
    /** @internal */
    markLost(err) {
        if (this.lostError || this.count === 0)
            return;
        this.lostError = err;
        this.count = 0;
        this.onEnd();
        this.controller?.abort(err);
        this.emit("lost", err);
    }
    releaseArgs() {
        if (this.kind === "multi")
            return ["LOCK.MRELEASE", String(this.keys.length), ...this.keys, this.owner];
        const args = ["LOCK.RELEASE", this.key, this.owner];
        if (this.kind === "read")
            args.push("READ");
        if (this.kind === "write")
            args.push("WRITE");
        return args;
    }
    /** Drops one hold (the last one releases the lock). A lost hold rejects with its LostError; NOTOWNER marks it lost. */
    async release() {
        if (this.lostError)
            throw this.lostError;
        if (this.count === 0)
            return;
        try {
            await this.s.adapter.call(this.key, this.releaseArgs());
        }
        catch (e) {
            const le = (0, errors_1.toLockError)(e);
            if (le instanceof errors_1.NotOwnerError) {
                const err = new errors_1.LostError(this.key, this.owner, "notowner");
                this.markLost(err);
                throw err;
            }
            throw le;
        }
        this.count--;
        if (this.count === 0) {
            this.onEnd();
            this.emit("released");
        }
    }
    /** @internal Every hold this object stands for (session close). */
    async releaseAll() {
        while (this.count > 0 && !this.lostError)
            await this.release();
    }
    /** Sets a new lease from now (default: the current one). NOTOWNER -> the hold is lost, LostError. */
    async extend(leaseMs) {
        if (this.lostError)
            throw this.lostError;
        if (this.count === 0)
            throw new errors_1.NotOwnerError("the hold was released");
        const lease = leaseMs ?? this.leaseMs;
        for (const key of this.keys) {
            const args = ["LOCK.RENEW", key, this.owner, "PX", String(lease)];
            if (this.bound)
                args.push("SESSION", this.s.token);
            try {
                await this.s.call(key, args);
            }
            catch (e) {
                if (e instanceof errors_1.NotOwnerError) {
                    const err = new errors_1.LostError(key, this.owner, "notowner");
                    this.markLost(err);
                    throw err;
                }
                throw e;
            }
        }
        this.leaseMs = lease;
    }
}
exports.Hold = Hold;
/** An exclusive lock (or one side of a read-write lock, or a multi-lock). Reentrant through this object. */
class Lock {
    s;
    kind;
    keys;
    slot;
    current;
    queue;
    inFlight = 0;
    /** @internal */
    constructor(s, kind, keys, slot) {
        this.s = s;
        this.kind = kind;
        this.keys = keys;
        this.slot = slot;
    }
    get key() {
        return this.keys[0];
    }
    /** The hold this object has now, if any. */
    get hold() {
        return this.current && this.current.count > 0 ? this.current : undefined;
    }
    /**
     * Takes the lock, waiting up to `timeoutMs` (BusyError after), cancelled by `signal`. Called
     * again on this object while it holds, it re-enters: the same Hold, `count` one more.
     */
    acquire(opts = {}) {
        // Calls on one object run one after another, so a second call sees the first one's hold.
        const run = this.inFlight === 0
            ? this.acquireNow(opts, true, true)
            : this.queue.then(() => this.acquireNow(opts, true, true), () => this.acquireNow(opts, true, true));
        this.inFlight++;
        this.queue = run; // (its rejection is the caller's; a later call chains on both outcomes)
        return run;
    }
    /** Takes the lock if it is free now: the Hold, or undefined when another owner has it. */
    async tryAcquire(opts = {}) {
        try {
            return await this.acquire({ ...opts, timeoutMs: 0 });
        }
        catch (e) {
            if (e instanceof errors_1.BusyError)
                return undefined;
            throw e;
        }
    }
    /** @internal */
    async acquireNow(opts, bind, counted = false) {
        try {
            const leaseMs = opts.leaseMs ?? this.s.leaseMs;
            const held = this.hold;
            if (opts.owner !== undefined)
                this.s.checkOwner(opts.owner, this.keys, held?.owner ?? (this.slot.holds > 0 ? this.slot.owner : undefined));
            const chosen = held ? held.owner : opts.owner !== undefined ? this.slot.use(opts.owner) : this.slot.take();
            // The owner may change only while nothing holds as it: not a re-entry, not an owner the
            // caller gave, not while the other side of a read-write lock holds.
            const mayRenew = !held && opts.owner === undefined && this.slot.holds === 0;
            const spec = {
                kind: this.kind,
                keys: this.keys,
                owner: chosen,
                freshOwner: mayRenew ? () => this.slot.renew() : undefined,
                leaseMs,
                timeoutMs: held ? 0 : opts.timeoutMs,
                signal: opts.signal,
                bind,
            };
            const reply = await this.s.acquireRaw(spec);
            const owner = spec.owner;
            if (reply == null) {
                if (held)
                    throw new errors_1.BusyError(this.key, `re-entry of '${this.key}' refused`);
                throw new errors_1.BusyError(this.key, opts.timeoutMs ? `lock '${this.keys.join("', '")}' still held after ${opts.timeoutMs} ms` : undefined);
            }
            const tokens = Array.isArray(reply) ? reply.map(toBigInt) : [toBigInt(reply)];
            if (held) {
                held.count++;
                held.tokens = tokens;
                held.token = tokens[0];
                held.leaseMs = leaseMs;
                return held;
            }
            this.slot.holds++;
            const n = this.s.nodeFor(this.key);
            const node = typeof n === "string" ? n : await n;
            const hold = new Hold(this.s, this.kind, this.keys, owner, tokens, leaseMs, () => {
                this.slot.holds--;
                if (bind)
                    this.s.unregister(hold);
            }, bind);
            if (bind)
                this.s.register(hold, node);
            this.current = hold;
            return hold;
        }
        finally {
            if (counted)
                this.inFlight--; // (a call of acquire(): see there)
        }
    }
    async using(a, b) {
        const opts = typeof a === "function" ? {} : a;
        const fn = typeof a === "function" ? a : b;
        const acquiring = this.acquire(opts);
        // The callback's AbortSignal (Node takes microseconds to make one) is made while the acquire
        // is on its way, not between the grant and the callback.
        const controller = new AbortController();
        void controller.signal;
        const hold = await acquiring;
        hold.adoptController(controller);
        let result;
        try {
            result = await fn(hold.signal, hold);
        }
        catch (e) {
            if (!hold.lost)
                await hold.release().catch(() => { });
            throw e;
        }
        // Lost while fn ran: its work may not have been protected.
        if (hold.lost)
            throw hold.signal.reason;
        try {
            await hold.release();
        }
        catch (e) {
            // Lost after fn returned (the release found no hold): the work was done under the lock.
            if (!(e instanceof errors_1.LostError))
                throw e;
        }
        return result;
    }
}
exports.Lock = Lock;
/** A read-write lock: `read` and `write` are Locks of one owner, so a writer may downgrade and a sole reader upgrade. */
class RWLock {
    key;
    read;
    write;
    /** @internal */
    constructor(s, key) {
        this.key = key;
        const slot = new OwnerSlot(s);
        this.read = new Lock(s, "read", [key], slot);
        this.write = new Lock(s, "write", [key], slot);
    }
}
exports.RWLock = RWLock;
/** Every key at once or none (`LOCK.MACQUIRE`): waits as one unit, never deadlocks on key order. */
class MultiLock extends Lock {
    /** @internal */
    constructor(s, keys) {
        super(s, "multi", keys, new OwnerSlot(s));
    }
}
exports.MultiLock = MultiLock;
//# sourceMappingURL=session.js.map