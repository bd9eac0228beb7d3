import { LostError } from "./errors";
import { Kind } from "./core/acquire";
import type { Bindable, Binding } from "./core/bindings";
import { Held } from "./core/hold";
import type { AcquireOptions, SessionCore } from "./core/session";
/** @internal The owner id a Lock (or both sides of an RWLock) uses while it holds: fresh per first acquisition. */
export declare class OwnerSlot {
    private readonly s;
    owner?: string;
    holds: number;
    constructor(s: SessionCore);
    take(): string;
    /** A fresh owner for a wait queued again after its connection broke (nothing holds as the old one). */
    renew(): string;
    /** An owner given by the caller (checked by SessionCore.checkOwner): kept for the other side of a read-write lock. */
    use(owner: string): string;
}
/**
 * A hold on a lock. `signal` aborts with a `LostError` when the hold is lost. A hold acquired
 * again through the same Lock object (re-entry) is the same Hold with `count` one more;
 * `release()` drops one.
 */
export declare class Hold extends Held implements Bindable {
    private readonly s;
    private readonly onEnd;
    readonly bound: boolean;
    readonly keys: string[];
    readonly owner: string;
    /** Fencing token of the latest acquisition (of the first key, for a multi-lock). Below 2^53 today, exact as a bigint. */
    token: bigint;
    /** Fencing token per key (a multi-lock). */
    tokens: bigint[];
    /** Holds this object stands for (re-entries). 0 once released. */
    count: number;
    leaseMs: number;
    readonly kind: Kind;
    /** @internal The session's bindings this hold is in (while bound and not ended). */
    bindings?: Binding[];
    /** @internal */
    constructor(s: SessionCore, kind: Kind, keys: string[], owner: string, tokens: bigint[], leaseMs: number, onEnd: () => void, bound: boolean);
    get key(): string;
    /** `token` in decimal: for JSON, logs and storage APIs that take no bigint (`JSON.stringify` throws on a bigint). */
    get tokenString(): string;
    /** @internal A fresh controller made ahead for `signal` (kept only if the hold has none yet). */
    adoptController(c: AbortController): void;
    get released(): boolean;
    /** @internal */
    markLost(err: LostError): void;
    private releaseArgs;
    /** Drops one hold (the last one releases the lock). A lost hold rejects with its LostError; NOTOWNER marks it lost. */
    release(): Promise<void>;
    /** @internal Every hold this object stands for (session close). */
    releaseAll(): Promise<void>;
    /** Sets a new lease from now (default: the current one). NOTOWNER -> the hold is lost, LostError. */
    extend(leaseMs?: number): Promise<void>;
}
/** An exclusive lock (or one side of a read-write lock, or a multi-lock). Reentrant through this object. */
export declare class Lock {
    protected readonly s: SessionCore;
    readonly kind: Kind;
    readonly keys: string[];
    private readonly slot;
    private current?;
    private queue?;
    private inFlight;
    /** @internal */
    constructor(s: SessionCore, kind: Kind, keys: string[], slot: OwnerSlot);
    get key(): string;
    /** The hold this object has now, if any. */
    get hold(): Hold | undefined;
    /**
     * Takes the lock, waiting up to `timeoutMs` (BusyError after), cancelled by `signal`. Called
     * again on this object while it holds, it re-enters: the same Hold, `count` one more.
     */
    acquire(opts?: AcquireOptions): Promise<Hold>;
    /** Takes the lock if it is free now: the Hold, or undefined when another owner has it. */
    tryAcquire(opts?: Omit<AcquireOptions, "timeoutMs">): Promise<Hold | undefined>;
    /** @internal */
    acquireNow(opts: AcquireOptions, bind: boolean, counted?: boolean): Promise<Hold>;
    /**
     * Runs `fn` holding the lock and releases it after. `signal` aborts if the hold is lost while
     * `fn` runs; `using` then rejects with the LostError even if `fn` resolved. A loss after `fn`
     * resolved (while releasing) does not undo its result: `using` resolves with it.
     */
    using<T>(fn: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
    using<T>(opts: AcquireOptions, fn: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
}
/** A read-write lock: `read` and `write` are Locks of one owner, so a writer may downgrade and a sole reader upgrade. */
export declare class RWLock {
    readonly key: string;
    readonly read: Lock;
    readonly write: Lock;
    /** @internal */
    constructor(s: SessionCore, key: string);
}
/** Every key at once or none (`LOCK.MACQUIRE`): waits as one unit, never deadlocks on key order. */
export declare class MultiLock extends Lock {
    /** @internal */
    constructor(s: SessionCore, keys: string[]);
}
