// Semaphores (SEM.*) and count-down latches (LATCH.*) over a Session: permits are bound to the
// session connection like lock holds (`SESSION token`), re-attached with SEM.RENEW, waited for
// with BLOCK on pooled connections, and a cancelled wait leaves nothing (LOCK.CANCEL, then
// SEM.RELEASE).

import { EventEmitter } from "node:events";

import { BusyError, LatchGoneError, LockError, LostError, NotOwnerError, replyCode, toLockError } from "./errors";
import type { AcquireOptions, Bindable, Binding, Session } from "./session";

/** One holder of a semaphore, as `SEM.INFO` reports it. */
export interface SemaphoreHolder {
  owner: string;
  permits: number;
  /** Ms left of its lease; -1 for none (a Redisson permit without one). */
  ttlMs: number;
  /** The connection that keeps the permits alive (the session connection), when kept alive. */
  keepaliveClient?: number;
}

/** `SEM.INFO`: the semaphore as the server sees it. */
export interface SemaphoreInfo {
  /** Available plus held by owners. */
  permits: number;
  /** Available now (permits whose lease has ended count as available). */
  available: number;
  /** One per owner with live permits, ordered by owner. */
  holders: SemaphoreHolder[];
  /** Callers queued on this server. */
  waiters: number;
}

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

/** @internal A map reply (RESP3 map, or RESP2 flat array of pairs) as a plain object. */
export function toRecord(v: unknown): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  if (Array.isArray(v)) {
    for (let i = 0; i + 1 < v.length; i += 2) o[String(v[i])] = v[i + 1];
  } else if (v instanceof Map) {
    for (const [k, x] of v) o[String(k)] = x;
  } else if (v && typeof v === "object") {
    Object.assign(o, v);
  }
  return o;
}

function num(v: unknown): number {
  if (typeof v === "number") return v;
  if (typeof v === "bigint" || typeof v === "string") return Number(v);
  if (Buffer.isBuffer(v)) return Number(v.toString());
  throw new LockError(`unexpected reply ${String(v)}`);
}

function checkCount(what: string, n: number, max: number): void {
  if (!Number.isInteger(n) || n < 1 || n > max) throw new RangeError(`${what} must be an integer from 1 to ${max}, got ${n}`);
}

/** The most permits one SEM.ACQUIRE may ask for. */
const MAX_PERMITS = 100000;

/**
 * Permits of a semaphore held by one owner (fresh for each acquisition), bound to the session:
 * the server renews their lease while the session connection lives. `signal` aborts with a
 * `LostError` when they are lost.
 */
export class Permit extends EventEmitter implements Bindable {
  readonly key: string;
  readonly owner: string;
  /** Permits this handle holds now (0 once released or lost). */
  permits: number;
  leaseMs: number;
  private controller?: AbortController;
  private lostError?: LostError;
  private releasing?: Promise<void>;
  /** @internal */
  bindings?: Binding[];

  /** @internal */
  constructor(
    private readonly s: Session,
    key: string,
    owner: string,
    permits: number,
    leaseMs: number,
    private readonly onEnd: () => void,
  ) {
    super();
    this.key = key;
    this.owner = owner;
    this.permits = permits;
    this.leaseMs = leaseMs;
  }

  /** @internal */
  get keys(): string[] {
    return [this.key];
  }

  /** Aborted (with a `LostError` reason) when the permits are lost. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.lostError) this.controller.abort(this.lostError);
    }
    return this.controller.signal;
  }

  get lost(): boolean {
    return this.lostError !== undefined;
  }

  get released(): boolean {
    return this.permits === 0 && !this.lostError;
  }

  /** Calls `cb` once if the permits are lost. */
  onLost(cb: (err: LostError) => void): this {
    return this.once("lost", cb);
  }

  /** @internal */
  markLost(err: LostError): void {
    if (this.lostError || this.permits === 0) return;
    this.lostError = err;
    this.permits = 0;
    this.onEnd();
    this.controller?.abort(err);
    this.emit("lost", err);
  }

  private lostBy(e: unknown): LostError | undefined {
    const code = replyCode(e) ?? (e instanceof NotOwnerError ? "NOTOWNER" : undefined);
    if (code === "NOTOWNER") return new LostError(this.key, this.owner, "notowner", "semaphore");
    if (code === "EXPIRED") return new LostError(this.key, this.owner, "gone", "semaphore");
    return undefined;
  }

  /**
   * Gives back `n` permits (default: all). Permits that were lost reject with their LostError;
   * `NOTOWNER` / `EXPIRED` (their lease ended) mark them lost and reject with a LostError.
   */
  release(n?: number): Promise<void> {
    if (this.lostError) return Promise.reject(this.lostError);
    if (this.permits === 0) return Promise.resolve();
    if (n !== undefined) {
      checkCount("permits to release", n, this.permits);
      if (n === this.permits) n = undefined;
    }
    if (n === undefined) {
      // Two calls releasing everything share one SEM.RELEASE (a second would be NOTOWNER).
      if (!this.releasing) this.releasing = this.send(undefined).finally(() => (this.releasing = undefined));
      return this.releasing;
    }
    return this.send(n);
  }

  private async send(n: number | undefined): Promise<void> {
    const args = ["SEM.RELEASE", this.key, this.owner];
    if (n !== undefined) args.push("PERMITS", String(n));
    let left: number;
    try {
      left = num(await this.s.adapter.call(this.key, args));
    } catch (e) {
      const lost = this.lostBy(e);
      if (lost) {
        this.markLost(lost);
        throw lost;
      }
      throw toLockError(e);
    }
    if (this.permits === 0) return;
    this.permits = left;
    if (left === 0) {
      this.onEnd();
      this.emit("released");
    }
  }

  /** @internal Session close. */
  async releaseAll(): Promise<void> {
    if (this.permits > 0 && !this.lostError) await this.release();
  }

  /** Sets a new lease from now on all of them (default: the current one). NOTOWNER / EXPIRED -> lost, LostError. */
  async extend(leaseMs?: number): Promise<void> {
    if (this.lostError) throw this.lostError;
    if (this.permits === 0) throw new NotOwnerError("the permits were released");
    const lease = leaseMs ?? this.leaseMs;
    try {
      await this.s.adapter.call(this.key, ["SEM.RENEW", this.key, this.owner, "PX", String(lease), "SESSION", this.s.token]);
    } catch (e) {
      const lost = this.lostBy(e);
      if (lost) {
        this.markLost(lost);
        throw lost;
      }
      throw toLockError(e);
    }
    this.leaseMs = lease;
    for (const b of this.bindings ?? []) b.leaseMs = Math.max(b.leaseMs, lease);
  }
}

/**
 * A counting semaphore named `key`, shared with Redisson's `RSemaphore` /
 * `RPermitExpirableSemaphore` layout. Waiters are served first come, first served, whatever
 * they ask for (a caller asking for 3 is never overtaken by callers asking for 1).
 */
export class Semaphore {
  private initDone = false;
  private initializing?: Promise<unknown>;

  /** @internal */
  constructor(
    private readonly s: Session,
    readonly key: string,
    private readonly initialPermits?: number,
  ) {
    if (initialPermits !== undefined) {
      if (!Number.isSafeInteger(initialPermits) || initialPermits < 0 || initialPermits > 2147483647)
        throw new RangeError(`permits must be an integer from 0 to 2147483647, got ${initialPermits}`);
      this.ensureInit()?.catch(() => {}); // (the error, if any, reaches the first command)
    }
  }

  /** SEM.INIT once, before this object's first command (tried again by the next one if it failed). */
  private ensureInit(): Promise<unknown> | undefined {
    if (this.initialPermits === undefined || this.initDone) return undefined;
    if (!this.initializing) {
      this.initializing = this.init(this.initialPermits).then(
        () => {
          this.initDone = true;
          this.initializing = undefined;
        },
        (e) => {
          this.initializing = undefined;
          throw e;
        },
      );
    }
    return this.initializing;
  }

  /** Sets the semaphore's permits if it does not exist (`SEM.INIT`): true if set, false if it existed (nothing changed). */
  async init(permits: number): Promise<boolean> {
    return num(await this.s.call(this.key, ["SEM.INIT", this.key, String(permits)])) === 1;
  }

  /**
   * Takes `permits` (default 1) for a fresh owner, bound to the session. `timeoutMs`: 0 tries
   * once (without overtaking anyone queued), undefined waits as long as it takes, else waits that
   * long, then `BusyError`. An aborted `signal` rejects with `signal.reason`; nothing is left
   * queued or held (`LOCK.CANCEL`, then `SEM.RELEASE` for a grant that crossed it).
   */
  acquire(opts?: AcquireOptions): Promise<Permit>;
  acquire(permits: number, opts?: AcquireOptions): Promise<Permit>;
  async acquire(a?: number | AcquireOptions, b?: AcquireOptions): Promise<Permit> {
    const permits = typeof a === "number" ? a : 1;
    const opts = (typeof a === "object" ? a : b) ?? {};
    checkCount("permits", permits, MAX_PERMITS);
    const init = this.ensureInit();
    if (init) await init;
    const leaseMs = opts.leaseMs ?? this.s.leaseMs;
    const spec = {
      kind: "semaphore" as const,
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
      throw new BusyError(
        this.key,
        opts.timeoutMs
          ? `semaphore '${this.key}': ${permits} permit(s) not available after ${opts.timeoutMs} ms`
          : `semaphore '${this.key}': ${permits} permit(s) not available now`,
      );
    }
    const n = this.s.nodeFor(this.key);
    const node = typeof n === "string" ? n : await n;
    const p: Permit = new Permit(this.s, this.key, owner, num(reply), leaseMs, () => this.s.unregister(p));
    this.s.register(p, node, true);
    return p;
  }

  /** Takes `permits` if they are available now and nobody is queued: the Permit, or undefined. */
  tryAcquire(opts?: Omit<AcquireOptions, "timeoutMs">): Promise<Permit | undefined>;
  tryAcquire(permits: number, opts?: Omit<AcquireOptions, "timeoutMs">): Promise<Permit | undefined>;
  async tryAcquire(a?: number | Omit<AcquireOptions, "timeoutMs">, b?: Omit<AcquireOptions, "timeoutMs">): Promise<Permit | undefined> {
    const permits = typeof a === "number" ? a : 1;
    const opts = (typeof a === "object" ? a : b) ?? {};
    try {
      return await this.acquire(permits, { ...opts, timeoutMs: 0 });
    } catch (e) {
      if (e instanceof BusyError) return undefined;
      throw e;
    }
  }

  /**
   * Runs `fn` holding `permits` (default 1), then gives them back. `signal` aborts with a
   * `LostError` if they are lost; `using` then rejects with that error even if `fn` resolved.
   */
  using<T>(fn: (signal: AbortSignal, permit: Permit) => Promise<T>): Promise<T>;
  using<T>(permits: number, fn: (signal: AbortSignal, permit: Permit) => Promise<T>): Promise<T>;
  using<T>(permits: number, opts: AcquireOptions, fn: (signal: AbortSignal, permit: Permit) => Promise<T>): Promise<T>;
  async using<T>(
    a: number | ((signal: AbortSignal, permit: Permit) => Promise<T>),
    b?: AcquireOptions | ((signal: AbortSignal, permit: Permit) => Promise<T>),
    c?: (signal: AbortSignal, permit: Permit) => Promise<T>,
  ): Promise<T> {
    const permits = typeof a === "number" ? a : 1;
    const opts = typeof b === "object" ? b : {};
    const fn = (typeof a === "function" ? a : typeof b === "function" ? b : c)!;
    const permit = await this.acquire(permits, opts);
    let result: T;
    try {
      result = await fn(permit.signal, permit);
    } catch (e) {
      if (!permit.lost) await permit.release().catch(() => {});
      throw e;
    }
    if (permit.lost) throw permit.signal.reason;
    try {
      await permit.release();
    } catch (e) {
      if (!(e instanceof LostError)) throw e;
    }
    if (permit.lost) throw permit.signal.reason;
    return result;
  }

  /** Adds `delta` permits (negative takes them away; held ones stay held): the permits available now. */
  async add(delta: number): Promise<number> {
    const init = this.ensureInit();
    if (init) await init;
    return num(await this.s.call(this.key, ["SEM.ADD", this.key, String(delta)]));
  }

  /** Permits available now (0 for a semaphore that does not exist). */
  async available(): Promise<number> {
    return (await this.info())?.available ?? 0;
  }

  /** `SEM.INFO`: permits, available, holders, waiters; null when the semaphore does not exist. */
  async info(): Promise<SemaphoreInfo | null> {
    const init = this.ensureInit();
    if (init) await init;
    const reply = await this.s.call(this.key, ["SEM.INFO", this.key]);
    if (reply == null) return null;
    const r = toRecord(reply);
    const holders = Array.isArray(r.holders) ? r.holders : [];
    return {
      permits: num(r.permits),
      available: num(r.available),
      holders: holders.map((h) => {
        const x = toRecord(h);
        const holder: SemaphoreHolder = { owner: String(x.owner), permits: num(x.permits), ttlMs: num(x.ttl) };
        if (x.keepalive_client !== undefined && x.keepalive_client !== null) holder.keepaliveClient = num(x.keepalive_client);
        return holder;
      }),
      waiters: num(r.waiters),
    };
  }
}

/** A count-down latch named `key` (Redisson's `RCountDownLatch` layout): open once its count reaches zero. */
export class Latch {
  /** @internal */
  constructor(
    private readonly s: Session,
    readonly key: string,
  ) {}

  /** Sets the count if the latch does not exist (`LATCH.INIT`): true if set, false if it existed. `ttlMs`: it expires after that. */
  async init(count: number, opts: { ttlMs?: number } = {}): Promise<boolean> {
    checkCount("count", count, 2 ** 53);
    const args = ["LATCH.INIT", this.key, String(count)];
    if (opts.ttlMs !== undefined) args.push("PX", String(opts.ttlMs));
    return num(await this.s.call(this.key, args)) === 1;
  }

  /** Counts down by `n` (default 1): the count left (0: open, the key is gone, every waiter is woken). */
  async countDown(n = 1): Promise<number> {
    checkCount("n", n, Number.MAX_SAFE_INTEGER);
    return num(await this.s.call(this.key, ["LATCH.COUNTDOWN", this.key, String(n)]));
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
    return { count: num(r.count), ttlMs: num(r.ttl), waiters: num(r.waiters) };
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
      reply = await this.s.acquireRaw({
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
