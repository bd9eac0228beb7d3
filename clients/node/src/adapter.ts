// One small interface over ioredis 5 (Redis, Cluster) and node-redis 4+ (createClient,
// createCluster): send a raw command through the user's client (which follows MOVED in a
// cluster), open a dedicated connection (to a given node in a cluster), subscribe.
//
// Dedicated connections never reconnect, queue offline or time commands out by themselves:
// the library decides what a dropped connection means (a cancelled wait, a session to
// re-register).

import { UnavailableError, isReplyError, toLockError } from "./errors";

/** A client this library accepts: an ioredis `Redis` or `Cluster`, or a node-redis client or cluster. */
export type RedisClientLike = object;

/** One dedicated connection. */
export interface Connection {
  /** Sends one command; resolves with the reply, rejects with the client's error. */
  call(args: string[]): Promise<unknown>;
  /** Subscribes; `onMessage` gets each message's raw bytes. After this only PING may be sent. */
  subscribe(channel: string, onMessage: (message: Buffer) => void): Promise<void>;
  /** PING (also valid while subscribed). */
  ping(): Promise<void>;
  /** Closes the socket at once (a waiter on it is dropped by the server). */
  destroy(): void;
  /** Called once, when the connection ends for any reason. */
  onEnd(cb: () => void): void;
  readonly ended: boolean;
  /**
   * Whether the socket keeps the Node process alive. The library's connections are unref'd by
   * default (a session left open does not hold the process) and ref'd while a wait is on them.
   */
  setRef(ref: boolean): void;
}

export interface Adapter {
  readonly kind: "ioredis" | "node-redis";
  readonly cluster: boolean;
  /** A command through the user's client; `key` routes it in a cluster. */
  call(key: string | undefined, args: string[]): Promise<unknown>;
  /**
   * A dedicated connection: a duplicate of the client (standalone, Sentinel) or to `node`
   * ("host:port") in a cluster. Its socket keeps the process alive only with `keepAlive`.
   * Rejects with AuthenticationError (credentials, ACL) or UnavailableError.
   */
  connect(node?: string, keepAlive?: boolean): Promise<Connection>;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Loose = Record<string, any>;

function has(o: Loose, name: string): boolean {
  return typeof o[name] === "function";
}

export function adapterFor(client: RedisClientLike): Adapter {
  const c = client as Loose;
  if (c === null || typeof c !== "object") throw new TypeError("expected an ioredis or node-redis client");
  // ioredis: Redis and Cluster both have `call` and an `isCluster` flag.
  if (has(c, "call") && typeof c.isCluster === "boolean") return new IoRedisAdapter(c);
  // node-redis cluster: `masters` and `nodeClient`; client: `sendCommand` and `duplicate`.
  if (has(c, "nodeClient") && has(c, "sendCommand")) return new NodeRedisAdapter(c, true);
  if (has(c, "sendCommand") && has(c, "duplicate")) return new NodeRedisAdapter(c, false);
  throw new TypeError("expected an ioredis (Redis, Cluster) or node-redis (createClient, createCluster) client");
}

function splitNode(node: string): { host: string; port: number } {
  const i = node.lastIndexOf(":");
  return { host: node.slice(0, i), port: Number(node.slice(i + 1)) };
}

// ---------------------------------------------------------------- ioredis

class IoRedisConnection implements Connection {
  ended = false;
  /** The last error event: ioredis rejects connect() with "Connection is closed." and tells why (WRONGPASS...) only here. */
  lastError?: unknown;
  private endCbs: (() => void)[] = [];
  private ref = true;
  constructor(private readonly r: Loose) {
    const end = () => {
      if (this.ended) return;
      this.ended = true;
      for (const cb of this.endCbs) cb();
    };
    r.on("error", (e: unknown) => {
      this.lastError = e; // otherwise reported through the commands' rejections and `end`
    });
    r.on("close", end);
    r.on("end", end);
  }
  call(args: string[]): Promise<unknown> {
    return this.r.call(...args);
  }
  async subscribe(channel: string, onMessage: (message: Buffer) => void): Promise<void> {
    this.r.on("messageBuffer", (ch: Buffer, msg: Buffer) => {
      if (ch.toString() === channel) onMessage(msg);
    });
    await this.r.subscribe(channel);
  }
  async ping(): Promise<void> {
    await this.r.ping();
  }
  destroy(): void {
    this.r.disconnect(false);
  }
  onEnd(cb: () => void): void {
    if (this.ended) queueMicrotask(cb);
    else this.endCbs.push(cb);
  }
  setRef(ref: boolean): void {
    this.ref = ref;
    this.applyRef();
  }
  /** (Also once connected: ioredis makes the socket in connect().) */
  applyRef(): void {
    const socket = this.r.stream as { ref?: () => void; unref?: () => void } | undefined;
    if (this.ref) socket?.ref?.();
    else socket?.unref?.();
  }
}

/** A failed connect, typed: a refusal of the credentials is an AuthenticationError, anything else UnavailableError. */
function connectError(e: unknown, lastError?: unknown): Error {
  if (isReplyError(e)) return toLockError(e);
  if (isReplyError(lastError)) return toLockError(lastError);
  return new UnavailableError(`cannot connect: ${(e as Error).message}`, { cause: e });
}

const IOREDIS_DEDICATED = {
  lazyConnect: true,
  retryStrategy: () => null,
  enableOfflineQueue: false,
  autoResubscribe: false,
  autoResendUnfulfilledCommands: false,
  maxRetriesPerRequest: 0,
  commandTimeout: undefined,
  reconnectOnError: null,
};

class IoRedisAdapter implements Adapter {
  readonly kind = "ioredis" as const;
  readonly cluster: boolean;
  constructor(private readonly c: Loose) {
    this.cluster = c.isCluster === true;
  }
  call(_key: string | undefined, args: string[]): Promise<unknown> {
    return this.c.call(...args);
  }
  async connect(node?: string, keepAlive = false): Promise<Connection> {
    let r: Loose;
    if (this.cluster) {
      if (!node) throw new Error("a cluster connection needs a node");
      const base: Loose | undefined = this.c.nodes("all")[0];
      if (!base) throw new UnavailableError("the cluster client has not connected yet");
      const { host, port } = splitNode(node);
      r = base.duplicate({ ...IOREDIS_DEDICATED, host, port, readOnly: false });
    } else {
      r = this.c.duplicate(IOREDIS_DEDICATED);
    }
    const conn = new IoRedisConnection(r);
    conn.setRef(keepAlive);
    try {
      await r.connect();
    } catch (e) {
      r.disconnect(false);
      throw connectError(e, conn.lastError);
    }
    conn.applyRef();
    return conn;
  }
}

// ---------------------------------------------------------------- node-redis

class NodeRedisConnection implements Connection {
  ended = false;
  private endCbs: (() => void)[] = [];
  constructor(private readonly r: Loose) {
    const end = () => {
      if (this.ended) return;
      this.ended = true;
      for (const cb of this.endCbs) cb();
    };
    r.on("error", (_e: unknown) => {
      // With reconnectStrategy false an error on an open socket ends the client.
      if (!r.isOpen) end();
    });
    r.on("end", end);
  }
  call(args: string[]): Promise<unknown> {
    return this.r.sendCommand(args);
  }
  async subscribe(channel: string, onMessage: (message: Buffer) => void): Promise<void> {
    await this.r.subscribe(channel, (msg: Buffer) => onMessage(msg), true);
  }
  async ping(): Promise<void> {
    await this.r.sendCommand(["PING"]);
  }
  destroy(): void {
    if (this.ended) return;
    try {
      const p = (this.r.destroy ?? this.r.disconnect).call(this.r);
      if (p && typeof (p as Promise<unknown>).catch === "function") (p as Promise<unknown>).catch(() => {});
    } catch {
      /* already closed */
    }
    // node-redis emits `end` on destroy; make sure it is seen even if it did not.
    queueMicrotask(() => {
      if (!this.ended) {
        this.ended = true;
        for (const cb of this.endCbs) cb();
      }
    });
  }
  onEnd(cb: () => void): void {
    if (this.ended) queueMicrotask(cb);
    else this.endCbs.push(cb);
  }
  setRef(ref: boolean): void {
    if (ref) this.r.ref();
    else this.r.unref();
  }
}

class NodeRedisAdapter implements Adapter {
  readonly kind = "node-redis" as const;
  constructor(
    private readonly c: Loose,
    readonly cluster: boolean,
  ) {}
  call(key: string | undefined, args: string[]): Promise<unknown> {
    if (this.cluster) return this.c.sendCommand(key, false, args);
    return this.c.sendCommand(args);
  }
  private dedicated(base: Loose, socket?: Loose): Loose {
    const opts = (base.options ?? {}) as Loose;
    return base.duplicate({
      socket: { ...(opts.socket ?? {}), ...(socket ?? {}), reconnectStrategy: false },
      disableOfflineQueue: true,
      pingInterval: undefined,
    });
  }
  async connect(node?: string, keepAlive = false): Promise<Connection> {
    let r: Loose;
    if (this.cluster) {
      if (!node) throw new Error("a cluster connection needs a node");
      const { host, port } = splitNode(node);
      const masters: Loose[] = this.c.masters ?? [];
      if (masters.length === 0) throw new UnavailableError("the cluster client has not connected yet");
      const base = await this.c.nodeClient(masters[0]);
      r = this.dedicated(base, { host, port });
    } else {
      r = this.dedicated(this.c);
    }
    const conn = new NodeRedisConnection(r);
    try {
      await r.connect();
    } catch (e) {
      conn.destroy();
      throw connectError(e);
    }
    conn.setRef(keepAlive);
    return conn;
  }
}

