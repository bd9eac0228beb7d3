// Sentinel failover: master + replica + 3 sentinels, ioredis with sentinels; the master is
// killed with SIGKILL and the session re-attaches its hold on the new master within the lease.

import assert from "node:assert/strict";
import { spawn, ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";

import IORedis from "ioredis";

import { Session } from "../src";
import { SERVER, Server, freePort, info, waitFor } from "./helpers";

const NAME = "m";

class Sentinel {
  proc?: ChildProcess;
  constructor(readonly port: number, readonly dir: string) {}
  static async start(masterPort: number): Promise<Sentinel> {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), "lockjs-sentinel-"));
    const conf = join(dir, "sentinel.conf");
    writeFileSync(
      conf,
      `port ${port}\nbind 127.0.0.1\ndir ${dir}\nlogfile sentinel.log\nsentinel announce-ip 127.0.0.1\n` +
        `sentinel monitor ${NAME} 127.0.0.1 ${masterPort} 2\n` +
        `sentinel down-after-milliseconds ${NAME} 2000\nsentinel failover-timeout ${NAME} 2000\n` +
        `sentinel parallel-syncs ${NAME} 1\n`,
    );
    const s = new Sentinel(port, dir);
    s.proc = spawn(SERVER, [conf, "--sentinel"], { stdio: "ignore", cwd: dir });
    const c = new IORedis({ port, host: "127.0.0.1", lazyConnect: true, retryStrategy: () => null });
    c.on("error", () => {});
    await waitFor(`sentinel on ${port}`, async () => {
      try {
        if (c.status !== "ready") await c.connect();
        return (await c.ping()) === "PONG";
      } catch {
        return false;
      }
    });
    c.disconnect();
    return s;
  }
  async masterPort(): Promise<number> {
    const c = new IORedis({ port: this.port, host: "127.0.0.1", maxRetriesPerRequest: 1 });
    c.on("error", () => {});
    try {
      const r = (await c.call("SENTINEL", "get-master-addr-by-name", NAME)) as string[];
      return Number(r[1]);
    } finally {
      c.disconnect();
    }
  }
  stop(): void {
    this.proc?.kill("SIGKILL");
    rmSync(this.dir, { recursive: true, force: true });
  }
}

describe("sentinel failover", () => {
  const servers: Server[] = [];
  const sentinels: Sentinel[] = [];
  after(async () => {
    for (const s of sentinels) s.stop();
    await Promise.all(servers.map((s) => s.stop()));
  });

  it("the hold is re-attached on the new master within the lease (ioredis with sentinels)", async () => {
    const master = await Server.start();
    servers.push(master);
    const replica = await Server.start({ extra: ["--replicaof", "127.0.0.1", String(master.port)] });
    servers.push(replica);
    const radmin = replica.admin();
    const madmin = master.admin();
    try {
      await waitFor("replica in sync", async () => String(await radmin.info("replication")).includes("master_link_status:up"));
      for (let i = 0; i < 3; i++) sentinels.push(await Sentinel.start(master.port));
      await waitFor("sentinels see the replica and each other", async () => {
        const c = new IORedis({ port: sentinels[0].port, host: "127.0.0.1" });
        c.on("error", () => {});
        try {
          const m = (await c.call("SENTINEL", "master", NAME)) as string[];
          const f = (k: string) => Number(m[m.indexOf(k) + 1]);
          return f("num-slaves") === 1 && f("num-other-sentinels") === 2;
        } finally {
          c.disconnect();
        }
      }, 20000);

      const client = new IORedis({ sentinels: sentinels.map((s) => ({ host: "127.0.0.1", port: s.port })), name: NAME });
      client.on("error", () => {});
      const lease = 10000;
      const session = await Session.open(client, { leaseMs: lease });
      try {
        const hold = await session.lock("fo").acquire();
        const before = await info(madmin, "fo");
        assert.equal(typeof before?.keepalive_client, "number");
        assert.equal(await madmin.call("WAIT", "1", "2000"), 1);

        const t0 = Date.now();
        master.kill("SIGKILL");
        await waitFor("sentinels promote the replica", async () => (await sentinels[0].masterPort()) === replica.port, 20000);
        await waitFor("re-attached on the new master", async () => {
          const i = await info(radmin, "fo").catch(() => null);
          return i?.owner === hold.owner && typeof i?.keepalive_client === "number";
        }, lease);
        const took = Date.now() - t0;
        console.log(`# sentinel: master killed -> hold re-attached on the new master after ${took} ms (lease ${lease})`);
        assert.ok(took < lease, `re-attached ${took} ms after the kill`);
        assert.equal(hold.signal.aborted, false);
        // the session works on the new master
        const other = await session.lock("fo2").acquire({ timeoutMs: 5000 });
        assert.equal((await info(radmin, "fo2"))?.owner, other.owner);
        await other.release();
        await hold.release();
        assert.equal(await info(radmin, "fo"), null);
      } finally {
        await session.close();
        client.disconnect();
      }
    } finally {
      radmin.disconnect();
      madmin.disconnect();
    }
  });
});
