"use strict";
// Semaphores (SEM.*) and count-down latches (LATCH.*) over a Session: permits are bound to the
// session connection like lock holds (`SESSION token`), re-attached with SEM.RENEW, waited for
// with BLOCK on pooled connections, and a cancelled wait leaves nothing (LOCK.CANCEL, then
// SEM.RELEASE).
Object.defineProperty(exports, "__esModule", { value: true });
exports.Latch = exports.Semaphore = exports.Permit = void 0;
exports.toRecord = toRecord;
const node_events_1 = require("node:events");
const errors_1 = require("./errors");
/** @internal A map reply (RESP3 map, or RESP2 flat array of pairs) as a plain object. */
function toRecord(v) {
    const o = {};
    if (Array.isArray(v)) {
        for (let i = 0; i + 1 < v.length; i += 2)
            o[String(v[i])] = v[i + 1];
    }
    else if (v instanceof Map) {
        for (const [k, x] of v)
            o[String(k)] = x;
    }
    else if (v && typeof v === "object") {
        Object.assign(o, v);
    }
    return o;
}
function num(v) {
    if (typeof v === "number")
        return v;
    if (typeof v === "bigint" || typeof v === "string")
        return Number(v);
    if (Buffer.isBuffer(v))
        return Number(v.toString());
    throw new errors_1.LockError(`unexpected reply ${String(v)}`);
}
function checkCount(what, n, max) {
    if (!Number.isInteger(n) || n < 1 || n > max)
        throw new RangeError(`${what} must be an integer from 1 to ${max}, got ${n}`);
}
/** The most permits one SEM.ACQUIRE may ask for. */
const MAX_PERMITS = 100000;
/**
 * Permits of a semaphore held by one owner (fresh for each acquisition), bound to the session:
 * the server renews their lease while the session connection lives. `signal` aborts with a
 * `LostError` when they are lost.
 */
class Permit extends node_events_1.EventEmitter {
    s;
    onEnd;
    key;
    owner;
    /** Permits this handle holds now (0 once released or lost). */
    permits;
    leaseMs;
    controller;
    lostError;
    releasing;
    /** @internal */
    bindings;
    /** @internal */
    constructor(s, key, owner, permits, leaseMs, onEnd) {
        super();
        this.s = s;
        this.onEnd = onEnd;
        this.key = key;
        this.owner = owner;
        this.permits = permits;
        this.leaseMs = leaseMs;
    }
    /** @internal */
    get keys() {
        return [this.key];
    }
    /** Aborted (with a `LostError` reason) when the permits are lost. */
    get signal() {
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
    get released() {
        return this.permits === 0 && !this.lostError;
    }
    /** Calls `cb` once if the permits are lost. */
    onLost(cb) {
        return this.once("lost", cb);
    }
    /** @internal */
    markLost(err) {
        if (this.lostError || this.permits === 0)
            return;
        this.lostError = err;
        this.permits = 0;
        this.onEnd();
        this.controller?.abort(err);
        this.emit("lost", err);
    }
    lostBy(e) {
        const code = (0, errors_1.replyCode)(e) ?? (e instanceof errors_1.NotOwnerError ? "NOTOWNER" : undefined);
        if (code === "NOTOWNER")
            return new errors_1.LostError(this.key, this.owner, "notowner", "semaphore");
        if (code === "EXPIRED")
            return new errors_1.LostError(this.key, this.owner, "gone", "semaphore");
        return undefined;
    }
    /**
     * Gives back `n` permits (default: all). Permits that were lost reject with their LostError;
     * `NOTOWNER` / `EXPIRED` (their lease ended) mark them lost and reject with a LostError.
     */
    release(n) {
        if (this.lostError)
            return Promise.reject(this.lostError);
        if (this.permits === 0)
            return Promise.resolve();
        if (n !== undefined) {
            checkCount("permits to release", n, this.permits);
            if (n === this.permits)
                n = undefined;
        }
        if (n === undefined) {
            // Two calls releasing everything share one SEM.RELEASE (a second would be NOTOWNER).
            if (!this.releasing)
                this.releasing = this.send(undefined).finally(() => (this.releasing = undefined));
            return this.releasing;
        }
        return this.send(n);
    }
    async send(n) {
        const args = ["SEM.RELEASE", this.key, this.owner];
        if (n !== undefined)
            args.push("PERMITS", String(n));
        let left;
        try {
            left = num(await this.s.adapter.call(this.key, args));
        }
        catch (e) {
            const lost = this.lostBy(e);
            if (lost) {
                this.markLost(lost);
                throw lost;
            }
            throw (0, errors_1.toLockError)(e);
        }
        if (this.permits === 0)
            return;
        this.permits = left;
        if (left === 0) {
            this.onEnd();
            this.emit("released");
        }
    }
    /** @internal Session close. */
    async releaseAll() {
        if (this.permits > 0 && !this.lostError)
            await this.release();
    }
    /** Sets a new lease from now on all of them (default: the current one). NOTOWNER / EXPIRED -> lost, LostError. */
    async extend(leaseMs) {
        if (this.lostError)
            throw this.lostError;
        if (this.permits === 0)
            throw new errors_1.NotOwnerError("the permits were released");
        const lease = leaseMs ?? this.leaseMs;
        try {
            await this.s.adapter.call(this.key, ["SEM.RENEW", this.key, this.owner, "PX", String(lease), "SESSION", this.s.token]);
        }
        catch (e) {
            const lost = this.lostBy(e);
            if (lost) {
                this.markLost(lost);
                throw lost;
            }
            throw (0, errors_1.toLockError)(e);
        }
        this.leaseMs = lease;
        for (const b of this.bindings ?? [])
            b.leaseMs = Math.max(b.leaseMs, lease);
    }
}
exports.Permit = Permit;
/**
 * A counting semaphore named `key`, shared with Redisson's `RSemaphore` /
 * `RPermitExpirableSemaphore` layout. Waiters are served first come, first served, whatever
 * they ask for (a caller asking for 3 is never overtaken by callers asking for 1).
 */
class Semaphore {
    s;
    key;
    initialPermits;
    initDone = false;
    initializing;
    /** @internal */
    constructor(s, key, initialPermits) {
        this.s = s;
        this.key = key;
        this.initialPermits = initialPermits;
        if (initialPermits !== undefined) {
            if (!Number.isSafeInteger(initialPermits) || initialPermits < 0 || initialPermits > 2147483647)
                throw new RangeError(`permits must be an integer from 0 to 2147483647, got ${initialPermits}`);
            this.ensureInit()?.catch(() => { }); // (the error, if any, reaches the first command)
        }
    }
    /** SEM.INIT once, before this object's first command (tried again by the next one if it failed). */
    ensureInit() {
        if (this.initialPermits === undefined || this.initDone)
            return undefined;
        if (!this.initializing) {
            this.initializing = this.init(this.initialPermits).then(() => {
                this.initDone = true;
                this.initializing = undefined;
            }, (e) => {
                this.initializing = undefined;
                throw e;
            });
        }
        return this.initializing;
    }
    /** Sets the semaphore's permits if it does not exist (`SEM.INIT`): true if set, false if it existed (nothing changed). */
    async init(permits) {
        return num(await this.s.call(this.key, ["SEM.INIT", this.key, String(permits)])) === 1;
    }
    async acquire(a, b) {
        const permits = typeof a === "number" ? a : 1;
        const opts = (typeof a === "object" ? a : b) ?? {};
        checkCount("permits", permits, MAX_PERMITS);
        const init = this.ensureInit();
        if (init)
            await init;
        const leaseMs = opts.leaseMs ?? this.s.leaseMs;
        const spec = {
            kind: "semaphore",
            keys: [this.key],
            owner: this.s.newOwner(),
            freshOwner: () => this.s.newOwner(),
            leaseMs,
            permits,
            timeoutMs: opts.timeoutMs,
            signal: opts.signal,
            bind: true,
        };
        const reply = await this.s.acquireRaw(spec);
        const owner = spec.owner; // (a fresh one if the wait's connection broke and it queued again)
        if (reply == null) {
            throw new errors_1.BusyError(this.key, opts.timeoutMs
                ? `semaphore '${this.key}': ${permits} permit(s) not available after ${opts.timeoutMs} ms`
                : `semaphore '${this.key}': ${permits} permit(s) not available now`);
        }
        const n = this.s.nodeFor(this.key);
        const node = typeof n === "string" ? n : await n;
        const p = new Permit(this.s, this.key, owner, num(reply), leaseMs, () => this.s.unregister(p));
        this.s.register(p, node, true);
        return p;
    }
    async tryAcquire(a, b) {
        const permits = typeof a === "number" ? a : 1;
        const opts = (typeof a === "object" ? a : b) ?? {};
        try {
            return await this.acquire(permits, { ...opts, timeoutMs: 0 });
        }
        catch (e) {
            if (e instanceof errors_1.BusyError)
                return undefined;
            throw e;
        }
    }
    async using(a, b, c) {
        const permits = typeof a === "number" ? a : 1;
        const opts = typeof b === "object" ? b : {};
        const fn = (typeof a === "function" ? a : typeof b === "function" ? b : c);
        const permit = await this.acquire(permits, opts);
        let result;
        try {
            result = await fn(permit.signal, permit);
        }
        catch (e) {
            if (!permit.lost)
                await permit.release().catch(() => { });
            throw e;
        }
        if (permit.lost)
            throw permit.signal.reason;
        try {
            await permit.release();
        }
        catch (e) {
            if (!(e instanceof errors_1.LostError))
                throw e;
        }
        if (permit.lost)
            throw permit.signal.reason;
        return result;
    }
    /** Adds `delta` permits (negative takes them away; held ones stay held): the permits available now. */
    async add(delta) {
        const init = this.ensureInit();
        if (init)
            await init;
        return num(await this.s.call(this.key, ["SEM.ADD", this.key, String(delta)]));
    }
    /** Permits available now (0 for a semaphore that does not exist). */
    async available() {
        return (await this.info())?.available ?? 0;
    }
    /** `SEM.INFO`: permits, available, holders, waiters; null when the semaphore does not exist. */
    async info() {
        const init = this.ensureInit();
        if (init)
            await init;
        const reply = await this.s.call(this.key, ["SEM.INFO", this.key]);
        if (reply == null)
            return null;
        const r = toRecord(reply);
        const holders = Array.isArray(r.holders) ? r.holders : [];
        return {
            permits: num(r.permits),
            available: num(r.available),
            holders: holders.map((h) => {
                const x = toRecord(h);
                const holder = { owner: String(x.owner), permits: num(x.permits), ttlMs: num(x.ttl) };
                if (x.keepalive_client !== undefined && x.keepalive_client !== null)
                    holder.keepaliveClient = num(x.keepalive_client);
                return holder;
            }),
            waiters: num(r.waiters),
        };
    }
}
exports.Semaphore = Semaphore;
/** A count-down latch named `key` (Redisson's `RCountDownLatch` layout): open once its count reaches zero. */
class Latch {
    s;
    key;
    /** @internal */
    constructor(s, key) {
        this.s = s;
        this.key = key;
    }
    /** Sets the count if the latch does not exist (`LATCH.INIT`): true if set, false if it existed. `ttlMs`: it expires after that. */
    async init(count, opts = {}) {
        checkCount("count", count, 2 ** 53);
        const args = ["LATCH.INIT", this.key, String(count)];
        if (opts.ttlMs !== undefined)
            args.push("PX", String(opts.ttlMs));
        return num(await this.s.call(this.key, args)) === 1;
    }
    /** Counts down by `n` (default 1): the count left (0: open, the key is gone, every waiter is woken). */
    async countDown(n = 1) {
        checkCount("n", n, Number.MAX_SAFE_INTEGER);
        return num(await this.s.call(this.key, ["LATCH.COUNTDOWN", this.key, String(n)]));
    }
    /** The count now (0 when open: the latch does not exist). */
    async count() {
        return (await this.info())?.count ?? 0;
    }
    /** `LATCH.INFO`: count, ttl, waiters; null when the latch does not exist (open). */
    async info() {
        const reply = await this.s.call(this.key, ["LATCH.INFO", this.key]);
        if (reply == null)
            return null;
        const r = toRecord(reply);
        return { count: num(r.count), ttlMs: num(r.ttl), waiters: num(r.waiters) };
    }
    /**
     * Waits until the latch opens (`LATCH.AWAIT ... BLOCK`, on a pooled connection): true when
     * open, false when `timeoutMs` ran out. Rejects with `LatchGoneError` when the latch ends
     * without reaching zero (deleted, flushed, overwritten, expired), with `signal.reason` when
     * aborted.
     */
    async wait(opts = {}) {
        let reply;
        try {
            reply = await this.s.acquireRaw({
                kind: "latch",
                keys: [this.key],
                owner: "",
                leaseMs: 0,
                timeoutMs: opts.timeoutMs,
                signal: opts.signal,
                bind: false,
            });
        }
        catch (e) {
            if (e instanceof errors_1.LockError && e.code === "GONE")
                throw new errors_1.LatchGoneError(this.key, e.message, { cause: e });
            throw e;
        }
        return reply != null;
    }
}
exports.Latch = Latch;
//# sourceMappingURL=semaphore.js.map