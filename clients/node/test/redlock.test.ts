// The redlock-shaped API on one server, both clients. Every behaviour node-redlock v5's own
// src/single.test.ts checks (v5.0.0-beta.2, the one-server tests) is carried here, with the lock's
// value read from the module's hash (field = the value) instead of GET, plus what the drop-in adds.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import type IORedis from "ioredis";

import { ExecutionError, ExecutionStats, LostError, ModuleRedlock, RedlockLock, ResourceLockedError, UnavailableError } from "../src";
import { CLIENT_KINDS, connectClient, fixture, freePort, info, rejection, sleep, waitFor } from "./helpers";

/** The lock's value as the module stores it: the one field of the lock's hash (null: no lock). */
async function lockValue(admin: IORedis, key: string): Promise<string | null> {
  const fields = await admin.hkeys(key);
  return fields.length === 1 ? fields[0] : null;
}

/** Every attempt's votes against, each attempt fulfilled (as redlock's stats are). */
async function votesAgainst(e: ExecutionError): Promise<Error[]> {
  const out: Error[] = [];
  for (const r of await Promise.allSettled(e.attempts)) {
    assert.equal(r.status, "fulfilled");
    const s = (r as PromiseFulfilledResult<ExecutionStats>).value;
    assert.equal(s.membershipSize, 1);
    assert.equal(s.quorumSize, 1);
    assert.equal(s.votesFor.size, 0);
    out.push(...s.votesAgainst.values());
  }
  return out;
}

// redlock's own tests' "forever" (extended to 3 times it), under the module's largest PX (2^53 - 1 ms).
const LONG = Math.floor(Number.MAX_SAFE_INTEGER / 10);

for (const kind of CLIENT_KINDS) {
  describe(`ModuleRedlock, ${kind}`, () => {
    let redlock: ModuleRedlock;
    let minLease = 0;
    const t = fixture({
      kind,
      sessions: 0,
      setUp: async ({ admin, client }) => {
        redlock = new ModuleRedlock([client.client], { retryCount: 3, retryDelay: 50, retryJitter: 0 });
        minLease = Number(/lock_keepalive_min_lease_ms:(\d+)/.exec(String(await admin.info("lock")))![1]);
      },
      tearDown: async () => await redlock?.quit(),
    });

    it("takes redlock's [client]; the client alone too; [] and two clients are refused", async () => {
      const alone = new ModuleRedlock(t.client.client);
      const lock = await alone.acquire(["ctor"], 5000);
      assert.equal(await lockValue(t.admin, "ctor"), lock.value);
      await lock.release();
      await alone.quit();
      assert.throws(() => new ModuleRedlock([]), /at least one redis client/);
      const other = await connectClient(kind, t.server.port);
      try {
        assert.throws(() => new ModuleRedlock([t.client.client, other.client]), /one server.*got 2 clients/);
        // The same client twice is one client (redlock keeps a Set).
        assert.ok(new ModuleRedlock([t.client.client, t.client.client]));
      } finally {
        await other.close();
      }
    });

    it("refuses a non-integer duration (redlock's message)", async () => {
      await assert.rejects(redlock.acquire(["float"], Number.MAX_SAFE_INTEGER / 10), {
        message: "Duration must be an integer value in milliseconds.",
      });
    });

    it("acquires, extends and releases a single lock: value in the hash, the lease as asked", async () => {
      const t0 = Date.now();
      let lock = await redlock.acquire(["a"], LONG);
      assert.ok(lock instanceof RedlockLock);
      assert.deepEqual(lock.resources, ["a"]);
      assert.equal(await lockValue(t.admin, "a"), lock.value);
      assert.equal(await t.admin.hget("a", lock.value), "1", "Redisson's layout: field = value, count of holds");
      assert.equal(Math.floor(Number(await t.admin.pttl("a")) / 200), Math.floor(LONG / 200));
      assert.ok(lock.expiration > t0 + LONG - LONG * 0.01 - 3 && lock.expiration <= Date.now() + LONG);
      assert.equal((await info(t.admin, "a"))?.keepalive_client, undefined, "acquire keeps redlock's plain lease");
      assert.equal(lock.attempts.length, 1);

      const previous = lock;
      lock = await lock.extend(3 * LONG);
      assert.equal(previous.expiration, 0);
      assert.equal(lock.value, previous.value);
      assert.equal(await lockValue(t.admin, "a"), lock.value);
      assert.equal(Math.floor(Number(await t.admin.pttl("a")) / 200), Math.floor((3 * LONG) / 200));

      await lock.release();
      assert.equal(lock.expiration, 0);
      assert.equal(await t.admin.exists("a"), 0);
      await assert.rejects(redlock.extend(lock, 1000), ExecutionError, "a released lock cannot be extended");
    });

    it("acquires, extends and releases a multi-resource lock", async () => {
      let lock = await redlock.acquire(["m1", "m2"], LONG);
      for (const k of ["m1", "m2"]) {
        assert.equal(await lockValue(t.admin, k), lock.value);
        assert.equal(Math.floor(Number(await t.admin.pttl(k)) / 200), Math.floor(LONG / 200));
      }
      lock = await lock.extend(3 * LONG);
      for (const k of ["m1", "m2"]) {
        assert.equal(await lockValue(t.admin, k), lock.value);
        assert.equal(Math.floor(Number(await t.admin.pttl(k)) / 200), Math.floor((3 * LONG) / 200));
      }
      await lock.release();
      assert.equal(await t.admin.exists("m1", "m2"), 0);
    });

    it("an unreachable server: ExecutionError with retryCount + 1 attempts, an error event for each", async () => {
      const dead = await freePort();
      // A client that never reaches a server (the upstream test's ioredis options).
      const IORedisCtor = (await import("ioredis")).default;
      const unreachable = new IORedisCtor({
        host: "127.0.0.1",
        port: dead,
        maxRetriesPerRequest: 0,
        autoResendUnfulfilledCommands: false,
        autoResubscribe: false,
        retryStrategy: () => null,
        reconnectOnError: () => false,
      });
      unreachable.on("error", () => {});
      const rl = new ModuleRedlock([unreachable], { retryCount: 4, retryDelay: 20, retryJitter: 10 });
      const events: Error[] = [];
      rl.on("error", (e: Error) => events.push(e));
      try {
        const e = await rejection(rl.acquire(["b"], LONG));
        assert.ok(e instanceof ExecutionError, `got ${String(e)}`);
        assert.equal(e.attempts.length, 5, "retryCount + 1 attempts");
        const votes = await votesAgainst(e);
        assert.equal(votes.length, 5);
        for (const v of votes) assert.ok(!(v instanceof ResourceLockedError) && v instanceof Error);
        assert.equal(events.length, 5, "one error event per attempt");
        assert.ok(e.cause instanceof UnavailableError, "the library's error is the cause");
      } finally {
        unreachable.disconnect();
      }
    });

    it("locks automatically expire", async () => {
      const lock = await redlock.acquire(["d"], 200);
      assert.equal(await lockValue(t.admin, "d"), lock.value);
      await waitFor("the lease ends", async () => (await t.admin.exists("d")) === 0, 5000);
      const lock2 = await redlock.acquire(["d"], 200);
      assert.equal(await lockValue(t.admin, "d"), lock2.value);
      await lock2.release();
      assert.equal(await t.admin.exists("d"), 0);
    });

    it("individual locks are exclusive: ExecutionError, retryCount + 1 attempts of ResourceLockedError, error events", async () => {
      const lock = await redlock.acquire(["c"], LONG);
      const events: Error[] = [];
      const onError = (e: Error) => events.push(e);
      redlock.on("error", onError);
      try {
        const e = await rejection(redlock.acquire(["c"], LONG));
        assert.ok(e instanceof ExecutionError);
        assert.equal(e.attempts.length, 4);
        const votes = await votesAgainst(e);
        assert.equal(votes.length, 4);
        for (const v of votes) assert.ok(v instanceof ResourceLockedError);
        assert.equal(events.length, 4);
        for (const v of events) assert.ok(v instanceof ResourceLockedError);
      } finally {
        redlock.off("error", onError);
      }
      assert.equal(await lockValue(t.admin, "c"), lock.value, "the holder is untouched");
      await lock.release();
      assert.equal(await t.admin.exists("c"), 0);
    });

    it("overlapping multi-locks are exclusive, the free resource stays free", async () => {
      const lock = await redlock.acquire(["c1", "c2"], LONG);
      const e = await rejection(redlock.acquire(["c2", "c3"], LONG));
      assert.ok(e instanceof ExecutionError);
      assert.equal(e.attempts.length, 4);
      for (const v of await votesAgainst(e)) assert.ok(v instanceof ResourceLockedError);
      assert.equal(await lockValue(t.admin, "c1"), lock.value);
      assert.equal(await lockValue(t.admin, "c2"), lock.value);
      assert.equal(await t.admin.exists("c3"), 0);
      await lock.release();
      assert.equal(await t.admin.exists("c1", "c2", "c3"), 0);
    });

    it("release of a lock no longer held (force-released): ExecutionError of ResourceLockedError, as redlock", async () => {
      const lock = await redlock.acquire(["fr"], LONG);
      await t.admin.call("LOCK.FORCERELEASE", "fr");
      const e = await rejection(lock.release());
      assert.ok(e instanceof ExecutionError, `got ${String(e)}`);
      assert.equal(e.attempts.length, 4);
      for (const v of await votesAgainst(e)) assert.ok(v instanceof ResourceLockedError);
      assert.equal(lock.expiration, 0);
    });

    // A plain lease under the floor is kept by the drop-in's own extensions, each `threshold` ms
    // before the lease ends: an event loop held up longer than that loses it (as redlock's own
    // would). With a 500 ms lease and 200 ms, a loaded CI machine (every suite at once on two
    // cores) lost it; the largest lease under the floor and the largest threshold redlock allows
    // (duration - 100) leave it 600 ms.
    const underFloor = () => {
      const duration = minLease - 4;
      return { duration, slack: { automaticExtensionThreshold: duration - 100 } };
    };

    it("using under the server's floor: a plain lease of the duration, extended before it ends, released after", async () => {
      const { duration, slack } = underFloor();
      assert.ok(duration < minLease, "the test's duration is under the floor");
      const out = await redlock.using(["x"], duration, slack, async (signal) => {
        const value = await lockValue(t.admin, "x");
        assert.equal(typeof value, "string");
        assert.equal((await info(t.admin, "x"))?.keepalive_client, undefined, "a plain lease, not bound");
        const pttl = Number(await t.admin.pttl("x"));
        assert.ok(pttl > 0 && pttl <= duration, `the lease is the duration asked (${pttl})`);
        // Outlive the first lease: only the drop-in's extension keeps the lock.
        await sleep(duration + 200);
        assert.equal(signal.aborted, false);
        assert.equal(signal.error, undefined);
        assert.equal(await lockValue(t.admin, "x"), value, "still the same lock");
        return value;
      });
      assert.equal(typeof out, "string");
      assert.equal(await t.admin.exists("x"), 0, "released");
    });

    it("using is exclusive: two routines on one resource never overlap", async () => {
      let inside = 0;
      let overlapped = false;
      const routine = async () => {
        inside++;
        if (inside > 1) overlapped = true;
        const value = await lockValue(t.admin, "y");
        await sleep(100);
        assert.equal(await lockValue(t.admin, "y"), value);
        inside--;
        return value;
      };
      const { duration, slack } = underFloor();
      const slow = { ...slack, retryCount: 40, retryDelay: 50 };
      const [v1, v2] = await Promise.all([redlock.using(["y"], duration, slow, routine), redlock.using(["y"], duration, slow, routine)]);
      assert.equal(overlapped, false);
      assert.notEqual(v1, v2, "two locks, two values");
      assert.equal(await t.admin.exists("y"), 0);
    });

    it("using at or over the floor: bound to the session; signal aborts on loss; the release then rejects, as redlock", async () => {
      const out = await redlock.using(["u"], minLease, async (signal) => {
        assert.equal(signal.aborted, false);
        assert.equal(typeof (await info(t.admin, "u"))?.keepalive_client, "number", "the server keeps it alive");
        return "ran";
      });
      assert.equal(out, "ran");
      assert.equal(await t.admin.exists("u"), 0);

      const e = await rejection(
        redlock.using(["u"], 2000, { retryCount: 0 }, async (signal) => {
          await t.admin.call("LOCK.FORCERELEASE", "u");
          await waitFor("signal aborted", () => signal.aborted, 5000);
          assert.ok(signal.error instanceof LostError);
          return "done";
        }),
      );
      assert.ok(e instanceof ExecutionError, "the release of the lost lock fails, as redlock's would");
    });

    it("using refuses a duration not 100 ms over automaticExtensionThreshold (redlock's rule)", async () => {
      await assert.rejects(redlock.using(["t"], 550, async () => 1), /at least 100ms greater/);
    });

    it("tokens: bigint, and tokenString for JSON", async () => {
      const lock = await redlock.acquire(["tok"], 5000);
      assert.equal(typeof lock.token, "bigint");
      assert.equal(lock.tokenString, lock.token.toString());
      assert.equal(JSON.parse(JSON.stringify({ t: lock.tokenString })).t, String(lock.token));
      await lock.release();
    });
  });
}
