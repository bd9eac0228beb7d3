// A real 3-master cluster, through ioredis Cluster and node-redis createCluster (v5 and v4).

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import IORedis from "ioredis";

import { BusyError, LockError, Session } from "../src";
import { keySlot } from "../src/slot";
import { LocalCluster, info, waitFor } from "./helpers";

describe("cluster of 3 masters", () => {
  let cluster: LocalCluster;
  let admins: IORedis[] = [];

  before(async () => {
    cluster = await LocalCluster.start();
    admins = cluster.servers.map((s) => s.admin());
  });
  after(async () => {
    for (const a of admins) a.disconnect();
    await cluster?.stop();
  });

  /** The admin connection of the node serving `key`. */
  async function owning(key: string): Promise<IORedis> {
    const slot = keySlot(key);
    for (const a of admins) {
      const ranges = (await a.call("CLUSTER", "SLOTS")) as [number, number, [string, number]][];
      for (const [from, to, [, port]] of ranges) {
        if (slot >= from && slot <= to) return admins[cluster.servers.findIndex((s) => s.port === Number(port))];
      }
    }
    throw new Error("no node");
  }

  /** Keys that land on each of the three nodes. */
  async function keysOnEveryNode(prefix: string): Promise<string[]> {
    const byNode = new Map<IORedis, string>();
    for (let i = 0; byNode.size < 3; i++) {
      const k = `${prefix}:${i}`;
      const a = await owning(k);
      if (!byNode.has(a)) byNode.set(a, k);
    }
    return [...byNode.values()];
  }

  for (const kind of ["ioredis", "node-redis", "node-redis4"] as const) {
    it(`locks on every node, one session connection per node, multi-locks need a hash tag (${kind})`, async () => {
      const client =
        kind === "ioredis" ? cluster.ioredis() : kind === "node-redis" ? await cluster.nodeRedis() : await cluster.nodeRedis4();
      const session = await Session.open(client, { leaseMs: 2000 });
      try {
        const keys = await keysOnEveryNode(`c:${kind}`);
        const holds = await Promise.all(keys.map((k) => session.lock(k).acquire({ timeoutMs: 2000 })));
        for (const [i, k] of keys.entries()) {
          const a = await owning(k);
          const inf = await info(a, k);
          assert.equal(inf?.owner, holds[i].owner);
          assert.equal(typeof inf?.keepalive_client, "number", "bound to the session connection on that node");
          const clients = String(await a.call("CLIENT", "LIST"));
          assert.ok(clients.includes("cmd=ping") || clients.includes("sub=1"), "a session connection on the node");
        }
        // a waiter on one node, served when the holder releases
        const waiting = session.lock(keys[1]).acquire({ timeoutMs: 5000 });
        await waitFor("queued", async () => ((await (await owning(keys[1])).call("LOCK.WAITERS", keys[1])) as unknown[]).length === 1);
        await holds[1].release();
        const h = await waiting;
        await h.release();
        await Promise.all([holds[0].release(), holds[2].release()]);

        // exclusion across many concurrent callers on one key of another node
        let inside = 0;
        let max = 0;
        await Promise.all(
          Array.from({ length: 100 }, () =>
            session.using(keys[2], async () => {
              max = Math.max(max, ++inside);
              await new Promise((r) => setImmediate(r));
              inside--;
            }),
          ),
        );
        assert.equal(max, 1);

        // multi-lock: one hash tag works, keys of different slots are refused clearly
        const tagged = [`{order:${kind}}:a`, `{order:${kind}}:b`];
        const out = await session.using(tagged, async (_s, hold) => hold.tokens.length);
        assert.equal(out, 2);
        await assert.rejects(session.multiLock(keys).acquire(), (e: unknown) => e instanceof LockError && /hash tag/.test((e as Error).message));
        const busy = await session.lock(keys[0]).acquire();
        await assert.rejects(session.lock(keys[0]).acquire({ timeoutMs: 0 }), BusyError);
        await busy.release();
      } finally {
        await session.close();
        if (kind === "ioredis") (client as { disconnect(): void }).disconnect();
        else if (kind === "node-redis") await (client as { close(): Promise<void> }).close();
        else await (client as { quit(): Promise<unknown> }).quit();
      }
    });
  }

  it("a forced release on a node reaches the hold (ioredis Cluster)", async () => {
    const client = cluster.ioredis();
    const session = await Session.open(client, { leaseMs: 2000 });
    try {
      const [k] = await keysOnEveryNode("f");
      const hold = await session.lock(k).acquire();
      await (await owning(k)).call("LOCK.FORCERELEASE", k);
      await waitFor("lost", () => hold.signal.aborted, 3000);
    } finally {
      await session.close();
      client.disconnect();
    }
  });
});
