"use strict";
// Count-down latches (LATCH.*, Redisson's RCountDownLatch layout) over the session core: a wait
// is a BLOCK on a pooled connection (the core's acquire path, with no owner and nothing bound).
Object.defineProperty(exports, "__esModule", { value: true });
exports.Latch = void 0;
const errors_1 = require("./errors");
const acquire_1 = require("./core/acquire");
const util_1 = require("./core/util");
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
        (0, util_1.checkCount)("count", count, 2 ** 53);
        const args = ["LATCH.INIT", this.key, String(count)];
        if (opts.ttlMs !== undefined)
            args.push("PX", String(opts.ttlMs));
        return (0, util_1.toNumber)(await this.s.call(this.key, args)) === 1;
    }
    /** Counts down by `n` (default 1): the count left (0: open, the key is gone, every waiter is woken). */
    async countDown(n = 1) {
        (0, util_1.checkCount)("n", n, Number.MAX_SAFE_INTEGER);
        return (0, util_1.toNumber)(await this.s.call(this.key, ["LATCH.COUNTDOWN", this.key, String(n)]));
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
        const r = (0, util_1.toRecord)(reply);
        return { count: (0, util_1.toNumber)(r.count), ttlMs: (0, util_1.toNumber)(r.ttl), waiters: (0, util_1.toNumber)(r.waiters) };
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
            reply = await (0, acquire_1.acquireRaw)(this.s, {
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
//# sourceMappingURL=latch.js.map