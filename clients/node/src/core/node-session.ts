// The session connection to one server: it registers the session's token (LOCK.SESSION),
// subscribes to the token's loss channel, PINGs, and on a drop reconnects and has the session
// re-attach its bindings. It sees the session only through NodeSessionHost, so that it imports
// nothing of the session core that owns it.

import { Adapter, Connection } from "../adapter";
import { AuthenticationError, LockError, LostReason, ModuleNotLoadedError, replyCode, toLockError } from "../errors";
import type { Binding } from "./bindings";
import { sleep } from "./util";

/** What a session connection needs of its session (the session core implements it). */
export interface NodeSessionHost {
  readonly adapter: Adapter;
  readonly token: string;
  readonly keepProcessAlive: boolean;
  readonly pingTimeoutMs: number;
  /** The PING interval now (shorter while an election campaigns or leads). */
  pingIntervalNow(): number;
  /** A message on the token's loss channel. */
  onLossMessage(node: string, msg: Buffer): void;
  /** A PING sent at `sent` was answered. */
  onPong(node: string, sent: number): void;
  /** The connection to `node` dropped: its leaderships are lost. */
  electionsDown(node: string, reason: LostReason): void;
  bindingsOn(node: string): Binding[];
  lose(b: Binding, reason: LostReason): void;
  reattachAll(node: string): Promise<void>;
  emit(event: "disconnected" | "reconnected" | "error", arg: unknown): boolean;
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
    private readonly s: NodeSessionHost,
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
