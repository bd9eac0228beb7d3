"use strict";
// Locks: an exclusive lock, a read-write lock (two Locks sharing one owner), a multi-lock (every
// key at once), and the Hold an acquisition gives (fencing tokens, release, extend, loss). Built
// on the session core: waits go through the core's acquire path, holds are bound to the session.
Object.defineProperty(exports, "__esModule", { value: true });
exports.MultiLock = exports.RWLock = exports.Lock = exports.Hold = exports.OwnerSlot = void 0;
const errors_1 = require("./errors");
const acquire_1 = require("./core/acquire");
const hold_1 = require("./core/hold");
const util_1 = require("./core/util");
/** @internal The owner id a Lock (or both sides of an RWLock) uses while it holds: fresh per first acquisition. */
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
    /** An owner given by the caller (checked by SessionCore.checkOwner): kept for the other side of a read-write lock. */
    use(owner) {
        this.owner = owner;
        return owner;
    }
}
exports.OwnerSlot = OwnerSlot;
/**
 * A hold on a lock. `signal` aborts with a `LostError` when the hold is lost. A hold acquired
 * again through the same Lock object (re-entry) is the same Hold with `count` one more;
 * `release()` drops one.
 */
class Hold extends hold_1.Held {
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
    /** @internal */
    markLost(err) {
        if (this.lostError || this.count === 0)
            return;
        this.lostError = err;
        this.count = 0;
        this.onEnd();
        this.announceLost(err);
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
            const reply = await (0, acquire_1.acquireRaw)(this.s, spec);
            const owner = spec.owner;
            if (reply == null) {
                if (held)
                    throw new errors_1.BusyError(this.key, `re-entry of '${this.key}' refused`);
                throw new errors_1.BusyError(this.key, opts.timeoutMs ? `lock '${this.keys.join("', '")}' still held after ${opts.timeoutMs} ms` : undefined);
            }
            const tokens = Array.isArray(reply) ? reply.map(util_1.toBigInt) : [(0, util_1.toBigInt)(reply)];
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
//# sourceMappingURL=lock.js.map