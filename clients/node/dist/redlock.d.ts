import { EventEmitter } from "node:events";
import { LockError } from "./errors";
import { Hold, Session, SessionOptions } from "./session";
import type { RedisClientLike } from "./adapter";
export interface Settings {
    readonly driftFactor: number;
    readonly retryCount: number;
    readonly retryDelay: number;
    readonly retryJitter: number;
    readonly automaticExtensionThreshold: number;
}
/** redlock's per-attempt statistics; this single-server version reports none. */
export type ExecutionStats = {
    readonly membershipSize: number;
    readonly quorumSize: number;
    readonly votesFor: Set<unknown>;
    readonly votesAgainst: Map<unknown, Error>;
};
export type ExecutionResult = {
    attempts: ReadonlyArray<Promise<ExecutionStats>>;
};
export type RedlockAbortSignal = AbortSignal & {
    error?: Error;
};
/** As redlock's: a resource is locked by another owner. */
export declare class ResourceLockedError extends LockError {
    constructor(message: string);
}
/** As redlock's: the operation failed (here: the lock stayed busy for the whole retry window, or the server refused). */
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
}
export declare class ModuleRedlock extends EventEmitter {
    private readonly client;
    private readonly sessionOptions;
    readonly settings: Settings;
    private session?;
    constructor(client: RedisClientLike, settings?: Partial<Settings>, sessionOptions?: SessionOptions);
    /** The session used under the hood (opened on first use). */
    getSession(): Promise<Session>;
    private waitMs;
    private take;
    /** Takes `resources` (all at once for several) for `duration` ms. The lock ends with its lease unless extended. */
    acquire(resources: string[], duration: number, settings?: Partial<Settings>): Promise<RedlockLock>;
    release(lock: RedlockLock, _settings?: Partial<Settings>): Promise<ExecutionResult>;
    extend(existing: RedlockLock, duration: number, settings?: Partial<Settings>): Promise<RedlockLock>;
    /**
     * Runs `routine` holding `resources`; the server keeps the lock alive while this process
     * lives. `signal.aborted` turns true (with `signal.error`) if the lock is lost.
     */
    using<T>(resources: string[], duration: number, settings: Partial<Settings>, routine?: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
    using<T>(resources: string[], duration: number, routine: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
    /** Closes the session (releasing what it holds); the client given stays open. */
    quit(): Promise<void>;
}
