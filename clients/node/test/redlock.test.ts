// The redlock-shaped API (node-redlock v5's acquire/release/extend/using), one server, both clients.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import type IORedis from "ioredis";

import { ExecutionError, ModuleRedlock, RedlockLock } from "../src";
import { CLIENT_KINDS, Client, Server, connectClient, info, waitFor } from "./helpers";

for (const kind of CLIENT_KINDS) {
  describe(`ModuleRedlock, ${kind}`, () => {
    let server: Server;
    let admin: IORedis;
    let c: Client;
    let redlock: ModuleRedlock;

    before(async () => {
      server = await Server.start();
      admin = server.admin();
      c = await connectClient(kind, server.port);
      redlock = new ModuleRedlock(c.client, { retryCount: 3, retryDelay: 50, retryJitter: 0 });
    });
    after(async () => {
      await redlock?.quit();
      await c?.close();
      admin?.disconnect();
      await server?.stop();
    });

    it("acquire -> Lock with value and expiration; release frees it", async () => {
      const t0 = Date.now();
      const lock = await redlock.acquire(["a"], 5000);
      assert.ok(lock instanceof RedlockLock);
      assert.deepEqual(lock.resources, ["a"]);
      assert.equal((await info(admin, "a"))?.owner, lock.value);
      assert.ok(lock.expiration > t0 + 4900 && lock.expiration <= Date.now() + 5000);
      const pttl = Number(await admin.pttl("a"));
      assert.ok(pttl > 4000 && pttl <= 5000);
      assert.equal((await info(admin, "a"))?.keepalive_client, undefined, "acquire keeps redlock's plain lease");
      await lock.release();
      assert.equal(lock.expiration, 0);
      assert.equal(await info(admin, "a"), null);
    });

    it("a busy resource: ExecutionError after the retry window", async () => {
      const lock = await redlock.acquire(["b"], 5000);
      const t0 = Date.now();
      await assert.rejects(redlock.acquire(["b"], 5000), ExecutionError);
      assert.ok(Date.now() - t0 >= 140, "waited about retryCount x retryDelay");
      await lock.release();
    });

    it("extend(duration) returns a new Lock and sets the lease", async () => {
      const lock = await redlock.acquire(["c"], 1000);
      const next = await lock.extend(8000);
      assert.equal(lock.expiration, 0);
      assert.equal(next.value, lock.value);
      assert.ok(Number(await admin.pttl("c")) > 7000);
      await next.release();
      await assert.rejects(redlock.extend(next, 1000), ExecutionError);
    });

    it("several resources are taken together", async () => {
      const lock = await redlock.acquire(["m1", "m2"], 5000);
      assert.equal((await info(admin, "m1"))?.owner, lock.value);
      assert.equal((await info(admin, "m2"))?.owner, lock.value);
      await lock.release();
      assert.equal(await info(admin, "m1"), null);
    });

    it("using: routine(signal), kept alive by the server, signal aborts on loss", async () => {
      const out = await redlock.using(["u"], 1000, async (signal) => {
        assert.equal(signal.aborted, false);
        assert.equal(typeof (await info(admin, "u"))?.keepalive_client, "number");
        return "ran";
      });
      assert.equal(out, "ran");
      assert.equal(await info(admin, "u"), null);

      const seen = await redlock.using(["u"], 2000, { retryCount: 0 }, async (signal) => {
        await admin.call("LOCK.FORCERELEASE", "u");
        await waitFor("signal aborted", () => signal.aborted, 3000);
        return signal.error;
      });
      assert.ok(seen instanceof Error);
    });
  });
}
