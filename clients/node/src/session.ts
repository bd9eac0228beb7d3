// The public Session: the session core (./core/session.ts) plus the factories of every object
// (locks, semaphores, latches, elections) and `using`. It sits on top of the objects, so that
// neither the core nor any object imports it.

import type { RedisClientLike } from "./adapter";
import { SessionCore, type AcquireOptions, type SessionOptions } from "./core/session";
import { Election, ElectionOptions } from "./election";
import { Latch } from "./latch";
import { Hold, Lock, MultiLock, OwnerSlot, RWLock } from "./lock";
import { Semaphore } from "./semaphore";

/**
 * A session: one dedicated connection per server that every hold is bound to. The server
 * keeps the holds alive while it lives; holds live out their lease once it is gone.
 */
export class Session extends SessionCore {
  private constructor(client: RedisClientLike, opts: SessionOptions) {
    super(client, opts);
  }

  /**
   * Opens a session over `client` (an ioredis `Redis`/`Cluster` or a node-redis client/cluster):
   * a dedicated session connection (`client.duplicate()`), `LOCK.SESSION <token>`, subscribed to
   * its loss channel. Reads the server's shortest kept-alive lease (`INFO lock`) first.
   * Rejects with `LeaseTooShortError` (`leaseMs` below it), `AuthenticationError`,
   * `ModuleNotLoadedError` or `UnavailableError`.
   */
  static override async open(client: RedisClientLike, opts: SessionOptions = {}): Promise<Session> {
    const s = new Session(client, opts);
    await s.start();
    return s;
  }

  /** An exclusive, reentrant lock named `key`. */
  lock(key: string): Lock {
    return new Lock(this, "exclusive", [key], new OwnerSlot(this));
  }

  /** A read-write lock named `key`: `.read` and `.write` share one owner (downgrade, upgrade). */
  rwlock(key: string): RWLock {
    return new RWLock(this, key);
  }

  /** All of `keys` at once, or none (in a cluster they must share a `{hash tag}`). */
  multiLock(keys: string[]): MultiLock {
    return new MultiLock(this, keys);
  }

  /**
   * A counting semaphore named `key` (Redisson's layout). With `permits`, its permits are set
   * once (`SEM.INIT`: nothing changes if it exists), before this object's first command runs.
   */
  semaphore(key: string, permits?: number): Semaphore {
    return new Semaphore(this, key, permits);
  }

  /** The election of a leader for `name` (`ELECT.*`), its leaderships kept by this session. */
  election(name: string, opts: ElectionOptions = {}): Election {
    return new Election(this, name, opts);
  }

  /** A count-down latch named `key` (Redisson's `RCountDownLatch` layout). */
  latch(key: string): Latch {
    return new Latch(this, key);
  }

  /**
   * Runs `fn` holding `key` (or every key of an array), then releases it. `signal` aborts with a
   * `LostError` if the hold is lost; `using` then rejects with that error even if `fn` resolved.
   */
  using<T>(key: string | string[], fn: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
  using<T>(key: string | string[], opts: AcquireOptions, fn: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
  using<T>(
    key: string | string[],
    a: AcquireOptions | ((signal: AbortSignal, hold: Hold) => Promise<T>),
    b?: (signal: AbortSignal, hold: Hold) => Promise<T>,
  ): Promise<T> {
    const opts = typeof a === "function" ? {} : a;
    const fn = typeof a === "function" ? a : b!;
    const lock = Array.isArray(key) ? this.multiLock(key) : this.lock(key);
    return lock.using(opts, fn);
  }
}
