// Leader election (ELECT.*) over the session core: a campaign is a FIFO wait (BLOCK on a pooled
// connection, cancelled with LOCK.CANCEL then ELECT.RESIGN) for a fresh candidate id, its
// leadership bound to the session connection (SESSION token). While an election campaigns or
// leads, the session PINGs every lease/4, and a leader believes it leads only until the send time
// of its last answered PING + lease/2.

import { Connection, RedisClientLike, adapterFor } from "./adapter";
import { BusyError, LostError, LostReason, NotOwnerError, UnavailableError, toLockError } from "./errors";
import { acquireRaw } from "./core/acquire";
import { Held } from "./core/hold";
import { ElectionEntry, SessionCore } from "./core/session";
import { sleep, toBigInt, toRecord } from "./core/util";

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

function text(v: unknown): string | null {
  if (v === null || v === undefined) return null;
  return Buffer.isBuffer(v) ? v.toString() : String(v);
}

/** ELECT.LEADER / ELECT.OBSERVE's map: a Leader, or null when nobody leads. */
function toLeader(reply: unknown): Leader | null {
  if (reply == null) return null;
  const r = toRecord(reply);
  const candidate = text(r.candidate);
  const term = r.term == null ? 0n : toBigInt(r.term);
  if (candidate === null || term === 0n) return null;
  return { candidate, term, value: text(r.value), ttlMs: r.ttl == null ? -1 : Number(text(r.ttl)) };
}

/**
 * This process leads the election: what `campaign()` resolves to. `signal` aborts (with a
 * `LostError`) and `"lost"` is emitted when the leadership is lost: a loss message for this
 * candidate (`forced`, `gone`, `idle`, `maxhold`, `moved`), `demoted`, the session connection
 * dropping (`connection`), or its local deadline passing (`deadline`: no PING answered for half a
 * lease). A lost leadership is resigned in the background, so that the next candidate leads at once.
 */
export class Leadership extends Held implements ElectionEntry {
  readonly key: string;
  readonly candidate: string;
  /** The leadership's fencing token. */
  readonly term: bigint;
  /** `term` in decimal (JSON has no bigint). */
  get termString(): string {
    return this.term.toString();
  }
  value: string | null;
  readonly node: string;
  readonly leaseMs: number;
  /** performance.now() until which this process may believe it leads (moved on by each answered PING). */
  deadline: number;
  private resigned = false;
  private timer?: NodeJS.Timeout;

  /** @internal */
  constructor(
    private readonly s: SessionCore,
    key: string,
    candidate: string,
    term: bigint,
    value: string | null,
    node: string,
    leaseMs: number,
    deadline: number,
  ) {
    super();
    this.key = key;
    this.candidate = candidate;
    this.term = term;
    this.value = value;
    this.node = node;
    this.leaseMs = leaseMs;
    this.deadline = deadline;
    this.arm();
  }

  /** The election's name. */
  get name(): string {
    return this.key;
  }

  /** Why it was lost, if it was. */
  get lostReason(): LostReason | undefined {
    return this.lostError?.reason;
  }

  /** True while neither lost nor resigned and the local deadline has not passed (checked now: look before acting). */
  get isLeader(): boolean {
    if (!this.lostError && !this.resigned && performance.now() >= this.deadline) this.lose("deadline");
    return !this.lostError && !this.resigned;
  }

  /** Throws the `LostError` unless `isLeader`. */
  check(): void {
    if (this.isLeader) return;
    throw this.lostError ?? new LostError(this.key, this.candidate, "notowner", "election");
  }

  /** Publishes a new value (`ELECT.PROCLAIM`); observers see it. Resolves to the term. NOTOWNER: lost, `LostError`. */
  async proclaim(value: string): Promise<bigint> {
    this.check();
    let reply: unknown;
    try {
      reply = await this.s.call(this.key, ["ELECT.PROCLAIM", this.key, this.candidate, value]);
    } catch (e) {
      if (e instanceof NotOwnerError) {
        this.lose("notowner");
        throw this.lostError;
      }
      throw e;
    }
    this.value = value;
    return toBigInt(reply);
  }

  /** Leaves the election (`ELECT.RESIGN`): the next candidate leads at once. True if this candidate still led. */
  async resign(): Promise<boolean> {
    if (this.resigned) return false;
    this.resigned = true;
    clearTimeout(this.timer);
    this.s.removeElection(this);
    let led: unknown;
    try {
      led = await this.s.call(this.key, ["ELECT.RESIGN", this.key, this.candidate]);
    } catch (e) {
      // Unreachable now: the session would keep the leadership alive, so it is resigned as soon
      // as the server answers.
      if (e instanceof UnavailableError) this.resignInBackground();
      throw e;
    }
    return Number(led) === 1 && !this.lostError;
  }

  /**
   * ELECT.RESIGN, tried again while the server is unreachable or answers as a replica would
   * (READONLY: a failover under way), for as long as the leadership could last (two leases).
   */
  private resignInBackground(): void {
    const until = performance.now() + 2 * this.leaseMs;
    void (async () => {
      for (let delay = 50; !this.s.closed; delay = Math.min(delay * 2, 500)) {
        try {
          await this.s.call(this.key, ["ELECT.RESIGN", this.key, this.candidate]);
          return;
        } catch (e) {
          // (toLockError: a connection failure, or a failover's READONLY/LOADING/..., is an UnavailableError)
          if (!(e instanceof UnavailableError)) return;
        }
        if (performance.now() + delay > until) return;
        await sleep(delay);
      }
    })();
  }

  /** @internal Session close. */
  async close(): Promise<void> {
    await this.resign();
  }

  /** @internal */
  pong(sent: number): void {
    const d = sent + this.leaseMs / 2;
    if (d > this.deadline) this.deadline = d;
  }

  /** @internal */
  lose(reason: LostReason): void {
    if (this.lostError || this.resigned) return;
    this.lostError = new LostError(this.key, this.candidate, reason, "election");
    clearTimeout(this.timer);
    this.s.removeElection(this);
    // What is left of it on the server (no longer renewed, or bound to a connection that is gone)
    // goes now, not at its lease's end.
    this.resignInBackground();
    this.announceLost(this.lostError);
  }

  /** One timer at the deadline; answered PINGs move the deadline, the timer then waits on. */
  private arm(): void {
    this.timer = setTimeout(
      () => {
        if (this.lostError || this.resigned) return;
        if (performance.now() >= this.deadline) this.lose("deadline");
        else this.arm();
      },
      Math.max(0, this.deadline - performance.now()),
    );
    this.timer.unref?.();
  }
}

/** A candidate whose ELECT.CAMPAIGN is on its way: a loss meanwhile is kept for the leadership it may become. */
class Campaign implements ElectionEntry {
  lostReason?: LostReason;
  constructor(
    readonly key: string,
    readonly candidate: string,
    readonly node: string,
    readonly leaseMs: number,
  ) {}
  pong(): void {}
  lose(reason: LostReason): void {
    this.lostReason ??= reason;
  }
  async close(): Promise<void> {}
}

/**
 * The election of a leader for `name` (`ELECT.*`). `new Election(session, name, { value,
 * leaseMs })` or `session.election(name, opts)`; given a client instead of a session, the
 * election opens a session of its own (closed by `close()`).
 */
export class Election {
  readonly name: string;
  readonly value?: string;
  readonly leaseMs: number;
  private sessionP?: Promise<SessionCore>;
  private readonly own: boolean;
  private readonly client?: RedisClientLike;

  constructor(sessionOrClient: SessionCore | RedisClientLike, name: string, opts: ElectionOptions = {}) {
    this.name = name;
    this.value = opts.value;
    this.leaseMs = opts.leaseMs ?? 5000;
    if (!Number.isInteger(this.leaseMs) || this.leaseMs < 704)
      throw new RangeError(`leaseMs must be an integer of at least 704 (the server's shortest kept-alive lease), got ${this.leaseMs}`);
    if (sessionOrClient instanceof SessionCore) {
      this.sessionP = Promise.resolve(sessionOrClient);
      this.own = false;
    } else {
      this.client = sessionOrClient;
      this.own = true;
    }
  }

  private session(): Promise<SessionCore> {
    if (!this.sessionP) {
      const p = SessionCore.open(this.client!);
      this.sessionP = p;
      p.catch(() => {
        if (this.sessionP === p) this.sessionP = undefined;
      });
    }
    return this.sessionP;
  }

  /**
   * Waits to lead (FIFO, behind earlier candidates). Resolves to the Leadership of a fresh
   * candidate id; `BusyError` when `timeoutMs` ran out (0: someone else leads). An aborted
   * `signal` rejects with its reason, leaving nothing queued or held.
   */
  async campaign(opts: CampaignOptions = {}): Promise<Leadership> {
    const s = await this.session();
    const value = opts.value ?? this.value;
    const candidate = s.newOwner();
    const n = s.nodeFor(this.name);
    const node = typeof n === "string" ? n : await n;
    const pending = new Campaign(this.name, candidate, node, this.leaseMs);
    s.addElection(pending); // PINGs every lease/4 from now
    let term: bigint;
    let sent: number;
    try {
      const x = s.nodeSession(node);
      const ns = x instanceof Promise ? await x : x;
      s.addElection(pending); // (kicks the PING timer of a session connection just opened)
      const epoch = ns.epoch;
      sent = performance.now();
      const reply = await acquireRaw(s, {
        kind: "election",
        keys: [this.name],
        owner: candidate,
        leaseMs: this.leaseMs,
        value,
        timeoutMs: opts.timeoutMs,
        signal: opts.signal,
        bind: true,
      });
      if (reply == null) {
        throw new BusyError(
          this.name,
          opts.timeoutMs
            ? `election '${this.name}': not leading after ${opts.timeoutMs} ms`
            : `election '${this.name}': another candidate leads`,
        );
      }
      term = toBigInt(reply);
      const now = s.nodeSessionIfAny(node);
      if (!now || now.epoch !== epoch || !now.up || pending.lostReason === "connection") {
        // The session connection was replaced while we waited: bind the leadership to the new one
        // (the same candidate re-attaches).
        const again = s.nodeSession(node);
        if (again instanceof Promise) await again;
        sent = performance.now();
        const args = ["ELECT.CAMPAIGN", this.name, candidate];
        if (value !== undefined) args.push("VALUE", value);
        args.push("PX", String(this.leaseMs), "SESSION", s.token);
        const r = await s.call(this.name, args);
        if (r == null) throw new LostError(this.name, candidate, "connection", "election");
        term = toBigInt(r);
        pending.lostReason = undefined;
      }
    } catch (e) {
      s.removeElection(pending);
      throw e;
    }
    const ping = s.nodeSessionIfAny(node)?.lastOkPingSent;
    const deadline = Math.max(sent, ping ?? sent) + this.leaseMs / 2;
    const l = new Leadership(s, this.name, candidate, term, value ?? null, node, this.leaseMs, deadline);
    s.removeElection(pending);
    s.addElection(l);
    if (pending.lostReason) l.lose(pending.lostReason);
    return l;
  }

  /** Who leads now (`ELECT.LEADER`), or null. */
  async leader(): Promise<Leader | null> {
    if (this.sessionP) return toLeader(await (await this.sessionP).call(this.name, ["ELECT.LEADER", this.name]));
    try {
      return toLeader(await adapterFor(this.client!).call(this.name, ["ELECT.LEADER", this.name]));
    } catch (e) {
      throw toLockError(e);
    }
  }

  /**
   * The leadership's changes (`ELECT.OBSERVE key TERM t BLOCK 0`): the current leader first once
   * someone leads, then every change in order (a new term, a proclaimed value, null when nobody
   * leads; a change followed by another before the next step is seen as the later one). It waits
   * on a connection of its own (no session needed), closed when the iteration ends: `break`, or
   * `signal` (also while a step waits).
   */
  async *observe(opts: ObserveOptions = {}): AsyncGenerator<Leader | null, void, undefined> {
    const signal = opts.signal;
    const adapter = this.sessionP ? (await this.sessionP).adapter : adapterFor(this.client!);
    let node: string | undefined;
    if (adapter.cluster) {
      const s = await this.session();
      const n = s.nodeFor(this.name);
      node = typeof n === "string" ? n : await n;
    }
    let conn: Connection | undefined;
    const onAbort = () => conn?.destroy();
    signal?.addEventListener("abort", onAbort, { once: true });
    let term = 0n;
    try {
      while (!signal?.aborted) {
        if (!conn || conn.ended) conn = await adapter.connect(node);
        if (signal?.aborted) return;
        let reply: unknown;
        try {
          reply = await conn.call(["ELECT.OBSERVE", this.name, "TERM", String(term), "BLOCK", "0"]);
        } catch (e) {
          if (signal?.aborted) return;
          throw toLockError(e);
        }
        if (signal?.aborted) return;
        const leader = toLeader(reply);
        term = leader ? leader.term : 0n;
        yield leader;
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      conn?.destroy();
    }
  }

  /** Closes the session this election opened for itself (a session given to it is left open). */
  async close(): Promise<void> {
    if (this.own && this.sessionP) {
      const p = this.sessionP;
      this.sessionP = undefined;
      await (await p.catch(() => undefined))?.close();
    }
  }
}
