// Locks: an exclusive lock, a read-write lock (two Locks sharing one owner), a multi-lock (every
// key at once), and the Hold an acquisition gives (fencing tokens, release, extend, loss). Built
// on the session core: waits go through the core's acquire path, holds are bound to the session.

import { BusyError, LostError, NotOwnerError, toLockError } from "./errors";
import { Kind, acquireRaw } from "./core/acquire";
import type { Bindable, Binding } from "./core/bindings";
import { Held } from "./core/hold";
import type { AcquireOptions, SessionCore } from "./core/session";
import { toBigInt } from "./core/util";

/** @internal The owner id a Lock (or both sides of an RWLock) uses while it holds: fresh per first acquisition. */
export class OwnerSlot {
  owner?: string;
  holds = 0;
  constructor(private readonly s: SessionCore) {}
  take(): string {
    if (!this.owner || this.holds === 0) this.owner = this.s.newOwner();
    return this.owner;
  }
  /** A fresh owner for a wait queued again after its connection broke (nothing holds as the old one). */
  renew(): string {
    this.owner = this.s.newOwner();
    return this.owner;
  }
  /** An owner given by the caller (checked by SessionCore.checkOwner): kept for the other side of a read-write lock. */
  use(owner: string): string {
    this.owner = owner;
    return owner;
  }
}

/**
 * A hold on a lock. `signal` aborts with a `LostError` when the hold is lost. A hold acquired
 * again through the same Lock object (re-entry) is the same Hold with `count` one more;
 * `release()` drops one.
 */
export class Hold extends Held implements Bindable {
  readonly keys: string[];
  readonly owner: string;
  /** Fencing token of the latest acquisition (of the first key, for a multi-lock). Below 2^53 today, exact as a bigint. */
  token: bigint;
  /** Fencing token per key (a multi-lock). */
  tokens: bigint[];
  /** Holds this object stands for (re-entries). 0 once released. */
  count = 1;
  leaseMs: number;
  readonly kind: Kind;
  /** @internal The session's bindings this hold is in (while bound and not ended). */
  bindings?: Binding[];

  /** @internal */
  constructor(
    private readonly s: SessionCore,
    kind: Kind,
    keys: string[],
    owner: string,
    tokens: bigint[],
    leaseMs: number,
    private readonly onEnd: () => void,
    readonly bound: boolean,
  ) {
    super();
    this.kind = kind;
    this.keys = keys;
    this.owner = owner;
    this.tokens = tokens;
    this.token = tokens[0];
    this.leaseMs = leaseMs;
  }

  get key(): string {
    return this.keys[0];
  }

  /** `token` in decimal: for JSON, logs and storage APIs that take no bigint (`JSON.stringify` throws on a bigint). */
  get tokenString(): string {
    return this.token.toString();
  }

  /** @internal A fresh controller made ahead for `signal` (kept only if the hold has none yet). */
  adoptController(c: AbortController): void {
    if (this.controller) return;
    this.controller = c;
    if (this.lostError) c.abort(this.lostError);
  }

  get released(): boolean {
    return this.count === 0;
  }

  /** @internal */
  markLost(err: LostError): void {
    if (this.lostError || this.count === 0) return;
    this.lostError = err;
    this.count = 0;
    this.onEnd();
    this.announceLost(err);
  }

  private releaseArgs(): string[] {
    if (this.kind === "multi") return ["LOCK.MRELEASE", String(this.keys.length), ...this.keys, this.owner];
    const args = ["LOCK.RELEASE", this.key, this.owner];
    if (this.kind === "read") args.push("READ");
    if (this.kind === "write") args.push("WRITE");
    return args;
  }

  /** Drops one hold (the last one releases the lock). A lost hold rejects with its LostError; NOTOWNER marks it lost. */
  async release(): Promise<void> {
    if (this.lostError) throw this.lostError;
    if (this.count === 0) return;
    try {
      await this.s.adapter.call(this.key, this.releaseArgs());
    } catch (e) {
      const le = toLockError(e);
      if (le instanceof NotOwnerError) {
        const err = new LostError(this.key, this.owner, "notowner");
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
  async releaseAll(): Promise<void> {
    while (this.count > 0 && !this.lostError) await this.release();
  }

  /** Sets a new lease from now (default: the current one). NOTOWNER -> the hold is lost, LostError. */
  async extend(leaseMs?: number): Promise<void> {
    if (this.lostError) throw this.lostError;
    if (this.count === 0) throw new NotOwnerError("the hold was released");
    const lease = leaseMs ?? this.leaseMs;
    for (const key of this.keys) {
      const args = ["LOCK.RENEW", key, this.owner, "PX", String(lease)];
      if (this.bound) args.push("SESSION", this.s.token);
      try {
        await this.s.call(key, args);
      } catch (e) {
        if (e instanceof NotOwnerError) {
          const err = new LostError(key, this.owner, "notowner");
          this.markLost(err);
          throw err;
        }
        throw e;
      }
    }
    this.leaseMs = lease;
  }
}

/** An exclusive lock (or one side of a read-write lock, or a multi-lock). Reentrant through this object. */
export class Lock {
  private current?: Hold;
  private queue?: Promise<unknown>;
  private inFlight = 0;

  /** @internal */
  constructor(
    protected readonly s: SessionCore,
    readonly kind: Kind,
    readonly keys: string[],
    private readonly slot: OwnerSlot,
  ) {}

  get key(): string {
    return this.keys[0];
  }

  /** The hold this object has now, if any. */
  get hold(): Hold | undefined {
    return this.current && this.current.count > 0 ? this.current : undefined;
  }

  /**
   * Takes the lock, waiting up to `timeoutMs` (BusyError after), cancelled by `signal`. Called
   * again on this object while it holds, it re-enters: the same Hold, `count` one more.
   */
  acquire(opts: AcquireOptions = {}): Promise<Hold> {
    // Calls on one object run one after another, so a second call sees the first one's hold.
    const run =
      this.inFlight === 0
        ? this.acquireNow(opts, true, true)
        : this.queue!.then(
            () => this.acquireNow(opts, true, true),
            () => this.acquireNow(opts, true, true),
          );
    this.inFlight++;
    this.queue = run; // (its rejection is the caller's; a later call chains on both outcomes)
    return run;
  }

  /** Takes the lock if it is free now: the Hold, or undefined when another owner has it. */
  async tryAcquire(opts: Omit<AcquireOptions, "timeoutMs"> = {}): Promise<Hold | undefined> {
    try {
      return await this.acquire({ ...opts, timeoutMs: 0 });
    } catch (e) {
      if (e instanceof BusyError) return undefined;
      throw e;
    }
  }

  /** @internal */
  async acquireNow(opts: AcquireOptions, bind: boolean, counted = false): Promise<Hold> {
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
      const reply = await acquireRaw(this.s, spec);
      const owner = spec.owner;
      if (reply == null) {
        if (held) throw new BusyError(this.key, `re-entry of '${this.key}' refused`);
        throw new BusyError(
          this.key,
          opts.timeoutMs ? `lock '${this.keys.join("', '")}' still held after ${opts.timeoutMs} ms` : undefined,
        );
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
      const hold = new Hold(
        this.s,
        this.kind,
        this.keys,
        owner,
        tokens,
        leaseMs,
        () => {
          this.slot.holds--;
          if (bind) this.s.unregister(hold);
        },
        bind,
      );
      if (bind) this.s.register(hold, node);
      this.current = hold;
      return hold;
  
    } finally {
      if (counted) this.inFlight--; // (a call of acquire(): see there)
    }
  }

  /**
   * Runs `fn` holding the lock and releases it after. `signal` aborts if the hold is lost while
   * `fn` runs; `using` then rejects with the LostError even if `fn` resolved. A loss after `fn`
   * resolved (while releasing) does not undo its result: `using` resolves with it.
   */
  using<T>(fn: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
  using<T>(opts: AcquireOptions, fn: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
  async using<T>(
    a: AcquireOptions | ((signal: AbortSignal, hold: Hold) => Promise<T>),
    b?: (signal: AbortSignal, hold: Hold) => Promise<T>,
  ): Promise<T> {
    const opts = typeof a === "function" ? {} : a;
    const fn = typeof a === "function" ? a : b!;
    const acquiring = this.acquire(opts);
    // The callback's AbortSignal (Node takes microseconds to make one) is made while the acquire
    // is on its way, not between the grant and the callback.
    const controller = new AbortController();
    void controller.signal;
    const hold = await acquiring;
    hold.adoptController(controller);
    let result: T;
    try {
      result = await fn(hold.signal, hold);
    } catch (e) {
      if (!hold.lost) await hold.release().catch(() => {});
      throw e;
    }
    // Lost while fn ran: its work may not have been protected.
    if (hold.lost) throw hold.signal.reason;
    try {
      await hold.release();
    } catch (e) {
      // Lost after fn returned (the release found no hold): the work was done under the lock.
      if (!(e instanceof LostError)) throw e;
    }
    return result;
  }
}

/** A read-write lock: `read` and `write` are Locks of one owner, so a writer may downgrade and a sole reader upgrade. */
export class RWLock {
  readonly read: Lock;
  readonly write: Lock;
  /** @internal */
  constructor(s: SessionCore, readonly key: string) {
    const slot = new OwnerSlot(s);
    this.read = new Lock(s, "read", [key], slot);
    this.write = new Lock(s, "write", [key], slot);
  }
}

/** Every key at once or none (`LOCK.MACQUIRE`): waits as one unit, never deadlocks on key order. */
export class MultiLock extends Lock {
  /** @internal */
  constructor(s: SessionCore, keys: string[]) {
    super(s, "multi", keys, new OwnerSlot(s));
  }
}
