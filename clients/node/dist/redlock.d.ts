import { EventEmitter } from "node:events";
import { LockError } from "./errors";
import type { SessionOptions } from "./core/session";
import type { Hold } from "./lock";
import { Session } from "./session";
import type { RedisClientLike } from "./adapter";
export interface Settings {
    readonly driftFactor: number;
    readonly retryCount: number;
    readonly retryDelay: number;
    readonly retryJitter: number;
    readonly automaticExtensionThreshold: number;
}
/** As redlock's: what one attempt got from the servers (here always one: membership and quorum 1). */
export type ExecutionStats = {
    readonly membershipSize: number;
    readonly quorumSize: number;
    readonly votesFor: Set<RedisClientLike>;
    readonly votesAgainst: Map<RedisClientLike, Error>;
};
export type ExecutionResult = {
    attempts: ReadonlyArray<Promise<ExecutionStats>>;
};
export type RedlockAbortSignal = AbortSignal & {
    error?: Error;
};
/** As redlock's: a resource is locked by another owner (or, for a release or an extension, no longer by this one). */
export declare class ResourceLockedError extends LockError {
    constructor(message: string);
}
/**
 * As redlock's: the operation failed in every attempt. `attempts` has one entry per attempt
 * counted as redlock counts them (`retryCount + 1` after a full retry window); `cause` is this
 * library's error for the last one (`BusyError`, `UnavailableError`, `AuthenticationError`...).
 */
export declare class ExecutionError extends LockError {
    readonly attempts: ReadonlyArray<Promise<ExecutionStats>>;
    constructor(message: string, attempts: ReadonlyArray<Promise<ExecutionStats>>, options?: {
        cause?: unknown;
    });
}
/** As redlock's `Lock`: `value` is the owner id, `expiration` a ms timestamp (0 once released or replaced). */
export declare class RedlockLock {
    readonly redlock: ModuleRedlock;
    readonly resources: string[];
    readonly value: string;
    readonly attempts: ReadonlyArray<Promise<ExecutionStats>>;
    expiration: number;
    /** @internal */ readonly hold: Hold;
    constructor(redlock: ModuleRedlock, resources: string[], value: string, attempts: ReadonlyArray<Promise<ExecutionStats>>, expiration: number, 
    /** @internal */ hold: Hold);
    release(): Promise<ExecutionResult>;
    extend(duration: number): Promise<RedlockLock>;
    /** The fencing token of the first resource (this module's addition). */
    get token(): bigint;
    /** `token` in decimal, for JSON (this module's addition). */
    get tokenString(): string;
}
export declare class ModuleRedlock extends EventEmitter {
    private readonly sessionOptions;
    readonly settings: Settings;
    private readonly client;
    private session?;
    /**
     * `clients`: `[client]` as redlock takes it (more than one is refused: the module is one
     * server), or the client itself. `sessionOptions` configure the session under the hood.
     */
    constructor(clients: RedisClientLike | Iterable<RedisClientLike>, settings?: Partial<Settings>, sessionOptions?: SessionOptions);
    /** The session used under the hood (opened on first use). */
    getSession(): Promise<Session>;
    private stats;
    /**
     * redlock's retry loop around `op`. `op` gets the ms it may wait in the server's queue (the
     * retry window left) and returns a value, or throws. A `ResourceLockedError` (busy for the whole
     * window, or an answer retrying cannot change) counts every attempt left; a connection failure
     * counts one and is retried after `retryDelay ± retryJitter`, as redlock does; an
     * authentication, module or lease refusal (any reply but busy) is not retried.
     */
    private execute;
    private take;
    /**
     * Takes `resources` (all at once for several) for `duration` ms: a plain lease, as redlock's,
     * that ends unless extended. Waits in the server's queue for the retry window.
     */
    acquire(resources: string[], duration: number, settings?: Partial<Settings>): Promise<RedlockLock>;
    /**
     * Releases the lock. As redlock: `ExecutionError` (its attempts `ResourceLockedError`) when
     * this lock no longer holds (force-released, expired, taken over): the server's answer is
     * final, so the attempts are counted without waiting between them.
     */
    release(lock: RedlockLock, settings?: Partial<Settings>): Promise<ExecutionResult>;
    /** Sets the lease to `duration` ms from now: a new Lock (this one's `expiration` becomes 0). */
    extend(existing: RedlockLock, duration: number, settings?: Partial<Settings>): Promise<RedlockLock>;
    /**
     * Runs `routine` holding `resources`, then releases them (a failed release rejects, as in
     * redlock). A `duration` the server can keep alive (at least its `keepalive_min_lease_ms`) binds
     * the lock to the session: the server renews it while this process lives, and `signal` aborts
     * (`signal.error`: a `LostError`) when the server reports it lost. A shorter one is a plain
     * lease of `duration` extended by a timer `automaticExtensionThreshold` ms before it ends, as
     * redlock does: `signal` aborts (`signal.error`: the extension's `ExecutionError`) if that fails.
     */
    using<T>(resources: string[], duration: number, settings: Partial<Settings>, routine?: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
    using<T>(resources: string[], duration: number, routine: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
    /** Closes the session (releasing what it holds); the client given stays open (redlock quits it). */
    quit(): Promise<void>;
}
