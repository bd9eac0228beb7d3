// Semaphores (SEM.*) over the session core: permits are bound to the session connection like
// lock holds (`SESSION token`), re-attached with SEM.RENEW, waited for with BLOCK on pooled
// connections (the core's acquire path), and a cancelled wait leaves nothing (LOCK.CANCEL, then
// SEM.RELEASE).

import { BusyError, LostError, NotOwnerError, replyCode, toLockError } from "./errors";
import { acquireRaw } from "./core/acquire";
import type { Bindable, Binding } from "./core/bindings";
import { Held } from "./core/hold";
import type { AcquireOptions, SessionCore } from "./core/session";
import { checkCount, toNumber, toRecord } from "./core/util";

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

/** The most permits one SEM.ACQUIRE may ask for. */
const MAX_PERMITS = 100000;

/**
 * Permits of a semaphore held by one owner (fresh for each acquisition), bound to the session:
 * the server renews their lease while the session connection lives. `signal` aborts with a
 * `LostError` when they are lost.
 */
export class Permit extends Held implements Bindable {
  readonly key: string;
  readonly owner: string;
  /** Permits this handle holds now (0 once released or lost). */
  permits: number;
  leaseMs: number;
  private releasing?: Promise<void>;
  /** @internal */
  bindings?: Binding[];

  /** @internal */
  constructor(
    private readonly s: SessionCore,
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

  get released(): boolean {
    return this.permits === 0 && !this.lostError;
  }

  /** @internal */
  markLost(err: LostError): void {
    if (this.lostError || this.permits === 0) return;
    this.lostError = err;
    this.permits = 0;
    this.onEnd();
    this.announceLost(err);
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
      left = toNumber(await this.s.adapter.call(this.key, args));
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
    private readonly s: SessionCore,
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
    return toNumber(await this.s.call(this.key, ["SEM.INIT", this.key, String(permits)])) === 1;
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
    const reply = await acquireRaw(this.s, spec);
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
    const p: Permit = new Permit(this.s, this.key, owner, toNumber(reply), leaseMs, () => this.s.unregister(p));
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
    return toNumber(await this.s.call(this.key, ["SEM.ADD", this.key, String(delta)]));
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
      permits: toNumber(r.permits),
      available: toNumber(r.available),
      holders: holders.map((h) => {
        const x = toRecord(h);
        const holder: SemaphoreHolder = { owner: String(x.owner), permits: toNumber(x.permits), ttlMs: toNumber(x.ttl) };
        if (x.keepalive_client !== undefined && x.keepalive_client !== null) holder.keepaliveClient = toNumber(x.keepalive_client);
        return holder;
      }),
      waiters: toNumber(r.waiters),
    };
  }
}
