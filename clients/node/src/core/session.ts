// The session core: the session's connections (one NodeSession per server, the wait pool), the
// cluster routing of keys, the bindings the server keeps alive and their re-attach, loss dispatch
// (to holds and to elections' candidates), and the commands every object sends. It imports none
// of the objects: they take a SessionCore, and the public Session (../session.ts) adds the
// factories on top of it. The acquire path is ./acquire.ts.

import { randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";

import { Adapter, RedisClientLike, adapterFor } from "../adapter";
import {
  LeaseTooShortError,
  LockError,
  LostError,
  LostReason,
  UnavailableError,
  replyCode,
  toLockError,
} from "../errors";
import { keySlot } from "../slot";
import { Bindable, Binding, bindingId } from "./bindings";
import { NodeSession, NodeSessionHost } from "./node-session";
import { sleep } from "./util";
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

const STANDALONE = "";

/**
 * The session without its factories: what the objects (locks, semaphores, latches, elections)
 * are built on. `SessionCore.open` opens one for an election given a client instead of a session.
 */
export class SessionCore extends EventEmitter implements NodeSessionHost {
  readonly token: string;
  readonly leaseMs: number;
  /** @internal */ readonly adapter: Adapter;
  /** @internal */ readonly pingIntervalMs: number;
  /** @internal Elections' candidates campaigning or leading: bindingId(key, candidate) -> entry. */
  readonly elections = new Map<string, ElectionEntry>();
  /** @internal */ readonly pingTimeoutMs: number;
  private readonly nodes = new Map<string, NodeSession>();
  private readonly bindings = new Map<string, Binding>();
  /** @internal The connections waits are made on (the acquire path, ./acquire.ts, takes and gives them). */
  readonly pool: WaitPool;
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

  /** @internal */
  protected constructor(client: RedisClientLike, opts: SessionOptions) {
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

  /** A session core over `client`, opened (see `Session.open`). */
  static async open(client: RedisClientLike, opts: SessionOptions = {}): Promise<SessionCore> {
    const s = new SessionCore(client, opts);
    await s.start();
    return s;
  }

  /** @internal Reads the server's shortest kept-alive lease, checks ours, connects (or loads the cluster's slots). */
  protected async start(): Promise<void> {
    await this.readMinLease();
    this.checkLease(this.leaseMs);
    if (!this.adapter.cluster) await this.nodeSession(STANDALONE);
    else await this.loadSlots();
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

  /** @internal Reads the cluster's slot map (again: after MOVED, ASK, TRYAGAIN, NOSESSION). */
  async loadSlots(): Promise<void> {
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
