import { EventEmitter } from "node:events";
import { Adapter, Connection, RedisClientLike } from "./adapter";
import { LostError, LostReason } from "./errors";
import { Election, ElectionOptions } from "./election";
import { Latch, Semaphore } from "./semaphore";
export interface SessionOptions {
    /** Lease of every hold unless an acquire names its own, in ms. The server renews it while the session lives. Default 30000. */
    leaseMs?: number;
    /** How often the session connection is PINGed, in ms. Default 1000. */
    pingIntervalMs?: number;
    /** A PING unanswered this long closes the session connection (and re-attaches), in ms. Default 3000. */
    pingTimeoutMs?: number;
    /**
     * Keep the Node process alive while the session is open. Default false: the session's sockets
     * and timers are unref'd, so a process that forgot `close()` still exits (its holds then end
     * with their lease); a wait in progress always keeps the process alive.
     */
    keepProcessAlive?: boolean;
}
export interface AcquireOptions {
    /** How long to wait for the lock, in ms: 0 tries once; undefined waits as long as it takes. */
    timeoutMs?: number;
    /** Cancels the wait; the acquire rejects with `signal.reason` and leaves no waiter and no hold. */
    signal?: AbortSignal;
    /** This hold's lease in ms (default: the session's). */
    leaseMs?: number;
    /**
     * Wait and hold as this owner: the `owner` of another live lock hold of this session, instead of
     * a fresh one. The server then sees one owner holding one lock while it waits for this one, and
     * refuses a wait that would close a cycle of waits at once with `DeadlockError` (the owner keeps
     * what it holds). Not for semaphores' owners.
     */
    owner?: string;
}
type Kind = "exclusive" | "read" | "write" | "multi";
/** What a wait is for: a lock's kinds, a semaphore's permits, a latch opening. */
type WaitKind = Kind | "semaphore" | "latch" | "election";
/** What a binding stands for: a lock's Hold or a semaphore's Permit. */
export interface Bindable {
    readonly keys: string[];
    readonly owner: string;
    leaseMs: number;
    /** @internal The session's bindings this object is in (while bound and not ended). */
    bindings?: Binding[];
    markLost(err: LostError): void;
    releaseAll(): Promise<void>;
}
/** A candidate of an election, campaigning or leading, as the session tracks it. */
export interface ElectionEntry {
    readonly key: string;
    readonly candidate: string;
    readonly node: string;
    readonly leaseMs: number;
    /** A PING sent at `sent` (performance.now()) was answered. */
    pong(sent: number): void;
    /** A loss message, a dropped connection, a demoted server. */
    lose(reason: LostReason): void;
    /** Session close: a leadership resigns. */
    close(): Promise<void>;
}
/** One owner's holds on one key, as the server sees them: what re-attach renews and a loss message names. */
export interface Binding {
    /** bindingId(key, owner), made once: the map's key. */
    id: string;
    key: string;
    owner: string;
    node: string;
    leaseMs: number;
    /** A semaphore's permits (SEM.RENEW, SEM.RELEASE) rather than a lock's hold (LOCK.RENEW, LOCK.RELEASE). */
    sem: boolean;
    /** Usually one (an RWLock's two sides share an owner). */
    holds: Bindable[];
}
/** The session connection to one server (one per cluster node that owns a held key). */
export declare class NodeSession {
    private readonly s;
    readonly node: string;
    conn?: Connection;
    up: boolean;
    closed: boolean;
    /** Incremented every time the token is (re)registered on a new connection. */
    epoch: number;
    downSince: number;
    /** performance.now() when the last PING answered was sent (elections believe they lead until it + lease/2). */
    lastOkPingSent?: number;
    /** Set by a `demoted` message: the drop that follows is reported as such. */
    demoted: boolean;
    private lastPingAt;
    private pinging;
    private pingTimer?;
    private downTimer?;
    private reconnecting?;
    private opening?;
    constructor(s: Session, node: string);
    /** Connects, registers the token, subscribes to the loss channel. */
    open(): Promise<void>;
    private connectOnce;
    /** The next PING, `delay` ms from now: every pingIntervalMs, every lease/4 while an election campaigns or leads. */
    private schedulePing;
    /** The PING interval may have shortened (an election began): the next PING is scheduled by it. */
    kick(): void;
    private dropped;
    /** While down: a binding whose lease has passed since the drop is lost. */
    private watchDown;
    private clearDown;
    /** Reconnects until it works or the session closes, then re-attaches every binding. */
    reconnect(): Promise<void>;
    /** Forces a new connection (after a `demoted` message or NOSESSION on a live one). */
    recycle(): void;
    close(): void;
}
interface RunSpec {
    kind: WaitKind;
    keys: string[];
    /** The owner ("" for a latch wait, which has none). A wait re-queued after its connection broke sets the fresh one here. */
    owner: string;
    /**
     * A fresh owner for a wait whose connection broke: the old owner is cleaned up and the wait
     * queued again under this one. Absent when the owner cannot change (an owner given by the
     * caller, the other side of a read-write lock holding, an election's candidate): the same
     * owner is queued again once its cleanup has answered.
     */
    freshOwner?: () => string;
    leaseMs: number;
    /** Permits asked for (a semaphore). */
    permits?: number;
    /** The leader's value (an election). */
    value?: string;
    timeoutMs?: number;
    signal?: AbortSignal;
    /** Bind to the session (SESSION token); false for plain leases (the redlock-shaped `acquire`). */
    bind: boolean;
}
/**
 * A session: one dedicated connection per server that every hold is bound to. The server
 * keeps the holds alive while it lives; holds live out their lease once it is gone.
 */
export declare class Session extends EventEmitter {
    readonly token: string;
    readonly leaseMs: number;
    /** @internal */ readonly adapter: Adapter;
    /** @internal */ readonly pingIntervalMs: number;
    /** @internal Elections' candidates campaigning or leading: bindingId(key, candidate) -> entry. */
    readonly elections: Map<string, ElectionEntry>;
    /** @internal */ readonly pingTimeoutMs: number;
    private readonly nodes;
    private readonly bindings;
    private readonly pool;
    private slots?;
    private slotsLoading?;
    private counter;
    private closing;
    /** @internal */ readonly keepProcessAlive: boolean;
    /**
     * The shortest lease the server keeps alive (`keepalive_min_lease_ms` of `INFO lock`, read when
     * the session opened); undefined if the server does not tell (then the server itself refuses).
     */
    minLeaseMs?: number;
    private constructor();
    /**
     * Opens a session over `client` (an ioredis `Redis`/`Cluster` or a node-redis client/cluster):
     * a dedicated session connection (`client.duplicate()`), `LOCK.SESSION <token>`, subscribed to
     * its loss channel. Reads the server's shortest kept-alive lease (`INFO lock`) first.
     * Rejects with `LeaseTooShortError` (`leaseMs` below it), `AuthenticationError`,
     * `ModuleNotLoadedError` or `UnavailableError`.
     */
    static open(client: RedisClientLike, opts?: SessionOptions): Promise<Session>;
    private readMinLease;
    /** @internal A lease the server keeps alive for this session: at least the server's floor. */
    checkLease(leaseMs: number): void;
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
    /** Releases every hold and closes the session's connections (not the client it was opened with). */
    close(): Promise<void>;
    get closed(): boolean;
    /** Connections this session opened for waiting (idle and busy). */
    get waitConnections(): number;
    /** @internal The PING interval now: pingIntervalMs, or lease/4 of the shortest election campaigning or leading. */
    pingIntervalNow(): number;
    /** @internal A candidate starts campaigning (or leading): PINGs at its lease/4 from now. */
    addElection(e: ElectionEntry): void;
    /** @internal */
    removeElection(e: ElectionEntry): void;
    /** @internal A PING sent at `sent` was answered: leaders on `node` may believe they lead until sent + lease/2. */
    onPong(node: string, sent: number): void;
    /** @internal The session connection to `node` dropped (or its server was demoted): its candidates' leaderships are lost. */
    electionsDown(node: string, reason: LostReason): void;
    /** @internal The session connection to `node`, if open (campaigns read its epoch and last answered PING). */
    nodeSessionIfAny(node: string): NodeSession | undefined;
    /** @internal */
    newOwner(): string;
    /** @internal */
    nodeSession(node: string): NodeSession | Promise<NodeSession>;
    private nodeSessionSlow;
    private loadSlots;
    /** @internal The node serving `key` ("" on a single server). */
    nodeFor(key: string): string | Promise<string>;
    private nodeForCluster;
    /** @internal A command through the user's client, errors typed. */
    call(key: string | undefined, args: string[]): Promise<unknown>;
    private checkKeys;
    /**
     * @internal Sends an acquire: waits on a pooled connection, cancels per the contract, retries
     * NOSESSION once, and queues again (with a fresh owner, or the same one when it cannot change,
     * in the time left) when the connection it waits on breaks while the server can still be reached.
     */
    acquireRaw(spec: RunSpec): Promise<unknown>;
    /**
     * The connection a wait was on broke (CLIENT KILL, an idle reaper, a blip): on a fresh
     * connection, end the old owner's wait and release a grant that may have crossed the break
     * (the cancel of the contract), then give the wait a fresh owner for its next turn in line, or
     * keep the owner when it cannot change. Keeping it is safe only after the cleanup's release has
     * answered: a grant that crossed the break would otherwise make the next acquire a re-entry.
     * The release names exactly the side or kind waited for, so what the owner held before the wait
     * (its other side of a read-write lock, its other keys) stays; a re-entry never waits, so never
     * comes here. Rejects with the broken connection's error when the session is closing, with
     * AuthenticationError / UnavailableError when no fresh connection can be made.
     */
    private requeue;
    private acquireArgs;
    /**
     * After a cancelled wait: `LOCK.CANCEL key owner`, then `LOCK.RELEASE key owner` (MRELEASE for
     * a multi-lock, SEM.RELEASE for a semaphore) for a grant that crossed it. A latch wait has no
     * owner and is given nothing: closing its connection ended it.
     */
    private cleanup;
    /** The cleanup, waited for at most 2 s (a client queueing offline goes on in the background). */
    private boundedCleanup;
    private sendAcquire;
    /** The wait on a pooled connection: its answer, or the cancel of the contract (close the connection, release the owner). */
    private waitOn;
    /**
     * A wait answered with an error (the connection goes back: rejects with `e`) or broken (it is
     * closed; rejects with WaitBroken, for acquireRaw to clean up and queue again).
     */
    private waitFailed;
    /** @internal */
    register(hold: Bindable, node: string, sem?: boolean): void;
    /** @internal */
    unregister(hold: Bindable): void;
    /**
     * @internal An owner given to an acquire must hold a lock (not permits) bound to this session
     * now, none of `keys` yet (that is a re-entry; and a cancelled wait's cleanup, a release as the
     * owner, must not drop a hold it already has), and be the owner this Lock object (or its
     * read-write lock's other side) holds as (`current`), if it holds.
     */
    checkOwner(owner: string, keys: string[], current: string | undefined): void;
    /** @internal */
    bindingsOn(node: string): Binding[];
    /** @internal Marks every hold of a binding lost. */
    lose(b: Binding, reason: LostReason): void;
    /** @internal `<reason> <owner-length> <owner> <key>` or `demoted`. */
    onLossMessage(node: string, msg: Buffer): void;
    /**
     * @internal `LOCK.RENEW key owner PX lease SESSION token` for each key (`SEM.RENEW` for a
     * semaphore's permits); NOTOWNER (or a semaphore's EXPIRED) -> lost.
     */
    reattach(keys: string[], owner: string, leaseMs: number, sem?: boolean): Promise<void>;
    private renewBinding;
    /** @internal Re-attaches every binding of a node after its session connection came back. */
    reattachAll(node: string): Promise<void>;
}
/** The owner id a Lock (or both sides of an RWLock) uses while it holds: fresh per first acquisition. */
declare class OwnerSlot {
    private readonly s;
    owner?: string;
    holds: number;
    constructor(s: Session);
    take(): string;
    /** A fresh owner for a wait queued again after its connection broke (nothing holds as the old one). */
    renew(): string;
    /** An owner given by the caller (checked by Session.checkOwner): kept for the other side of a read-write lock. */
    use(owner: string): string;
}
/**
 * A hold on a lock. `signal` aborts with a `LostError` when the hold is lost. A hold acquired
 * again through the same Lock object (re-entry) is the same Hold with `count` one more;
 * `release()` drops one.
 */
export declare class Hold extends EventEmitter implements Bindable {
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
    private controller?;
    private lostError?;
    /** @internal The session's bindings this hold is in (while bound and not ended). */
    bindings?: Binding[];
    /** @internal */
    constructor(s: Session, kind: Kind, keys: string[], owner: string, tokens: bigint[], leaseMs: number, onEnd: () => void, bound: boolean);
    get key(): string;
    /** `token` in decimal: for JSON, logs and storage APIs that take no bigint (`JSON.stringify` throws on a bigint). */
    get tokenString(): string;
    /** Aborted (with a `LostError` reason) when the hold is lost. */
    get signal(): AbortSignal;
    get lost(): boolean;
    /** @internal A fresh controller made ahead for `signal` (kept only if the hold has none yet). */
    adoptController(c: AbortController): void;
    get released(): boolean;
    /** Calls `cb` once if the hold is lost. */
    onLost(cb: (err: LostError) => void): this;
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
    protected readonly s: Session;
    readonly kind: Kind;
    readonly keys: string[];
    private readonly slot;
    private current?;
    private queue?;
    private inFlight;
    /** @internal */
    constructor(s: Session, kind: Kind, keys: string[], slot: OwnerSlot);
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
    constructor(s: Session, key: string);
}
/** Every key at once or none (`LOCK.MACQUIRE`): waits as one unit, never deadlocks on key order. */
export declare class MultiLock extends Lock {
    /** @internal */
    constructor(s: Session, keys: string[]);
}
export {};
