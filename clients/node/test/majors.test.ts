// The core of the suite on the newest majors the peer ranges accept (ioredis 6, node-redis 6,
// installed under the aliases "ioredis6" and "redis6"): the rest of the suite runs on ioredis 5
// and node-redis 5 and 4.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { AuthenticationError, BusyError, ExecutionError, LostError, ModuleRedlock, Session } from "../src";
import { NEW_MAJOR_KINDS, blockedAgain, connectClient, fixture, info, killBlocked, waitFor, waiters } from "./helpers";

for (const kind of NEW_MAJOR_KINDS) {
  describe(`core, ${kind}`, () => {
    const t = fixture({ kind, sessionOptions: { leaseMs: 5000 }, keyPrefix: `k:${kind}` });

    it("using: a fenced hold bound to the session, released after", async () => {
      const key = t.fresh();
      const out = await t.session.using(key, async (_signal, hold) => {
        assert.equal(typeof (await info(t.admin, key))?.keepalive_client, "number");
        return hold.tokenString;
      });
      assert.match(out, /^\d+$/);
      assert.equal(await info(t.admin, key), null);
    });

    it("FIFO wait, timeout, cancel, loss", async () => {
      const key = t.fresh();
      const holder = await t.session.lock(key).acquire();
      await assert.rejects(t.session.lock(key).acquire({ timeoutMs: 100 }), BusyError);
      const ac = new AbortController();
      const cancelled = t.session.lock(key).acquire({ signal: ac.signal });
      await waitFor("queued", async () => (await waiters(t.admin, key)).length === 1);
      ac.abort();
      await assert.rejects(cancelled);
      assert.deepEqual(await waiters(t.admin, key), []);
      const waiting = t.session.lock(key).acquire({ timeoutMs: 10000 });
      await waitFor("queued", async () => (await waiters(t.admin, key)).length === 1);
      await holder.release();
      const h = await waiting;
      await t.admin.call("LOCK.FORCERELEASE", key);
      await waitFor("lost", () => h.lost);
      assert.ok(h.signal.reason instanceof LostError);
    });

    it("a wait survives CLIENT KILL of its connection", async () => {
      const key = t.fresh();
      const holder = await t.session.lock(key).acquire();
      const waiting = t.session.lock(key).acquire({ timeoutMs: 20000 });
      await blockedAgain(t.admin, await killBlocked(t.admin));
      await holder.release();
      const h = await waiting;
      assert.equal((await info(t.admin, key))?.owner, h.owner);
      assert.deepEqual(await waiters(t.admin, key), []);
      await h.release();
    });

    it("redlock drop-in: [client], busy is ExecutionError", async () => {
      const redlock = new ModuleRedlock([t.client.client], { retryCount: 2, retryDelay: 20, retryJitter: 0 });
      const lock = await redlock.acquire(["r"], 5000);
      const e = await redlock.acquire(["r"], 5000).catch((x: unknown) => x);
      assert.ok(e instanceof ExecutionError);
      assert.equal(e.attempts.length, 3);
      await lock.release();
      await redlock.quit();
    });

    it("a changed password: AuthenticationError", async () => {
      const other = await connectClient(kind, t.server.port);
      try {
        await t.admin.call("CONFIG", "SET", "requirepass", "changed");
        const e = await Session.open(other.client).catch((x: unknown) => x);
        assert.ok(e instanceof AuthenticationError, `got ${String(e)}`);
      } finally {
        await t.admin.call("AUTH", "changed");
        await t.admin.call("CONFIG", "SET", "requirepass", "");
        await other.close();
      }
    });
  });
}
