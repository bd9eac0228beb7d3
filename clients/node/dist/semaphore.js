"use strict";
// Semaphores (SEM.*) over the session core: permits are bound to the session connection like
// lock holds (`SESSION token`), re-attached with SEM.RENEW, waited for with BLOCK on pooled
// connections (the core's acquire path), and a cancelled wait leaves nothing (LOCK.CANCEL, then
// SEM.RELEASE).
Object.defineProperty(exports, "__esModule", { value: true });
exports.Semaphore = exports.Permit = void 0;
const errors_1 = require("./errors");
const acquire_1 = require("./core/acquire");
const hold_1 = require("./core/hold");
const util_1 = require("./core/util");
/** The most permits one SEM.ACQUIRE may ask for. */
const MAX_PERMITS = 100000;
/**
 * Permits of a semaphore held by one owner (fresh for each acquisition), bound to the session:
 * the server renews their lease while the session connection lives. `signal` aborts with a
 * `LostError` when they are lost.
 */
class Permit extends hold_1.Held {
    s;
    onEnd;
    key;
    owner;
    /** Permits this handle holds now (0 once released or lost). */
    permits;
    leaseMs;
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
    get released() {
        return this.permits === 0 && !this.lostError;
    }
    /** @internal */
    markLost(err) {
        if (this.lostError || this.permits === 0)
            return;
        this.lostError = err;
        this.permits = 0;
        this.onEnd();
        this.announceLost(err);
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
            (0, util_1.checkCount)("permits to release", n, this.permits);
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
            left = (0, util_1.toNumber)(await this.s.adapter.call(this.key, args));
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
        return (0, util_1.toNumber)(await this.s.call(this.key, ["SEM.INIT", this.key, String(permits)])) === 1;
    }
    async acquire(a, b) {
        const permits = typeof a === "number" ? a : 1;
        const opts = (typeof a === "object" ? a : b) ?? {};
        (0, util_1.checkCount)("permits", permits, MAX_PERMITS);
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
        const reply = await (0, acquire_1.acquireRaw)(this.s, spec);
        const owner = spec.owner; // (a fresh one if the wait's connection broke and it queued again)
        if (reply == null) {
            throw new errors_1.BusyError(this.key, opts.timeoutMs
                ? `semaphore '${this.key}': ${permits} permit(s) not available after ${opts.timeoutMs} ms`
                : `semaphore '${this.key}': ${permits} permit(s) not available now`);
        }
        const n = this.s.nodeFor(this.key);
        const node = typeof n === "string" ? n : await n;
        const p = new Permit(this.s, this.key, owner, (0, util_1.toNumber)(reply), leaseMs, () => this.s.unregister(p));
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
        return (0, util_1.toNumber)(await this.s.call(this.key, ["SEM.ADD", this.key, String(delta)]));
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
        const r = (0, util_1.toRecord)(reply);
        const holders = Array.isArray(r.holders) ? r.holders : [];
        return {
            permits: (0, util_1.toNumber)(r.permits),
            available: (0, util_1.toNumber)(r.available),
            holders: holders.map((h) => {
                const x = (0, util_1.toRecord)(h);
                const holder = { owner: String(x.owner), permits: (0, util_1.toNumber)(x.permits), ttlMs: (0, util_1.toNumber)(x.ttl) };
                if (x.keepalive_client !== undefined && x.keepalive_client !== null)
                    holder.keepaliveClient = (0, util_1.toNumber)(x.keepalive_client);
                return holder;
            }),
            waiters: (0, util_1.toNumber)(r.waiters),
        };
    }
}
exports.Semaphore = Semaphore;
//# sourceMappingURL=semaphore.js.map