// Count-down latches (LATCH.*, Redisson's RCountDownLatch layout) over the session core: a wait
// is a BLOCK on a pooled connection (the core's acquire path, with no owner and nothing bound).

import { LatchGoneError, LockError } from "./errors";
import { acquireRaw } from "./core/acquire";
import type { SessionCore } from "./core/session";
import { checkCount, toNumber, toRecord } from "./core/util";

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
export class Latch {
  /** @internal */
  constructor(
    private readonly s: SessionCore,
    readonly key: string,
  ) {}

  /** Sets the count if the latch does not exist (`LATCH.INIT`): true if set, false if it existed. `ttlMs`: it expires after that. */
  async init(count: number, opts: { ttlMs?: number } = {}): Promise<boolean> {
    checkCount("count", count, 2 ** 53);
    const args = ["LATCH.INIT", this.key, String(count)];
    if (opts.ttlMs !== undefined) args.push("PX", String(opts.ttlMs));
    return toNumber(await this.s.call(this.key, args)) === 1;
  }

  /** Counts down by `n` (default 1): the count left (0: open, the key is gone, every waiter is woken). */
  async countDown(n = 1): Promise<number> {
    checkCount("n", n, Number.MAX_SAFE_INTEGER);
    return toNumber(await this.s.call(this.key, ["LATCH.COUNTDOWN", this.key, String(n)]));
  }

  /** The count now (0 when open: the latch does not exist). */
  async count(): Promise<number> {
    return (await this.info())?.count ?? 0;
  }

  /** `LATCH.INFO`: count, ttl, waiters; null when the latch does not exist (open). */
  async info(): Promise<LatchInfo | null> {
    const reply = await this.s.call(this.key, ["LATCH.INFO", this.key]);
    if (reply == null) return null;
    const r = toRecord(reply);
    return { count: toNumber(r.count), ttlMs: toNumber(r.ttl), waiters: toNumber(r.waiters) };
  }

  /**
   * Waits until the latch opens (`LATCH.AWAIT ... BLOCK`, on a pooled connection): true when
   * open, false when `timeoutMs` ran out. Rejects with `LatchGoneError` when the latch ends
   * without reaching zero (deleted, flushed, overwritten, expired), with `signal.reason` when
   * aborted.
   */
  async wait(opts: LatchWaitOptions = {}): Promise<boolean> {
    let reply: unknown;
    try {
      reply = await acquireRaw(this.s, {
        kind: "latch",
        keys: [this.key],
        owner: "",
        leaseMs: 0,
        timeoutMs: opts.timeoutMs,
        signal: opts.signal,
        bind: false,
      });
    } catch (e) {
      if (e instanceof LockError && e.code === "GONE") throw new LatchGoneError(this.key, e.message, { cause: e });
      throw e;
    }
    return reply != null;
  }
}
