import { EventEmitter } from "node:events";
import { Adapter, RedisClientLike } from "../adapter";
import { LostReason } from "../errors";
import { Bindable, Binding } from "./bindings";
import { NodeSession, NodeSessionHost } from "./node-session";
import { WaitPool } from "./wait-pool";
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
/**
 * The session without its factories: what the objects (locks, semaphores, latches, elections)
 * are built on. `SessionCore.open` opens one for an election given a client instead of a session.
 */
export declare class SessionCore extends EventEmitter implements NodeSessionHost {
    readonly token: string;
    readonly leaseMs: number;
    /** @internal */ readonly adapter: Adapter;
    /** @internal */ readonly pingIntervalMs: number;
    /** @internal Elections' candidates campaigning or leading: bindingId(key, candidate) -> entry. */
    readonly elections: Map<string, ElectionEntry>;
    /** @internal */ readonly pingTimeoutMs: number;
    private readonly nodes;
    private readonly bindings;
    /** @internal The connections waits are made on (the acquire path, ./acquire.ts, takes and gives them). */
    readonly pool: WaitPool;
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
    /** @internal */
    protected constructor(client: RedisClientLike, opts: SessionOptions);
    /** A session core over `client`, opened (see `Session.open`). */
    static open(client: RedisClientLike, opts?: SessionOptions): Promise<SessionCore>;
    /** @internal Reads the server's shortest kept-alive lease, checks ours, connects (or loads the cluster's slots). */
    protected start(): Promise<void>;
    private readMinLease;
    /** @internal A lease the server keeps alive for this session: at least the server's floor. */
    checkLease(leaseMs: number): void;
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
    /** @internal Reads the cluster's slot map (again: after MOVED, ASK, TRYAGAIN, NOSESSION). */
    loadSlots(): Promise<void>;
    /** @internal The node serving `key` ("" on a single server). */
    nodeFor(key: string): string | Promise<string>;
    private nodeForCluster;
    /** @internal A command through the user's client, errors typed. */
    call(key: string | undefined, args: string[]): Promise<unknown>;
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
