import type { RedisClientLike } from "./adapter";
import { SessionCore, type AcquireOptions, type SessionOptions } from "./core/session";
import { Election, ElectionOptions } from "./election";
import { Latch } from "./latch";
import { Hold, Lock, MultiLock, RWLock } from "./lock";
import { Semaphore } from "./semaphore";
/**
 * A session: one dedicated connection per server that every hold is bound to. The server
 * keeps the holds alive while it lives; holds live out their lease once it is gone.
 */
export declare class Session extends SessionCore {
    private constructor();
    /**
     * Opens a session over `client` (an ioredis `Redis`/`Cluster` or a node-redis client/cluster):
     * a dedicated session connection (`client.duplicate()`), `LOCK.SESSION <token>`, subscribed to
     * its loss channel. Reads the server's shortest kept-alive lease (`INFO lock`) first.
     * Rejects with `LeaseTooShortError` (`leaseMs` below it), `AuthenticationError`,
     * `ModuleNotLoadedError` or `UnavailableError`.
     */
    static open(client: RedisClientLike, opts?: SessionOptions): Promise<Session>;
    /** An exclusive, reentrant lock named `key`. */
    lock(key: string): Lock;
    /** A read-write lock named `key`: `.read` and `.write` share one owner (downgrade, upgrade). */
    rwlock(key: string): RWLock;
    /** All of `keys` at once, or none (in a cluster they must share a `{hash tag}`). */
    multiLock(keys: string[]): MultiLock;
    /**
     * A counting semaphore named `key` (Redisson's layout). With `permits`, its permits are set
     * once (`SEM.INIT`: nothing changes if it exists), before this object's first command runs.
     */
    semaphore(key: string, permits?: number): Semaphore;
    /** The election of a leader for `name` (`ELECT.*`), its leaderships kept by this session. */
    election(name: string, opts?: ElectionOptions): Election;
    /** A count-down latch named `key` (Redisson's `RCountDownLatch` layout). */
    latch(key: string): Latch;
    /**
     * Runs `fn` holding `key` (or every key of an array), then releases it. `signal` aborts with a
     * `LostError` if the hold is lost; `using` then rejects with that error even if `fn` resolved.
     */
    using<T>(key: string | string[], fn: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
    using<T>(key: string | string[], opts: AcquireOptions, fn: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
}
