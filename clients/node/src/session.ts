import { randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";

import { Adapter, Connection, RedisClientLike, adapterFor } from "./adapter";
import {
  AuthenticationError,
  BusyError,
  LeaseTooShortError,
  LockError,
  LostError,
  LostReason,
  ModuleNotLoadedError,
  NotOwnerError,
  UnavailableError,
  replyCode,
  toLockError,
} from "./errors";
import { Election, ElectionOptions } from "./election";
import { Latch, Semaphore } from "./semaphore";
import { keySlot } from "./slot";

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

const ACQUIRE_CMD: Record<Kind, string> = {
  exclusive: "LOCK.ACQUIRE",
  read: "LOCK.RACQUIRE",
  write: "LOCK.WACQUIRE",
  multi: "LOCK.MACQUIRE",
};

const STANDALONE = "";

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref?.());
}

function parseMoved(e: unknown): string | undefined {
  const code = replyCode(e);
  if (code !== "MOVED" && code !== "ASK") return undefined;
  const parts = (e as Error).message.split(" ");
  return parts[2];
}

function toBigInt(v: unknown): bigint {
  if (typeof v === "bigint") return v;
  if (typeof v === "number") return BigInt(v);
  if (typeof v === "string") return BigInt(v);
  if (Buffer.isBuffer(v)) return BigInt(v.toString());
  throw new LockError(`unexpected reply ${String(v)}`);
}

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

/** The connection a wait was on broke mid-wait (`cause`: the client's error); a grant may have happened. */
class WaitBroken extends Error {
  constructor(cause: unknown) {
    super("the connection of a wait broke", { cause });
  }
}

function bindingId(key: string, owner: string): string {
  return `${key}\u0000${owner}`;
}

/** The session connection to one server (one per cluster node that owns a held key). */
export class NodeSession {
  conn?: Connection;
  up = false;
  closed = false;
  /** Incremented every time the token is (re)registered on a new connection. */
  epoch = 0;
  downSince = 0;
  /** performance.now() when the last PING answered was sent (elections believe they lead until it + lease/2). */
  lastOkPingSent?: number;
  /** Set by a `demoted` message: the drop that follows is reported as such. */
  demoted = false;
  private lastPingAt = 0;
  private pinging = false;
  private pingTimer?: NodeJS.Timeout;
  private downTimer?: NodeJS.Timeout;
  private reconnecting?: Promise<void>;
  private opening?: Promise<void>;

  constructor(
    private readonly s: Session,
    readonly node: string,
  ) {}

  /** Connects, registers the token, subscribes to the loss channel. */
  open(): Promise<void> {
    if (!this.opening) {
      this.opening = this.connectOnce().finally(() => {
        this.opening = undefined;
      });
    }
    return this.opening;
  }

  private async connectOnce(): Promise<void> {
    const conn = await this.s.adapter.connect(this.node || undefined, this.s.keepProcessAlive);
    try {
      try {
        await conn.call(["LOCK.SESSION", this.s.token]);
      } catch (e) {
        if (replyCode(e) === "ERR") {
          const known = await conn.call(["COMMAND", "INFO", "LOCK.ACQUIRE"]).catch(() => undefined);
          const missing = Array.isArray(known) && known.length > 0 && known[0] == null;
          if (missing) throw new ModuleNotLoadedError();
          const hasSession = await conn.call(["COMMAND", "INFO", "LOCK.SESSION"]).catch(() => undefined);
          if (Array.isArray(hasSession) && hasSession.length > 0 && hasSession[0] == null)
            throw new ModuleNotLoadedError(
              "the lock module on this server has no LOCK.SESSION: start the server with --loadmodule /path/to/a current liblock.so",
            );
        }
        throw toLockError(e);
      }
      await conn.subscribe(`__lock__:session:${this.s.token}`, (m) => this.s.onLossMessage(this.node, m));
    } catch (e) {
      conn.destroy();
      throw e instanceof LockError ? e : toLockError(e);
    }
    if (this.closed) {
      conn.destroy();
      throw new LockError("session closed");
    }
    this.conn = conn;
    this.up = true;
    this.epoch++;
    this.lastOkPingSent = undefined;
    this.demoted = false;
    this.lastPingAt = performance.now();
    this.clearDown();
    conn.onEnd(() => this.dropped(conn));
    this.schedulePing(conn, this.s.pingIntervalNow());
  }

  /** The next PING, `delay` ms from now: every pingIntervalMs, every lease/4 while an election campaigns or leads. */
  private schedulePing(conn: Connection, delay: number): void {
    this.pingTimer = setTimeout(async () => {
      if (conn !== this.conn || conn.ended) return;
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<"timeout">((r) => {
        timer = setTimeout(() => r("timeout"), this.s.pingTimeoutMs);
        if (!this.s.keepProcessAlive) timer.unref();
      });
      const sent = performance.now();
      this.lastPingAt = sent;
      this.pinging = true;
      const res = await Promise.race([conn.ping().then(() => "ok" as const, () => "error" as const), timeout]);
      this.pinging = false;
      clearTimeout(timer);
      if (conn !== this.conn) return;
      if (res !== "ok") {
        conn.destroy(); // dropped() follows
        return;
      }
      this.lastOkPingSent = sent;
      this.s.onPong(this.node, sent);
      this.schedulePing(conn, Math.max(0, this.lastPingAt + this.s.pingIntervalNow() - performance.now()));
    }, delay);
    if (!this.s.keepProcessAlive) this.pingTimer.unref();
  }

  /** The PING interval may have shortened (an election began): the next PING is scheduled by it. */
  kick(): void {
    const conn = this.conn;
    if (!conn || this.pinging || conn.ended) return;
    clearTimeout(this.pingTimer);
    this.schedulePing(conn, Math.max(0, this.lastPingAt + this.s.pingIntervalNow() - performance.now()));
  }

  private dropped(conn: Connection): void {
    if (conn !== this.conn) return;
    this.up = false;
    this.conn = undefined;
    clearTimeout(this.pingTimer);
    if (this.closed) return;
    // A leadership is not re-attached: it is lost with its connection.
    this.s.electionsDown(this.node, this.demoted ? "demoted" : "connection");
    this.downSince = Date.now();
    this.s.emit("disconnected", this.node);
    this.watchDown();
    void this.reconnect();
  }

  /** While down: a binding whose lease has passed since the drop is lost. */
  private watchDown(): void {
    clearInterval(this.downTimer);
    this.downTimer = setInterval(() => {
      if (this.up || this.closed) return this.clearDown();
      const downFor = Date.now() - this.downSince;
      for (const b of this.s.bindingsOn(this.node)) {
        if (downFor > b.leaseMs) this.s.lose(b, "down");
      }
    }, 50);
    if (!this.s.keepProcessAlive) this.downTimer.unref();
  }

  private clearDown(): void {
    clearInterval(this.downTimer);
    this.downTimer = undefined;
  }

  /** Reconnects until it works or the session closes, then re-attaches every binding. */
  reconnect(): Promise<void> {
    if (!this.reconnecting) {
      this.reconnecting = (async () => {
        let delay = 50;
        while (!this.closed && !this.up) {
          try {
            await this.open();
          } catch (e) {
            // Not a blip: said on the session's "error" event (the loop goes on: it may be fixed).
            if (e instanceof ModuleNotLoadedError || e instanceof AuthenticationError) this.s.emit("error", e);
            await sleep(delay);
            delay = Math.min(delay * 2, 500);
            continue;
          }
        }
        if (this.up) {
          this.s.emit("reconnected", this.node);
          await this.s.reattachAll(this.node);
        }
      })().finally(() => {
        this.reconnecting = undefined;
      });
    }
    return this.reconnecting;
  }

  /** Forces a new connection (after a `demoted` message or NOSESSION on a live one). */
  recycle(): void {
    if (this.conn) this.conn.destroy();
    else void this.reconnect();
  }

  close(): void {
    this.closed = true;
    this.up = false;
    clearTimeout(this.pingTimer);
    this.clearDown();
    this.conn?.destroy();
    this.conn = undefined;
  }
}

/**
 * Dedicated connections for waiting: one per concurrent wait, reused after. A connection taken
 * keeps the process alive (a wait in progress is work to finish); an idle one does not, unless
 * the session keeps the process alive.
 */
class WaitPool {
  private idle = new Map<string, Connection[]>();
  /** Every connection opened and not dropped yet, idle or busy (take and give leave it alone). */
  private all = new Set<Connection>();
  constructor(
    private readonly adapter: Adapter,
    private readonly keepProcessAlive: boolean,
  ) {}

  take(node: string): Connection | Promise<Connection> {
    const list = this.idle.get(node);
    while (list && list.length > 0) {
      const c = list.pop()!;
      if (c.ended) {
        this.all.delete(c);
        continue;
      }
      if (!this.keepProcessAlive) c.setRef(true);
      return c;
    }
    return this.open(node);
  }

  private async open(node: string): Promise<Connection> {
    const c = await this.adapter.connect(node || undefined, true);
    this.all.add(c);
    return c;
  }

  give(node: string, c: Connection): void {
    if (c.ended) {
      this.all.delete(c);
      return;
    }
    if (!this.keepProcessAlive) c.setRef(false);
    let list = this.idle.get(node);
    if (!list) this.idle.set(node, (list = []));
    list.push(c);
  }

  discard(c: Connection): void {
    this.all.delete(c);
    c.destroy();
  }

  get size(): number {
    return this.all.size;
  }

  close(): void {
    for (const c of this.all) c.destroy();
    this.all.clear();
    this.idle.clear();
  }
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
export class Session extends EventEmitter {
  readonly token: string;
  readonly leaseMs: number;
  /** @internal */ readonly adapter: Adapter;
  /** @internal */ readonly pingIntervalMs: number;
  /** @internal Elections' candidates campaigning or leading: bindingId(key, candidate) -> entry. */
  readonly elections = new Map<string, ElectionEntry>();
  /** @internal */ readonly pingTimeoutMs: number;
  private readonly nodes = new Map<string, NodeSession>();
  private readonly bindings = new Map<string, Binding>();
  private readonly pool: WaitPool;
  private slots?: string[];
  private slotsLoading?: Promise<void>;
  private counter = 0;
  private closing = false;
  /** @internal */ readonly keepProcessAlive: boolean;
  /**
   * The shortest lease the server keeps alive (`keepalive_min_lease_ms` of `INFO lock`, read when
   * the session opened); undefined if the server does not tell (then the server itself refuses).
   */
  minLeaseMs?: number;

  private constructor(client: RedisClientLike, opts: SessionOptions) {
    super();
    this.adapter = adapterFor(client);
    this.token = randomBytes(16).toString("hex");
    this.leaseMs = opts.leaseMs ?? 30000;
    this.pingIntervalMs = opts.pingIntervalMs ?? 1000;
    this.pingTimeoutMs = opts.pingTimeoutMs ?? 3000;
    this.keepProcessAlive = opts.keepProcessAlive ?? false;
    this.pool = new WaitPool(this.adapter, this.keepProcessAlive);
    // An 'error' event without a listener would throw: errors are reported through promises.
    this.on("error", () => {});
  }

  /**
   * Opens a session over `client` (an ioredis `Redis`/`Cluster` or a node-redis client/cluster):
   * a dedicated session connection (`client.duplicate()`), `LOCK.SESSION <token>`, subscribed to
   * its loss channel. Reads the server's shortest kept-alive lease (`INFO lock`) first.
   * Rejects with `LeaseTooShortError` (`leaseMs` below it), `AuthenticationError`,
   * `ModuleNotLoadedError` or `UnavailableError`.
   */
  static async open(client: RedisClientLike, opts: SessionOptions = {}): Promise<Session> {
    const s = new Session(client, opts);
    await s.readMinLease();
    s.checkLease(s.leaseMs);
    if (!s.adapter.cluster) await s.nodeSession(STANDALONE);
    else await s.loadSlots();
    return s;
  }

  private async readMinLease(): Promise<void> {
    let text: unknown;
    try {
      text = await this.adapter.call(undefined, ["INFO", "lock"]);
    } catch (e) {
      // A user allowed the lock commands but not INFO: the server refuses a short lease itself.
      if (replyCode(e) === "NOPERM") return;
      throw toLockError(e);
    }
    const m = /lock_keepalive_min_lease_ms:(\d+)/.exec(String(text));
    if (m) this.minLeaseMs = Number(m[1]);
  }

  /** @internal A lease the server keeps alive for this session: at least the server's floor. */
  checkLease(leaseMs: number): void {
    if (this.minLeaseMs !== undefined ? leaseMs < this.minLeaseMs : leaseMs <= 0)
      throw new LeaseTooShortError(leaseMs, this.minLeaseMs ?? 1);
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

  /** Releases every hold and closes the session's connections (not the client it was opened with). */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const releases: Promise<unknown>[] = [];
    for (const e of [...this.elections.values()]) releases.push(e.close().catch(() => {}));
    for (const b of [...this.bindings.values()]) {
      for (const h of [...b.holds]) releases.push(h.releaseAll().catch(() => {}));
    }
    await Promise.all(releases);
    this.pool.close();
    for (const n of this.nodes.values()) n.close();
    this.nodes.clear();
  }

  get closed(): boolean {
    return this.closing;
  }

  /** Connections this session opened for waiting (idle and busy). */
  get waitConnections(): number {
    return this.pool.size;
  }

  // ------------------------------------------------------------ internals

  /** @internal The PING interval now: pingIntervalMs, or lease/4 of the shortest election campaigning or leading. */
  pingIntervalNow(): number {
    let ms = this.pingIntervalMs;
    for (const e of this.elections.values()) ms = Math.min(ms, e.leaseMs / 4);
    return ms;
  }

  /** @internal A candidate starts campaigning (or leading): PINGs at its lease/4 from now. */
  addElection(e: ElectionEntry): void {
    this.elections.set(bindingId(e.key, e.candidate), e);
    this.nodes.get(e.node)?.kick();
  }

  /** @internal */
  removeElection(e: ElectionEntry): void {
    const id = bindingId(e.key, e.candidate);
    if (this.elections.get(id) === e) this.elections.delete(id);
  }

  /** @internal A PING sent at `sent` was answered: leaders on `node` may believe they lead until sent + lease/2. */
  onPong(node: string, sent: number): void {
    if (this.elections.size === 0) return;
    for (const e of this.elections.values()) if (e.node === node) e.pong(sent);
  }

  /** @internal The session connection to `node` dropped (or its server was demoted): its candidates' leaderships are lost. */
  electionsDown(node: string, reason: LostReason): void {
    if (this.elections.size === 0) return;
    for (const e of [...this.elections.values()]) if (e.node === node) e.lose(reason);
  }

  /** @internal The session connection to `node`, if open (campaigns read its epoch and last answered PING). */
  nodeSessionIfAny(node: string): NodeSession | undefined {
    return this.nodes.get(node);
  }

  /** @internal */
  newOwner(): string {
    return `${this.token}:${++this.counter}`;
  }

  /** @internal */
  nodeSession(node: string): NodeSession | Promise<NodeSession> {
    const ns = this.nodes.get(node);
    if (ns && ns.up) return ns;
    return this.nodeSessionSlow(node);
  }

  private async nodeSessionSlow(node: string): Promise<NodeSession> {
    let ns = this.nodes.get(node);
    if (!ns) {
      ns = new NodeSession(this, node);
      this.nodes.set(node, ns);
      try {
        await ns.open();
      } catch (e) {
        this.nodes.delete(node);
        throw e;
      }
      return ns;
    }
    if (!ns.up) {
      // One attempt (shared with the reconnect loop): a caller is told the server is unavailable.
      try {
        await ns.open();
      } catch (e) {
        throw e instanceof LockError ? e : toLockError(e);
      }
    }
    return ns;
  }

  private async loadSlots(): Promise<void> {
    if (!this.slotsLoading) {
      this.slotsLoading = (async () => {
        let reply: unknown;
        try {
          reply = await this.adapter.call(undefined, ["CLUSTER", "SLOTS"]);
        } catch (e) {
          throw toLockError(e);
        }
        const slots: string[] = new Array(16384).fill("");
        for (const range of reply as unknown[][]) {
          const [start, end, master] = range as [number, number, unknown[]];
          const host = String(master[0]) || "127.0.0.1";
          const node = `${host}:${Number(master[1])}`;
          for (let i = Number(start); i <= Number(end); i++) slots[i] = node;
        }
        this.slots = slots;
      })().finally(() => {
        this.slotsLoading = undefined;
      });
    }
    return this.slotsLoading;
  }

  /** @internal The node serving `key` ("" on a single server). */
  nodeFor(key: string): string | Promise<string> {
    if (!this.adapter.cluster) return STANDALONE;
    const n = this.slots?.[keySlot(key)];
    return n ? n : this.nodeForCluster(key);
  }

  private async nodeForCluster(key: string): Promise<string> {
    if (!this.slots) await this.loadSlots();
    const n = this.slots![keySlot(key)];
    if (!n) throw new UnavailableError(`no cluster node serves the slot of '${key}'`);
    return n;
  }

  /** @internal A command through the user's client, errors typed. */
  async call(key: string | undefined, args: string[]): Promise<unknown> {
    try {
      return await this.adapter.call(key, args);
    } catch (e) {
      throw toLockError(e);
    }
  }

  private checkKeys(keys: string[]): void {
    if (keys.length === 0) throw new LockError("no keys to lock");
    if (this.adapter.cluster && keys.length > 1) {
      const slot = keySlot(keys[0]);
      if (keys.some((k) => keySlot(k) !== slot))
        throw new LockError(
          `a multi-lock's keys must hash to one cluster slot: give them one {hash tag}, e.g. '{order:7}:a', '{order:7}:b' (got ${keys.join(", ")})`,
        );
    }
  }

  /**
   * @internal Sends an acquire: waits on a pooled connection, cancels per the contract, retries
   * NOSESSION once, and queues again (with a fresh owner, or the same one when it cannot change,
   * in the time left) when the connection it waits on breaks while the server can still be reached.
   */
  async acquireRaw(spec: RunSpec): Promise<unknown> {
    if (this.closing) throw new LockError("session closed");
    this.checkKeys(spec.keys);
    if (spec.bind && spec.kind !== "latch") this.checkLease(spec.leaseMs);
    spec.signal?.throwIfAborted();
    const deadline = spec.timeoutMs !== undefined && spec.timeoutMs > 0 ? performance.now() + spec.timeoutMs : undefined;
    let nosessionRetried = false;
    for (let attempt = 0; ; attempt++) {
      // (nodeFor and nodeSession answer at once when they can: no await then.)
      const n = this.nodeFor(spec.keys[0]);
      const node = typeof n === "string" ? n : await n;
      let ns: NodeSession | undefined;
      if (spec.bind) {
        const x = this.nodeSession(node);
        ns = x instanceof NodeSession ? x : await x;
      }
      const epoch = ns?.epoch ?? 0;
      const args = this.acquireArgs(spec);
      try {
        const reply = await this.sendAcquire(node, spec, args);
        if (reply != null && ns && spec.kind !== "election" && (ns.epoch !== epoch || !ns.up)) {
          // Served while the session connection was being replaced: the grant may carry its lease only.
          await this.reattach(spec.keys, spec.owner, spec.leaseMs, spec.kind === "semaphore").catch(() => {});
        }
        return reply;
      } catch (e) {
        if (spec.signal?.aborted && e === spec.signal.reason) throw e;
        if (e instanceof WaitBroken) {
          await this.requeue(node, spec, e.cause);
          spec.signal?.throwIfAborted(); // aborted while the old owner was cleaned up: the fresh one was never queued
          if (deadline !== undefined) {
            const left = Math.ceil(deadline - performance.now());
            if (left <= 0) return null; // timed out, as the server would have said
            spec.timeoutMs = left;
          }
          continue;
        }
        const code = replyCode(e);
        if (code === "NOSESSION" && spec.bind && !nosessionRetried) {
          nosessionRetried = true;
          if (this.adapter.cluster) await this.loadSlots();
          const n2 = await this.nodeFor(spec.keys[0]);
          const ns2 = this.nodes.get(n2);
          if (ns2 && ns2.up) {
            ns2.recycle();
            await sleep(10);
          }
          continue;
        }
        if ((code === "MOVED" || code === "ASK" || code === "TRYAGAIN") && attempt < 5) {
          await this.loadSlots();
          if (code === "TRYAGAIN") await sleep(50);
          continue;
        }
        throw toLockError(e);
      }
    }
  }

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
  private async requeue(node: string, spec: RunSpec, broken: unknown): Promise<void> {
    if (this.closing) {
      await this.boundedCleanup(spec);
      throw toLockError(broken);
    }
    let conn: Connection;
    try {
      conn = await this.pool.take(node);
    } catch (e) {
      void this.boundedCleanup(spec); // through the client, in case it reconnects before the lease ends
      throw toLockError(e);
    }
    try {
      await this.cleanup(spec, (args) => conn.call(args));
    } finally {
      this.pool.give(node, conn);
    }
    if (spec.freshOwner) spec.owner = spec.freshOwner(); // (a latch wait has no owner and no freshOwner)
  }

  private acquireArgs(spec: RunSpec): string[] {
    let args: string[];
    if (spec.kind === "latch") args = ["LATCH.AWAIT", spec.keys[0]];
    else if (spec.kind === "election") {
      args = ["ELECT.CAMPAIGN", spec.keys[0], spec.owner];
      if (spec.value !== undefined) args.push("VALUE", spec.value);
      args.push("PX", String(spec.leaseMs));
    }
    else if (spec.kind === "semaphore")
      args = ["SEM.ACQUIRE", spec.keys[0], spec.owner, "PERMITS", String(spec.permits ?? 1), "PX", String(spec.leaseMs)];
    else {
      const cmd = ACQUIRE_CMD[spec.kind];
      args =
        spec.kind === "multi"
          ? [cmd, String(spec.keys.length), ...spec.keys, spec.owner]
          : [cmd, spec.keys[0], spec.owner];
      args.push("PX", String(spec.leaseMs));
    }
    if (spec.timeoutMs === undefined) args.push("BLOCK", "0");
    else if (spec.timeoutMs > 0) args.push("BLOCK", String(Math.ceil(spec.timeoutMs)));
    if (spec.kind !== "latch" && spec.kind !== "semaphore" && spec.kind !== "election") args.push("FENCE");
    if (spec.bind) args.push("SESSION", this.token);
    return args;
  }

  /**
   * After a cancelled wait: `LOCK.CANCEL key owner`, then `LOCK.RELEASE key owner` (MRELEASE for
   * a multi-lock, SEM.RELEASE for a semaphore) for a grant that crossed it. A latch wait has no
   * owner and is given nothing: closing its connection ended it.
   */
  private async cleanup(
    spec: RunSpec,
    send: (args: string[]) => Promise<unknown> = (args) => this.adapter.call(spec.keys[0], args),
  ): Promise<void> {
    if (spec.kind === "latch") return;
    // First end the wait in the server: once LOCK.CANCEL has answered no grant can reach the
    // owner, so the release below drops exactly what crossed the cancel. (Closing the waiting
    // connection alone leaves a window: a grant written into a socket just closed looks
    // delivered to the server.) A multi-lock waiter leaves every key's queue through one key.
    for (let i = 0; i < 3; i++) {
      try {
        await send(["LOCK.CANCEL", spec.keys[0], spec.owner]);
        break;
      } catch (e) {
        if (replyCode(e) !== undefined) break;
        await sleep(50);
      }
    }
    const args =
      spec.kind === "multi"
        ? ["LOCK.MRELEASE", String(spec.keys.length), ...spec.keys, spec.owner]
        : spec.kind === "election"
          ? ["ELECT.RESIGN", spec.keys[0], spec.owner]
          : [spec.kind === "semaphore" ? "SEM.RELEASE" : "LOCK.RELEASE", spec.keys[0], spec.owner];
    if (spec.kind === "read") args.push("READ");
    if (spec.kind === "write") args.push("WRITE");
    for (let i = 0; i < 3; i++) {
      try {
        await send(args);
        return;
      } catch (e) {
        const code = replyCode(e);
        if (code !== undefined) return; // NOTOWNER: it was never granted (EXPIRED: its lease ended, the permits are back)
        await sleep(50);
      }
    }
  }

  /** The cleanup, waited for at most 2 s (a client queueing offline goes on in the background). */
  private boundedCleanup(spec: RunSpec): Promise<void> {
    return Promise.race([this.cleanup(spec), sleep(2000)]);
  }

  private sendAcquire(node: string, spec: RunSpec, args: string[]): Promise<unknown> {
    const waits = spec.timeoutMs === undefined || spec.timeoutMs > 0;
    if (!waits) {
      // A try: through the user's client, which follows MOVED.
      return this.adapter.call(spec.keys[0], args);
    }
    const taken = this.pool.take(node);
    if (taken instanceof Promise) {
      return taken.then(
        (conn) => this.waitOn(node, spec, args, conn),
        (e) => {
          throw toLockError(e);
        },
      );
    }
    return this.waitOn(node, spec, args, taken);
  }

  /** The wait on a pooled connection: its answer, or the cancel of the contract (close the connection, release the owner). */
  private waitOn(node: string, spec: RunSpec, args: string[], conn: Connection): Promise<unknown> {
    if (!spec.signal && spec.timeoutMs === undefined) {
      // Nothing can cancel this wait but a broken connection: no guard, no listener.
      return conn.call(args).then(
        (reply) => {
          this.pool.give(node, conn);
          return reply;
        },
        (e) => this.waitFailed(node, spec, conn, e),
      );
    }
    return new Promise<unknown>((resolve, reject) => {
      let settled = false;
      let guard: NodeJS.Timeout | undefined;
      const onAbort = () => cancel(spec.signal!.reason ?? new DOMException("aborted", "AbortError"));
      const finish = () => {
        settled = true;
        clearTimeout(guard);
        spec.signal?.removeEventListener("abort", onAbort);
      };
      const cancel = (reason: unknown) => {
        if (settled) return;
        finish();
        // Closing the connection drops the waiter at once; a grant whose answer was in flight is
        // released by the module; the RELEASE covers one that arrived as the connection closed.
        this.pool.discard(conn);
        this.boundedCleanup(spec).finally(() => reject(reason));
      };
      spec.signal?.addEventListener("abort", onAbort, { once: true });
      if (spec.timeoutMs !== undefined) {
        // The server ends the wait at BLOCK time; this guard only covers a server that stopped answering.
        guard = setTimeout(
          () => cancel(new UnavailableError(`no answer from the server ${spec.timeoutMs! + 5000} ms into a wait`)),
          spec.timeoutMs + 5000,
        );
      }
      conn.call(args).then(
        (reply) => {
          if (settled) return;
          finish();
          this.pool.give(node, conn);
          resolve(reply);
        },
        (e) => {
          if (settled) return;
          finish();
          this.waitFailed(node, spec, conn, e).catch(reject);
        },
      );
    });
  }

  /**
   * A wait answered with an error (the connection goes back: rejects with `e`) or broken (it is
   * closed; rejects with WaitBroken, for acquireRaw to clean up and queue again).
   */
  private waitFailed(node: string, spec: RunSpec, conn: Connection, e: unknown): Promise<never> {
    if (replyCode(e) !== undefined) {
      this.pool.give(node, conn);
      return Promise.reject(e);
    }
    this.pool.discard(conn);
    return Promise.reject(new WaitBroken(e));
  }

  /** @internal */
  register(hold: Bindable, node: string, sem = false): void {
    const bs: Binding[] = [];
    for (const key of hold.keys) {
      const id = bindingId(key, hold.owner);
      let b = this.bindings.get(id);
      if (!b) this.bindings.set(id, (b = { id, key, owner: hold.owner, node, leaseMs: hold.leaseMs, sem, holds: [] }));
      b.leaseMs = Math.max(b.leaseMs, hold.leaseMs);
      if (!b.holds.includes(hold)) b.holds.push(hold);
      bs.push(b);
    }
    hold.bindings = bs;
  }

  /** @internal */
  unregister(hold: Bindable): void {
    const bs = hold.bindings;
    if (!bs) return;
    hold.bindings = undefined;
    // The binding objects the hold was registered in (their ids made once: no new key string to hash).
    for (const b of bs) {
      if (this.bindings.get(b.id) !== b) continue; // lost: already removed
      const i = b.holds.indexOf(hold);
      if (i >= 0) b.holds.splice(i, 1);
      if (b.holds.length === 0) this.bindings.delete(b.id);
    }
  }

  /**
   * @internal An owner given to an acquire must hold a lock (not permits) bound to this session
   * now, none of `keys` yet (that is a re-entry; and a cancelled wait's cleanup, a release as the
   * owner, must not drop a hold it already has), and be the owner this Lock object (or its
   * read-write lock's other side) holds as (`current`), if it holds.
   */
  checkOwner(owner: string, keys: string[], current: string | undefined): void {
    if (current !== undefined && current !== owner)
      throw new LockError(`this lock object holds as owner '${current}': it cannot also hold as '${owner}'`);
    let held = false;
    for (const b of this.bindings.values()) {
      if (b.owner !== owner) continue;
      if (b.sem) throw new LockError(`owner '${owner}' holds semaphore permits: pass the owner of a lock's hold`);
      if (keys.includes(b.key)) throw new LockError(`owner '${owner}' already holds '${b.key}': re-enter instead`);
      held = true;
    }
    if (!held) throw new LockError(`owner '${owner}' holds nothing in this session: pass the owner of a live hold`);
  }

  /** @internal */
  bindingsOn(node: string): Binding[] {
    return [...this.bindings.values()].filter((b) => b.node === node);
  }

  /** @internal Marks every hold of a binding lost. */
  lose(b: Binding, reason: LostReason): void {
    if (this.bindings.get(b.id) !== b) return;
    this.bindings.delete(b.id);
    const err = new LostError(b.key, b.owner, reason, b.sem ? "semaphore" : "lock");
    for (const h of b.holds) h.markLost(err);
    // Whatever is left of it on the server (a hold no longer renewed) goes now rather than at its lease's end.
    if (reason === "down" || reason === "maxhold") {
      void this.adapter.call(b.key, [b.sem ? "SEM.RELEASE" : "LOCK.RELEASE", b.key, b.owner]).catch(() => {});
    }
    this.emit("lost", err);
  }

  /** @internal `<reason> <owner-length> <owner> <key>` or `demoted`. */
  onLossMessage(node: string, msg: Buffer): void {
    const text = msg.toString("latin1");
    if (text === "demoted") {
      const ns = this.nodes.get(node);
      if (ns) ns.demoted = true;
      this.electionsDown(node, "demoted");
      ns?.recycle();
      return;
    }
    const sp1 = msg.indexOf(0x20);
    const sp2 = msg.indexOf(0x20, sp1 + 1);
    if (sp1 < 0 || sp2 < 0) return;
    const reason = msg.subarray(0, sp1).toString();
    const len = Number(msg.subarray(sp1 + 1, sp2).toString());
    const owner = msg.subarray(sp2 + 1, sp2 + 1 + len).toString();
    const key = msg.subarray(sp2 + 2 + len).toString();
    const e = this.elections.get(bindingId(key, owner));
    if (e) e.lose((["forced", "gone", "idle", "maxhold", "moved"].includes(reason) ? reason : "gone") as LostReason);
    const b = this.bindings.get(bindingId(key, owner));
    if (!b) return;
    const known: LostReason[] = ["forced", "gone", "maxhold", "moved"];
    this.lose(b, (known.includes(reason as LostReason) ? reason : "gone") as LostReason);
  }

  /**
   * @internal `LOCK.RENEW key owner PX lease SESSION token` for each key (`SEM.RENEW` for a
   * semaphore's permits); NOTOWNER (or a semaphore's EXPIRED) -> lost.
   */
  async reattach(keys: string[], owner: string, leaseMs: number, sem = false): Promise<void> {
    for (const key of keys) {
      const b = this.bindings.get(bindingId(key, owner));
      await this.renewBinding(key, owner, b?.leaseMs ?? leaseMs, sem);
    }
  }

  private async renewBinding(key: string, owner: string, leaseMs: number, sem: boolean): Promise<void> {
    for (;;) {
      const b = this.bindings.get(bindingId(key, owner));
      try {
        const cmd = sem ? "SEM.RENEW" : "LOCK.RENEW";
        await this.adapter.call(key, [cmd, key, owner, "PX", String(leaseMs), "SESSION", this.token]);
        return;
      } catch (e) {
        const code = replyCode(e);
        if (code === "NOTOWNER") {
          if (b) this.lose(b, "notowner");
          return;
        }
        if (code === "EXPIRED" && sem) {
          // The permits' lease ended before the re-attach: they are back in the semaphore.
          if (b) this.lose(b, "gone");
          return;
        }
        // NOSESSION, READONLY, a connection not back yet (a failover): try again while the binding lives.
        if (!b || this.bindings.get(bindingId(key, owner)) !== b || this.closing) return;
        if (code === "NOSESSION") {
          if (this.adapter.cluster) await this.loadSlots().catch(() => {});
          const node = await Promise.resolve(this.nodeFor(key)).catch(() => b.node);
          if (node !== b.node) b.node = node;
          await Promise.resolve().then(() => this.nodeSession(node)).catch(() => {});
        }
        await sleep(100);
      }
    }
  }

  /** @internal Re-attaches every binding of a node after its session connection came back. */
  async reattachAll(node: string): Promise<void> {
    await Promise.all(this.bindingsOn(node).map((b) => this.renewBinding(b.key, b.owner, b.leaseMs, b.sem)));
  }
}

/** The owner id a Lock (or both sides of an RWLock) uses while it holds: fresh per first acquisition. */
class OwnerSlot {
  owner?: string;
  holds = 0;
  constructor(private readonly s: Session) {}
  take(): string {
    if (!this.owner || this.holds === 0) this.owner = this.s.newOwner();
    return this.owner;
  }
  /** A fresh owner for a wait queued again after its connection broke (nothing holds as the old one). */
  renew(): string {
    this.owner = this.s.newOwner();
    return this.owner;
  }
  /** An owner given by the caller (checked by Session.checkOwner): kept for the other side of a read-write lock. */
  use(owner: string): string {
    this.owner = owner;
    return owner;
  }
}

/**
 * A hold on a lock. `signal` aborts with a `LostError` when the hold is lost. A hold acquired
 * again through the same Lock object (re-entry) is the same Hold with `count` one more;
 * `release()` drops one.
 */
export class Hold extends EventEmitter implements Bindable {
  readonly keys: string[];
  readonly owner: string;
  /** Fencing token of the latest acquisition (of the first key, for a multi-lock). Below 2^53 today, exact as a bigint. */
  token: bigint;
  /** Fencing token per key (a multi-lock). */
  tokens: bigint[];
  /** Holds this object stands for (re-entries). 0 once released. */
  count = 1;
  leaseMs: number;
  readonly kind: Kind;
  private controller?: AbortController;
  private lostError?: LostError;
  /** @internal The session's bindings this hold is in (while bound and not ended). */
  bindings?: Binding[];

  /** @internal */
  constructor(
    private readonly s: Session,
    kind: Kind,
    keys: string[],
    owner: string,
    tokens: bigint[],
    leaseMs: number,
    private readonly onEnd: () => void,
    readonly bound: boolean,
  ) {
    super();
    this.kind = kind;
    this.keys = keys;
    this.owner = owner;
    this.tokens = tokens;
    this.token = tokens[0];
    this.leaseMs = leaseMs;
  }

  get key(): string {
    return this.keys[0];
  }

  /** `token` in decimal: for JSON, logs and storage APIs that take no bigint (`JSON.stringify` throws on a bigint). */
  get tokenString(): string {
    return this.token.toString();
  }

  /** Aborted (with a `LostError` reason) when the hold is lost. */
  get signal(): AbortSignal {
    // Made on first use: most holds never look at it.
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.lostError) this.controller.abort(this.lostError);
    }
    return this.controller.signal;
  }

  get lost(): boolean {
    return this.lostError !== undefined;
  }

  /** @internal A fresh controller made ahead for `signal` (kept only if the hold has none yet). */
  adoptController(c: AbortController): void {
    if (this.controller) return;
    this.controller = c;
    if (this.lostError) c.abort(this.lostError);
  }

  get released(): boolean {
    return this.count === 0;
  }

  /** Calls `cb` once if the hold is lost. */
  onLost(cb: (err: LostError) => void): this {
    return this.once("lost", cb);
  }

  /** @internal */
  markLost(err: LostError): void {
    if (this.lostError || this.count === 0) return;
    this.lostError = err;
    this.count = 0;
    this.onEnd();
    this.controller?.abort(err);
    this.emit("lost", err);
  }

  private releaseArgs(): string[] {
    if (this.kind === "multi") return ["LOCK.MRELEASE", String(this.keys.length), ...this.keys, this.owner];
    const args = ["LOCK.RELEASE", this.key, this.owner];
    if (this.kind === "read") args.push("READ");
    if (this.kind === "write") args.push("WRITE");
    return args;
  }

  /** Drops one hold (the last one releases the lock). A lost hold rejects with its LostError; NOTOWNER marks it lost. */
  async release(): Promise<void> {
    if (this.lostError) throw this.lostError;
    if (this.count === 0) return;
    try {
      await this.s.adapter.call(this.key, this.releaseArgs());
    } catch (e) {
      const le = toLockError(e);
      if (le instanceof NotOwnerError) {
        const err = new LostError(this.key, this.owner, "notowner");
        this.markLost(err);
        throw err;
      }
      throw le;
    }
    this.count--;
    if (this.count === 0) {
      this.onEnd();
      this.emit("released");
    }
  }

  /** @internal Every hold this object stands for (session close). */
  async releaseAll(): Promise<void> {
    while (this.count > 0 && !this.lostError) await this.release();
  }

  /** Sets a new lease from now (default: the current one). NOTOWNER -> the hold is lost, LostError. */
  async extend(leaseMs?: number): Promise<void> {
    if (this.lostError) throw this.lostError;
    if (this.count === 0) throw new NotOwnerError("the hold was released");
    const lease = leaseMs ?? this.leaseMs;
    for (const key of this.keys) {
      const args = ["LOCK.RENEW", key, this.owner, "PX", String(lease)];
      if (this.bound) args.push("SESSION", this.s.token);
      try {
        await this.s.call(key, args);
      } catch (e) {
        if (e instanceof NotOwnerError) {
          const err = new LostError(key, this.owner, "notowner");
          this.markLost(err);
          throw err;
        }
        throw e;
      }
    }
    this.leaseMs = lease;
  }
}

/** An exclusive lock (or one side of a read-write lock, or a multi-lock). Reentrant through this object. */
export class Lock {
  private current?: Hold;
  private queue?: Promise<unknown>;
  private inFlight = 0;

  /** @internal */
  constructor(
    protected readonly s: Session,
    readonly kind: Kind,
    readonly keys: string[],
    private readonly slot: OwnerSlot,
  ) {}

  get key(): string {
    return this.keys[0];
  }

  /** The hold this object has now, if any. */
  get hold(): Hold | undefined {
    return this.current && this.current.count > 0 ? this.current : undefined;
  }

  /**
   * Takes the lock, waiting up to `timeoutMs` (BusyError after), cancelled by `signal`. Called
   * again on this object while it holds, it re-enters: the same Hold, `count` one more.
   */
  acquire(opts: AcquireOptions = {}): Promise<Hold> {
    // Calls on one object run one after another, so a second call sees the first one's hold.
    const run =
      this.inFlight === 0
        ? this.acquireNow(opts, true, true)
        : this.queue!.then(
            () => this.acquireNow(opts, true, true),
            () => this.acquireNow(opts, true, true),
          );
    this.inFlight++;
    this.queue = run; // (its rejection is the caller's; a later call chains on both outcomes)
    return run;
  }

  /** Takes the lock if it is free now: the Hold, or undefined when another owner has it. */
  async tryAcquire(opts: Omit<AcquireOptions, "timeoutMs"> = {}): Promise<Hold | undefined> {
    try {
      return await this.acquire({ ...opts, timeoutMs: 0 });
    } catch (e) {
      if (e instanceof BusyError) return undefined;
      throw e;
    }
  }

  /** @internal */
  async acquireNow(opts: AcquireOptions, bind: boolean, counted = false): Promise<Hold> {
    try {
      const leaseMs = opts.leaseMs ?? this.s.leaseMs;
      const held = this.hold;
      if (opts.owner !== undefined)
        this.s.checkOwner(opts.owner, this.keys, held?.owner ?? (this.slot.holds > 0 ? this.slot.owner : undefined));
      const chosen = held ? held.owner : opts.owner !== undefined ? this.slot.use(opts.owner) : this.slot.take();
      // The owner may change only while nothing holds as it: not a re-entry, not an owner the
      // caller gave, not while the other side of a read-write lock holds.
      const mayRenew = !held && opts.owner === undefined && this.slot.holds === 0;
      const spec = {
        kind: this.kind,
        keys: this.keys,
        owner: chosen,
        freshOwner: mayRenew ? () => this.slot.renew() : undefined,
        leaseMs,
        timeoutMs: held ? 0 : opts.timeoutMs,
        signal: opts.signal,
        bind,
      };
      const reply = await this.s.acquireRaw(spec);
      const owner = spec.owner;
      if (reply == null) {
        if (held) throw new BusyError(this.key, `re-entry of '${this.key}' refused`);
        throw new BusyError(
          this.key,
          opts.timeoutMs ? `lock '${this.keys.join("', '")}' still held after ${opts.timeoutMs} ms` : undefined,
        );
      }
      const tokens = Array.isArray(reply) ? reply.map(toBigInt) : [toBigInt(reply)];
      if (held) {
        held.count++;
        held.tokens = tokens;
        held.token = tokens[0];
        held.leaseMs = leaseMs;
        return held;
      }
      this.slot.holds++;
      const n = this.s.nodeFor(this.key);
      const node = typeof n === "string" ? n : await n;
      const hold = new Hold(
        this.s,
        this.kind,
        this.keys,
        owner,
        tokens,
        leaseMs,
        () => {
          this.slot.holds--;
          if (bind) this.s.unregister(hold);
        },
        bind,
      );
      if (bind) this.s.register(hold, node);
      this.current = hold;
      return hold;
  
    } finally {
      if (counted) this.inFlight--; // (a call of acquire(): see there)
    }
  }

  /**
   * Runs `fn` holding the lock and releases it after. `signal` aborts if the hold is lost while
   * `fn` runs; `using` then rejects with the LostError even if `fn` resolved. A loss after `fn`
   * resolved (while releasing) does not undo its result: `using` resolves with it.
   */
  using<T>(fn: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
  using<T>(opts: AcquireOptions, fn: (signal: AbortSignal, hold: Hold) => Promise<T>): Promise<T>;
  async using<T>(
    a: AcquireOptions | ((signal: AbortSignal, hold: Hold) => Promise<T>),
    b?: (signal: AbortSignal, hold: Hold) => Promise<T>,
  ): Promise<T> {
    const opts = typeof a === "function" ? {} : a;
    const fn = typeof a === "function" ? a : b!;
    const acquiring = this.acquire(opts);
    // The callback's AbortSignal (Node takes microseconds to make one) is made while the acquire
    // is on its way, not between the grant and the callback.
    const controller = new AbortController();
    void controller.signal;
    const hold = await acquiring;
    hold.adoptController(controller);
    let result: T;
    try {
      result = await fn(hold.signal, hold);
    } catch (e) {
      if (!hold.lost) await hold.release().catch(() => {});
      throw e;
    }
    // Lost while fn ran: its work may not have been protected.
    if (hold.lost) throw hold.signal.reason;
    try {
      await hold.release();
    } catch (e) {
      // Lost after fn returned (the release found no hold): the work was done under the lock.
      if (!(e instanceof LostError)) throw e;
    }
    return result;
  }
}

/** A read-write lock: `read` and `write` are Locks of one owner, so a writer may downgrade and a sole reader upgrade. */
export class RWLock {
  readonly read: Lock;
  readonly write: Lock;
  /** @internal */
  constructor(s: Session, readonly key: string) {
    const slot = new OwnerSlot(s);
    this.read = new Lock(s, "read", [key], slot);
    this.write = new Lock(s, "write", [key], slot);
  }
}

/** Every key at once or none (`LOCK.MACQUIRE`): waits as one unit, never deadlocks on key order. */
export class MultiLock extends Lock {
  /** @internal */
  constructor(s: Session, keys: string[]) {
    super(s, "multi", keys, new OwnerSlot(s));
  }
}
