import { RedisClientLike } from "./adapter";
import { LostReason } from "./errors";
import { Held } from "./core/hold";
import { ElectionEntry, SessionCore } from "./core/session";
/** Who leads. */
export interface Leader {
    candidate: string;
    /** The leadership's fencing token: terms only grow, also across failovers. */
    term: bigint;
    /** What the leader published (`ELECT.CAMPAIGN ... VALUE`, `ELECT.PROCLAIM`), or null. */
    value: string | null;
    /** Ms until the current lease ends; -1 for none. */
    ttlMs: number;
}
export interface ElectionOptions {
    /** What the leader publishes (an address, say); a campaign may name its own. */
    value?: string;
    /** The leadership's lease in ms (default 5000): the server renews it while the session connection is heard from. */
    leaseMs?: number;
}
export interface CampaignOptions {
    /** How long to wait, in ms: 0 tries once; undefined waits as long as it takes. Then `BusyError`. */
    timeoutMs?: number;
    /** Cancels the wait; the campaign rejects with `signal.reason` and leaves nothing queued or held. */
    signal?: AbortSignal;
    /** This campaign's value (default: the election's). */
    value?: string;
}
export interface ObserveOptions {
    /** Ends the iteration, also while it waits. */
    signal?: AbortSignal;
}
/**
 * This process leads the election: what `campaign()` resolves to. `signal` aborts (with a
 * `LostError`) and `"lost"` is emitted when the leadership is lost: a loss message for this
 * candidate (`forced`, `gone`, `idle`, `maxhold`, `moved`), `demoted`, the session connection
 * dropping (`connection`), or its local deadline passing (`deadline`: no PING answered for half a
 * lease). A lost leadership is resigned in the background, so that the next candidate leads at once.
 */
export declare class Leadership extends Held implements ElectionEntry {
    private readonly s;
    readonly key: string;
    readonly candidate: string;
    /** The leadership's fencing token. */
    readonly term: bigint;
    /** `term` in decimal (JSON has no bigint). */
    get termString(): string;
    value: string | null;
    readonly node: string;
    readonly leaseMs: number;
    /** performance.now() until which this process may believe it leads (moved on by each answered PING). */
    deadline: number;
    private resigned;
    private timer?;
    /** @internal */
    constructor(s: SessionCore, key: string, candidate: string, term: bigint, value: string | null, node: string, leaseMs: number, deadline: number);
    /** The election's name. */
    get name(): string;
    /** Why it was lost, if it was. */
    get lostReason(): LostReason | undefined;
    /** True while neither lost nor resigned and the local deadline has not passed (checked now: look before acting). */
    get isLeader(): boolean;
    /** Throws the `LostError` unless `isLeader`. */
    check(): void;
    /** Publishes a new value (`ELECT.PROCLAIM`); observers see it. Resolves to the term. NOTOWNER: lost, `LostError`. */
    proclaim(value: string): Promise<bigint>;
    /** Leaves the election (`ELECT.RESIGN`): the next candidate leads at once. True if this candidate still led. */
    resign(): Promise<boolean>;
    /**
     * ELECT.RESIGN, tried again while the server is unreachable or answers as a replica would
     * (READONLY: a failover under way), for as long as the leadership could last (two leases).
     */
    private resignInBackground;
    /** @internal Session close. */
    close(): Promise<void>;
    /** @internal */
    pong(sent: number): void;
    /** @internal */
    lose(reason: LostReason): void;
    /** One timer at the deadline; answered PINGs move the deadline, the timer then waits on. */
    private arm;
}
/**
 * The election of a leader for `name` (`ELECT.*`). `new Election(session, name, { value,
 * leaseMs })` or `session.election(name, opts)`; given a client instead of a session, the
 * election opens a session of its own (closed by `close()`).
 */
export declare class Election {
    readonly name: string;
    readonly value?: string;
    readonly leaseMs: number;
    private sessionP?;
    private readonly own;
    private readonly client?;
    constructor(sessionOrClient: SessionCore | RedisClientLike, name: string, opts?: ElectionOptions);
    private session;
    /**
     * Waits to lead (FIFO, behind earlier candidates). Resolves to the Leadership of a fresh
     * candidate id; `BusyError` when `timeoutMs` ran out (0: someone else leads). An aborted
     * `signal` rejects with its reason, leaving nothing queued or held.
     */
    campaign(opts?: CampaignOptions): Promise<Leadership>;
    /** Who leads now (`ELECT.LEADER`), or null. */
    leader(): Promise<Leader | null>;
    /**
     * The leadership's changes (`ELECT.OBSERVE key TERM t BLOCK 0`): the current leader first once
     * someone leads, then every change in order (a new term, a proclaimed value, null when nobody
     * leads; a change followed by another before the next step is seen as the later one). It waits
     * on a connection of its own (no session needed), closed when the iteration ends: `break`, or
     * `signal` (also while a step waits).
     */
    observe(opts?: ObserveOptions): AsyncGenerator<Leader | null, void, undefined>;
    /** Closes the session this election opened for itself (a session given to it is left open). */
    close(): Promise<void>;
}
