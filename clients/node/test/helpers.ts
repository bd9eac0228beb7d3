// Real servers for the tests: the server binary from REDIS_SERVER (default redis-server) with
// the module from LOCK_MODULE (default <repo>/target/release/liblock.so), on free loopback
// ports, each killed by its own PID when the test ends.

import assert from "node:assert/strict";
import { ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before } from "node:test";

import IORedis, { Cluster } from "ioredis";
import { createClient, createCluster } from "redis";
// node-redis 4, installed under an npm alias (package.json: "redis4": "npm:redis@^4"): the
// package claims both majors, so every node-redis case runs on both.
import { createClient as createClient4, createCluster as createCluster4 } from "redis4";
// The newest majors (ioredis 6, node-redis 6) under aliases too ("ioredis6", "redis6"): the
// peer ranges accept them, test/majors.test.ts runs the core of the suite on them.
import IORedis6 from "ioredis6";
import { createClient as createClient6 } from "redis6";

import { Session, SessionOptions } from "../src";

export const SERVER = process.env.REDIS_SERVER || "redis-server";
export const MODULE = process.env.LOCK_MODULE || resolve(__dirname, "../../../../target/release/liblock.so");

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `cond` until it is true or `ms` passes (then throws with `what`). */
export async function waitFor(what: string, cond: () => Promise<boolean> | boolean, ms = 10000): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for: ${what}`);
    await sleep(10);
  }
}

export class Server {
  proc?: ChildProcess;
  readonly dir: string;
  constructor(
    readonly port: number,
    private readonly args: string[],
  ) {
    this.dir = mkdtempSync(join(tmpdir(), "lockjs-"));
  }

  static async start(opts: { module?: boolean; extra?: string[]; conf?: string } = {}): Promise<Server> {
    for (let i = 0; ; i++) {
      const port = await freePort();
      const args = [
        "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        ...(opts.module === false ? [] : ["--loadmodule", MODULE]),
        ...(opts.extra ?? []),
      ];
      const s = new Server(port, args);
      try {
        await s.spawn(opts.conf);
        return s;
      } catch (e) {
        s.kill();
        if (i >= 2) throw e;
      }
    }
  }

  private async spawn(conf?: string): Promise<void> {
    let args = this.args;
    if (conf !== undefined) {
      const path = join(this.dir, "redis.conf");
      writeFileSync(path, conf);
      args = [path, ...args];
    }
    args = [...args, "--dir", this.dir, "--logfile", join(this.dir, "log")];
    const proc = spawn(SERVER, args, { stdio: "ignore" });
    this.proc = proc;
    let exited = false;
    proc.on("exit", () => (exited = true));
    const c = new IORedis({ port: this.port, host: "127.0.0.1", lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    c.on("error", () => {});
    try {
      await waitFor(`${SERVER} on port ${this.port}`, async () => {
        if (exited) throw new Error(`${SERVER} exited at start (port ${this.port})`);
        try {
          if (c.status !== "ready") {
            c.disconnect();
            await c.connect();
          }
          return (await c.ping()) === "PONG";
        } catch {
          return false;
        }
      }, 10000);
    } finally {
      c.disconnect();
    }
  }

  /** A plain ioredis connection for checks (caller quits it). */
  admin(): IORedis {
    const c = new IORedis({ port: this.port, host: "127.0.0.1", maxRetriesPerRequest: 1 });
    c.on("error", () => {});
    return c;
  }

  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(signal);
  }

  async stop(): Promise<void> {
    const p = this.proc;
    if (p && p.exitCode === null && p.signalCode === null) {
      const exited = new Promise((r) => p.once("exit", r));
      p.kill("SIGKILL");
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export type ClientKind = "ioredis" | "node-redis" | "node-redis4" | "ioredis6" | "node-redis6";
export const CLIENT_KINDS: ClientKind[] = ["ioredis", "node-redis", "node-redis4"];

/**
 * The lease of a hold a test keeps alive past its lease: the server renews it at half the lease,
 * and a server held up for longer than the half left ends a kept hold, as it ends any lease
 * (docs/guarantees.md, KEEPALIVE). make test runs every suite at once on two cores, where a
 * server was held up past half a second: a 1000 ms hold could be gone. 3000 ms keeps it through a
 * 1.5 s hold-up.
 */
export const KEPT_LEASE_MS = 3000;
/** The newest majors, for the core subset (test/majors.test.ts). */
export const NEW_MAJOR_KINDS: ClientKind[] = ["ioredis6", "node-redis6"];

/** Connection options a test adds (a password). */
export interface ConnectOptions {
  username?: string;
  password?: string;
}

export interface Client {
  client: object;
  close(): Promise<void>;
  /** A round trip through the client (it is connected after). */
  ping(): Promise<void>;
}

export async function connectClient(kind: ClientKind, port: number, opts: ConnectOptions = {}): Promise<Client> {
  const options = { port, host: "127.0.0.1", username: opts.username, password: opts.password };
  const socket = { socket: { port, host: "127.0.0.1" }, username: opts.username, password: opts.password };
  switch (kind) {
    case "ioredis":
      return ioredisClient(new IORedis(options));
    case "ioredis6":
      return ioredisClient(new IORedis6(options));
    case "node-redis4": {
      const c = createClient4(socket);
      // node-redis 4 closes with quit() (disconnect() once the socket is not ready).
      return nodeRedisClient(c, async () => {
        if (c.isReady) await c.quit();
        else if (c.isOpen) await c.disconnect();
      });
    }
    case "node-redis": {
      const c = createClient(socket);
      return nodeRedisClient(c, async () => {
        if (c.isReady) await c.close();
        else c.destroy();
      });
    }
    case "node-redis6": {
      const c = createClient6(socket);
      return nodeRedisClient(c, async () => {
        if (c.isReady) await c.close();
        else c.destroy();
      });
    }
  }
}

/** What connectClient needs of an ioredis client, the same in majors 5 and 6. */
interface IORedisLike {
  on(event: "error", listener: () => void): unknown;
  once(event: "ready" | "error" | "end", listener: () => void): unknown;
  ping(): Promise<unknown>;
  disconnect(): void;
}

/**
 * Returned once the client is ready (or refused), as node-redis's connect() is: ioredis connects
 * in the background, and a test that changes the server's password "after the client connected"
 * raced the client's own AUTH (seen in CI: the client was refused, and the session then met
 * NOAUTH on it instead of WRONGPASS on its own connection).
 */
async function ioredisClient(c: IORedisLike): Promise<Client> {
  c.on("error", () => {});
  await new Promise<void>((res) => {
    c.once("ready", res);
    c.once("error", res);
    c.once("end", res);
  });
  return { client: c, close: async () => void c.disconnect(), ping: async () => void (await c.ping()) };
}

/** What connectClient needs of a node-redis client, the same in majors 4, 5 and 6 (closing differs). */
interface NodeRedisLike {
  on(event: "error", listener: () => void): unknown;
  connect(): Promise<unknown>;
  ping(): Promise<unknown>;
}

async function nodeRedisClient(c: NodeRedisLike, close: () => Promise<void>): Promise<Client> {
  c.on("error", () => {});
  await c.connect();
  return { client: c, ping: async () => void (await c.ping()), close };
}

export interface FixtureOptions {
  /** The client to connect (none: a server and its admin connection only). */
  kind?: ClientKind;
  /** Sessions opened on the client (default 1 when there is a client). */
  sessions?: number;
  sessionOptions?: SessionOptions;
  /** What fresh() keys start with. */
  keyPrefix?: string;
  /** Run after the fixture is up, and before it is torn down (for what a suite adds to it). */
  setUp?: (t: Fixture) => Promise<void>;
  tearDown?: (t: Fixture) => Promise<void>;
}

/**
 * A suite's shared state, made by `before` and ended by `after` hooks registered by fixture():
 * one server with the module, an admin connection, a client of the kind asked for and the
 * sessions on it. Read its fields in the tests (they are set once `before` has run).
 */
export class Fixture {
  private n = 0;
  private parts?: { server: Server; admin: IORedis; client?: Client; sessions: Session[] };

  constructor(private readonly keyPrefix: string) {}

  private get up(): NonNullable<Fixture["parts"]> {
    assert.ok(this.parts, "the fixture is read before its before() hook ran");
    return this.parts;
  }
  get server(): Server {
    return this.up.server;
  }
  get admin(): IORedis {
    return this.up.admin;
  }
  get client(): Client {
    const c = this.up.client;
    assert.ok(c, "this fixture has no client (no kind given)");
    return c;
  }
  get sessions(): Session[] {
    return this.up.sessions;
  }
  /** The first session. */
  get session(): Session {
    const s = this.up.sessions[0];
    assert.ok(s, "this fixture has no session");
    return s;
  }
  /** Whether start() got as far as the server and its admin connection. */
  get started(): boolean {
    return this.parts !== undefined;
  }
  /** A key no other test of the suite uses. */
  fresh(): string {
    return `${this.keyPrefix}:${++this.n}`;
  }

  /** @internal fixture()'s before hook. */
  async start(opts: FixtureOptions): Promise<void> {
    const server = await Server.start();
    const parts: NonNullable<Fixture["parts"]> = { server, admin: server.admin(), sessions: [] };
    this.parts = parts;
    if (opts.kind === undefined) return;
    parts.client = await connectClient(opts.kind, server.port);
    for (let i = 0; i < (opts.sessions ?? 1); i++) parts.sessions.push(await Session.open(parts.client.client, opts.sessionOptions));
  }

  /** @internal fixture()'s after hook: whatever start() got to, in reverse. */
  async stop(): Promise<void> {
    const parts = this.parts;
    if (!parts) return;
    for (const s of parts.sessions) await s.close();
    await parts.client?.close();
    parts.admin.disconnect();
    await parts.server.stop();
  }
}

/** Registers the before/after hooks of a Fixture in the current describe() and returns it. */
export function fixture(opts: FixtureOptions = {}): Fixture {
  const t = new Fixture(opts.keyPrefix ?? "k");
  before(async () => {
    await t.start(opts);
    await opts.setUp?.(t);
  });
  after(async () => {
    try {
      if (opts.tearDown && t.started) await opts.tearDown(t);
    } finally {
      await t.stop();
    }
  });
  return t;
}

/** The rejection of `p` (fails the test when it resolves). */
export async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  assert.fail("expected a rejection");
}

/** LOCK.WAITERS key COUNT 0 -> the owners queued, in order. */
export async function waiters(admin: IORedis, key: string): Promise<string[]> {
  const reply = (await admin.call("LOCK.WAITERS", key, "COUNT", "0")) as unknown[][];
  return reply.map((w) => {
    const i = w.indexOf("owner");
    return String(w[i + 1]);
  });
}

/** LOCK.INFO as an object (flat RESP2 pairs), or null. */
export async function info(admin: IORedis, key: string): Promise<Record<string, unknown> | null> {
  const reply = (await admin.call("LOCK.INFO", key)) as unknown[] | null;
  if (reply == null) return null;
  const o: Record<string, unknown> = {};
  for (let i = 0; i < reply.length; i += 2) o[String(reply[i])] = reply[i + 1];
  return o;
}

/** Three masters, slots split by CLUSTER ADDSLOTSRANGE, met by CLUSTER MEET, waited until ok. */
export class LocalCluster {
  constructor(readonly servers: Server[]) {}

  static async start(): Promise<LocalCluster> {
    const servers: Server[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        servers.push(await Server.start({ extra: ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"] }));
      }
      const per = Math.floor(16384 / 3);
      for (let i = 0; i < 3; i++) {
        const a = servers[i].admin();
        const from = i * per;
        const to = i === 2 ? 16383 : (i + 1) * per - 1;
        await a.call("CLUSTER", "ADDSLOTSRANGE", String(from), String(to));
        if (i > 0) await a.call("CLUSTER", "MEET", "127.0.0.1", String(servers[0].port));
        a.disconnect();
      }
      for (const s of servers) {
        const a = s.admin();
        await waitFor("cluster state ok", async () => {
          const text = String(await a.call("CLUSTER", "INFO"));
          const slots = (await a.call("CLUSTER", "SLOTS")) as unknown[];
          return text.includes("cluster_state:ok") && slots.length === 3;
        }, 20000);
        a.disconnect();
      }
      return new LocalCluster(servers);
    } catch (e) {
      await Promise.all(servers.map((s) => s.stop()));
      throw e;
    }
  }

  ioredis(): Cluster {
    const c = new Cluster(this.servers.map((s) => ({ host: "127.0.0.1", port: s.port })));
    c.on("error", () => {});
    return c;
  }

  async nodeRedis() {
    const c = createCluster({ rootNodes: this.servers.map((s) => ({ socket: { host: "127.0.0.1", port: s.port } })) });
    c.on("error", () => {});
    await c.connect();
    return c;
  }

  /** node-redis 4's createCluster. */
  async nodeRedis4() {
    const c = createCluster4({ rootNodes: this.servers.map((s) => ({ socket: { host: "127.0.0.1", port: s.port } })) });
    c.on("error", () => {});
    await c.connect();
    return c;
  }

  async stop(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.stop()));
  }
}

/** The ids of the connections blocked in `cmd` (`CLIENT LIST`: `cmd=<cmd>`, `flags` with `b`). */
export async function blockedClients(admin: IORedis, cmd = "lock.acquire"): Promise<string[]> {
  const list = String(await admin.call("CLIENT", "LIST"));
  const ids: string[] = [];
  for (const line of list.split("\n")) {
    const f = Object.fromEntries(line.split(" ").map((kv) => kv.split("=", 2) as [string, string]));
    if (f.cmd === cmd && (f.flags ?? "").includes("b")) ids.push(f.id);
  }
  return ids;
}

/**
 * Breaks a wait: CLIENT KILL of the one connection blocked in `cmd`, once it blocks. Returns the
 * killed connection's id.
 */
export async function killBlocked(admin: IORedis, cmd = "lock.acquire"): Promise<string> {
  let id = "";
  await waitFor(`a connection blocked in ${cmd}`, async () => {
    const ids = await blockedClients(admin, cmd);
    id = ids.length === 1 ? ids[0] : "";
    return id !== "";
  });
  await admin.call("CLIENT", "KILL", "ID", id);
  return id;
}

/** Until the wait broken by killBlocked blocks in `cmd` again, on another connection. */
export async function blockedAgain(admin: IORedis, killed: string, cmd = "lock.acquire"): Promise<void> {
  await waitFor(`blocked in ${cmd} again on another connection`, async () => {
    const ids = await blockedClients(admin, cmd);
    return ids.length === 1 && ids[0] !== killed;
  });
}

/** How many connections the server has (`CLIENT LIST`). */
export async function clientCount(admin: IORedis): Promise<number> {
  return String(await admin.call("CLIENT", "LIST")).trim().split("\n").length;
}
