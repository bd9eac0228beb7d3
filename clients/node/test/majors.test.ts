// The core of the suite on the newest majors the peer ranges accept (ioredis 6, node-redis 6,
// installed under the aliases "ioredis6" and "redis6"): the rest of the suite runs on ioredis 5
// and node-redis 5 and 4.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import type IORedis from "ioredis";

import { AuthenticationError, BusyError, ExecutionError, LostError, ModuleRedlock, Session } from "../src";
import { Client, NEW_MAJOR_KINDS, Server, blockedClients, connectClient, info, waitFor, waiters } from "./helpers";

for (const kind of NEW_MAJOR_KINDS) {
  describe(`core, ${kind}`, () => {
    let server: Server;
    let admin: IORedis;
    let c: Client;
    let session: Session;
    let n = 0;
    const fresh = () => `k:${kind}:${++n}`;

    before(async () => {
      server = await Server.start();
      admin = server.admin();
      c = await connectClient(kind, server.port);
      session = await Session.open(c.client, { leaseMs: 5000 });
    });
    after(async () => {
      await session?.close();
      await c?.close();
      admin?.disconnect();
      await server?.stop();
    });

    it("using: a fenced hold bound to the session, released after", async () => {
      const key = fresh();
      const out = await session.using(key, async (_signal, hold) => {
        assert.equal(typeof (await info(admin, key))?.keepalive_client, "number");
        return hold.tokenString;
      });
      assert.match(out, /^\d+$/);
      assert.equal(await info(admin, key), null);
    });

    it("FIFO wait, timeout, cancel, loss", async () => {
      const key = fresh();
      const holder = await session.lock(key).acquire();
      await assert.rejects(session.lock(key).acquire({ timeoutMs: 100 }), BusyError);
      const ac = new AbortController();
      const cancelled = session.lock(key).acquire({ signal: ac.signal });
      await waitFor("queued", async () => (await waiters(admin, key)).length === 1);
      ac.abort();
      await assert.rejects(cancelled);
      assert.deepEqual(await waiters(admin, key), []);
      const waiting = session.lock(key).acquire({ timeoutMs: 10000 });
      await waitFor("queued", async () => (await waiters(admin, key)).length === 1);
      await holder.release();
      const h = await waiting;
      await admin.call("LOCK.FORCERELEASE", key);
      await waitFor("lost", () => h.lost);
      assert.ok(h.signal.reason instanceof LostError);
    });

    it("a wait survives CLIENT KILL of its connection", async () => {
      const key = fresh();
      const holder = await session.lock(key).acquire();
      const waiting = session.lock(key).acquire({ timeoutMs: 20000 });
      await waitFor("blocked", async () => (await blockedClients(admin)).length === 1);
      const first = (await blockedClients(admin))[0];
      await admin.call("CLIENT", "KILL", "ID", first);
      await waitFor("blocked again", async () => {
        const ids = await blockedClients(admin);
        return ids.length === 1 && ids[0] !== first;
      });
      await holder.release();
      const h = await waiting;
      assert.equal((await info(admin, key))?.owner, h.owner);
      assert.deepEqual(await waiters(admin, key), []);
      await h.release();
    });

    it("redlock drop-in: [client], busy is ExecutionError", async () => {
      const redlock = new ModuleRedlock([c.client], { retryCount: 2, retryDelay: 20, retryJitter: 0 });
      const lock = await redlock.acquire(["r"], 5000);
      const e = await redlock.acquire(["r"], 5000).catch((x: unknown) => x);
      assert.ok(e instanceof ExecutionError);
      assert.equal(e.attempts.length, 3);
      await lock.release();
      await redlock.quit();
    });

    it("a changed password: AuthenticationError", async () => {
      const other = await connectClient(kind, server.port);
      try {
        await admin.call("CONFIG", "SET", "requirepass", "changed");
        const e = await Session.open(other.client).catch((x: unknown) => x);
        assert.ok(e instanceof AuthenticationError, `got ${String(e)}`);
      } finally {
        await admin.call("AUTH", "changed");
        await admin.call("CONFIG", "SET", "requirepass", "");
        await other.close();
      }
    });
  });
}
