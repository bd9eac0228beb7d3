import { LostError } from "./errors";
import type { Bindable, Binding } from "./core/bindings";
import { Held } from "./core/hold";
import type { AcquireOptions, SessionCore } from "./core/session";
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
/**
 * Permits of a semaphore held by one owner (fresh for each acquisition), bound to the session:
 * the server renews their lease while the session connection lives. `signal` aborts with a
 * `LostError` when they are lost.
 */
export declare class Permit extends Held implements Bindable {
    private readonly s;
    private readonly onEnd;
    readonly key: string;
    readonly owner: string;
    /** Permits this handle holds now (0 once released or lost). */
    permits: number;
    leaseMs: number;
    private releasing?;
    /** @internal */
    bindings?: Binding[];
    /** @internal */
    constructor(s: SessionCore, key: string, owner: string, permits: number, leaseMs: number, onEnd: () => void);
    /** @internal */
    get keys(): string[];
    get released(): boolean;
    /** @internal */
    markLost(err: LostError): void;
    private lostBy;
    /**
     * Gives back `n` permits (default: all). Permits that were lost reject with their LostError;
     * `NOTOWNER` / `EXPIRED` (their lease ended) mark them lost and reject with a LostError.
     */
    release(n?: number): Promise<void>;
    private send;
    /** @internal Session close. */
    releaseAll(): Promise<void>;
    /** Sets a new lease from now on all of them (default: the current one). NOTOWNER / EXPIRED -> lost, LostError. */
    extend(leaseMs?: number): Promise<void>;
}
/**
 * A counting semaphore named `key`, shared with Redisson's `RSemaphore` /
 * `RPermitExpirableSemaphore` layout. Waiters are served first come, first served, whatever
 * they ask for (a caller asking for 3 is never overtaken by callers asking for 1).
 */
export declare class Semaphore {
    private readonly s;
    readonly key: string;
    private readonly initialPermits?;
    private initDone;
    private initializing?;
    /** @internal */
    constructor(s: SessionCore, key: string, initialPermits?: number | undefined);
    /** SEM.INIT once, before this object's first command (tried again by the next one if it failed). */
    private ensureInit;
    /** Sets the semaphore's permits if it does not exist (`SEM.INIT`): true if set, false if it existed (nothing changed). */
    init(permits: number): Promise<boolean>;
    /**
     * Takes `permits` (default 1) for a fresh owner, bound to the session. `timeoutMs`: 0 tries
     * once (without overtaking anyone queued), undefined waits as long as it takes, else waits that
     * long, then `BusyError`. An aborted `signal` rejects with `signal.reason`; nothing is left
     * queued or held (`LOCK.CANCEL`, then `SEM.RELEASE` for a grant that crossed it).
     */
    acquire(opts?: AcquireOptions): Promise<Permit>;
    acquire(permits: number, opts?: AcquireOptions): Promise<Permit>;
    /** Takes `permits` if they are available now and nobody is queued: the Permit, or undefined. */
    tryAcquire(opts?: Omit<AcquireOptions, "timeoutMs">): Promise<Permit | undefined>;
    tryAcquire(permits: number, opts?: Omit<AcquireOptions, "timeoutMs">): Promise<Permit | undefined>;
    /**
     * Runs `fn` holding `permits` (default 1), then gives them back. `signal` aborts with a
     * `LostError` if they are lost; `using` then rejects with that error even if `fn` resolved.
     */
    using<T>(fn: (signal: AbortSignal, permit: Permit) => Promise<T>): Promise<T>;
    using<T>(permits: number, fn: (signal: AbortSignal, permit: Permit) => Promise<T>): Promise<T>;
    using<T>(permits: number, opts: AcquireOptions, fn: (signal: AbortSignal, permit: Permit) => Promise<T>): Promise<T>;
    /** Adds `delta` permits (negative takes them away; held ones stay held): the permits available now. */
    add(delta: number): Promise<number>;
    /** Permits available now (0 for a semaphore that does not exist). */
    available(): Promise<number>;
    /** `SEM.INFO`: permits, available, holders, waiters; null when the semaphore does not exist. */
    info(): Promise<SemaphoreInfo | null>;
}
