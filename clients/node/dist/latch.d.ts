import type { SessionCore } from "./core/session";
/** `LATCH.INFO`. */
export interface LatchInfo {
    count: number;
    /** Ms left before the latch expires; -1 for none. */
    ttlMs: number;
    /** Callers waiting on this server. */
    waiters: number;
}
export interface LatchWaitOptions {
    /** How long to wait, in ms: 0 looks once; undefined waits as long as it takes. */
    timeoutMs?: number;
    /** Cancels the wait (its connection is closed, which ends it in the server); rejects with `signal.reason`. */
    signal?: AbortSignal;
}
/** A count-down latch named `key` (Redisson's `RCountDownLatch` layout): open once its count reaches zero. */
export declare class Latch {
    private readonly s;
    readonly key: string;
    /** @internal */
    constructor(s: SessionCore, key: string);
    /** Sets the count if the latch does not exist (`LATCH.INIT`): true if set, false if it existed. `ttlMs`: it expires after that. */
    init(count: number, opts?: {
        ttlMs?: number;
    }): Promise<boolean>;
    /** Counts down by `n` (default 1): the count left (0: open, the key is gone, every waiter is woken). */
    countDown(n?: number): Promise<number>;
    /** The count now (0 when open: the latch does not exist). */
    count(): Promise<number>;
    /** `LATCH.INFO`: count, ttl, waiters; null when the latch does not exist (open). */
    info(): Promise<LatchInfo | null>;
    /**
     * Waits until the latch opens (`LATCH.AWAIT ... BLOCK`, on a pooled connection): true when
     * open, false when `timeoutMs` ran out. Rejects with `LatchGoneError` when the latch ends
     * without reaching zero (deleted, flushed, overwritten, expired), with `signal.reason` when
     * aborted.
     */
    wait(opts?: LatchWaitOptions): Promise<boolean>;
}
