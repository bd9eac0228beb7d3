// Semaphores and latches on one server, through ioredis and node-redis 5 and 4 (the cases that
// wait out a lease or start a process through ioredis only: the session's reconnect is the locks'
// and is run on every client by lock.test.ts). What the server holds is read with SEM.INFO /
// LATCH.INFO on a separate connection.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, it } from "node:test";

import type IORedis from "ioredis";

import { BusyError, LatchGoneError, LostError, Permit, Session } from "../src";
import { CLIENT_KINDS, KEPT_LEASE_MS, fixture, sleep, waitFor } from "./helpers";

interface RawHolder {
  owner: string;
  permits: number;
  ttl: number;
  keepalive_client?: number;
}
interface RawSem {
  permits: number;
  available: number;
  holders: RawHolder[];
  waiters: number;
}

function pairs(a: unknown[]): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  for (let i = 0; i < a.length; i += 2) o[String(a[i])] = a[i + 1];
  return o;
}

/** SEM.INFO through a plain connection (RESP2), or null. */
async function semInfo(admin: IORedis, key: string): Promise<RawSem | null> {
  const reply = (await admin.call("SEM.INFO", key)) as unknown[] | null;
  if (reply == null) return null;
  const o = pairs(reply);
  return {
    permits: Number(o.permits),
    available: Number(o.available),
    holders: (o.holders as unknown[][]).map((h) => pairs(h) as unknown as RawHolder),
    waiters: Number(o.waiters),
  };
}

/** LATCH.INFO's waiters (0 for a missing latch). */
async function latchWaiters(admin: IORedis, key: string): Promise<number> {
  const reply = (await admin.call("LATCH.INFO", key)) as unknown[] | null;
  return reply == null ? 0 : Number(pairs(reply).waiters);
}

/** Nothing held, nobody queued, every permit available. */
async function assertEmpty(admin: IORedis, key: string, permits: number): Promise<void> {
  const i = await semInfo(admin, key);
  assert.deepEqual(i, { permits, available: permits, holders: [], waiters: 0 });
  assert.equal(await admin.exists(`{${key}}:timeout`), 0, "the sorted set goes with its last member");
}

function settled<T>(p: Promise<T>): { done: boolean; p: Promise<T> } {
  const s = { done: false, p };
  p.then(
    () => (s.done = true),
    () => (s.done = true),
  );
  return s;
}

for (const kind of CLIENT_KINDS) {
  describe(`semaphore and latch, ${kind}`, () => {
    const t = fixture({ kind, sessionOptions: { leaseMs: 5000 }, keyPrefix: "sem" });

    it("never more than N permits out at once, with mixed permit counts; nothing left after", async () => {
      const key = t.fresh();
      const sem = t.session.semaphore(key, 3);
      let inside = 0;
      let max = 0;
      let runs = 0;
      await Promise.all(
        Array.from({ length: 60 }, (_, i) =>
          sem.using(i % 3 === 0 ? 2 : 1, async (signal, permit) => {
            inside += permit.permits;
            max = Math.max(max, inside);
            assert.equal(signal.aborted, false);
            await new Promise((r) => setImmediate(r));
            runs++;
            inside -= permit.permits;
          }),
        ),
      );
      assert.equal(runs, 60);
      assert.ok(max <= 3, `${max} permits out at once`);
      await assertEmpty(t.admin, key, 3);
      assert.equal(await sem.available(), 3);
      assert.equal(await sem.init(10), false, "SEM.INIT sets the permits once");
    });

    it("FIFO with mixed permit counts: a caller asking for 3 is not overtaken by a later one asking for 1", async () => {
      const key = t.fresh();
      const sem = t.session.semaphore(key, 3);
      const all = await sem.acquire(3);
      assert.equal(all.permits, 3);
      assert.ok(all.owner.startsWith(t.session.token + ":"));
      const want = [2, 1, 3, 1]; // A, B, C, D in this order
      const waits: { done: boolean; p: Promise<Permit> }[] = [];
      for (const k of want) {
        waits.push(settled(sem.acquire(k, { timeoutMs: 10000 })));
        await waitFor(`${waits.length} queued`, async () => (await semInfo(t.admin, key))?.waiters === waits.length);
      }
      const [A, B, C, D] = waits;
      const seen = await sem.info(); // the library's reading of SEM.INFO
      assert.equal(seen?.permits, 3);
      assert.equal(seen?.available, 0);
      assert.equal(seen?.waiters, 4);
      assert.deepEqual(
        seen?.holders.map((h) => [h.owner, h.permits, typeof h.keepaliveClient, h.ttlMs > 0]),
        [[all.owner, 3, "number", true]],
      );
      const owners = async () => (await semInfo(t.admin, key))!.holders.map((h) => `${h.owner}=${h.permits}`).sort();

      await all.release();
      const a = await A.p;
      const b = await B.p;
      assert.deepEqual(await owners(), [`${a.owner}=2`, `${b.owner}=1`].sort());
      await a.release(); // 2 available: C (3) is first and waits; D (1) must not go before it
      let i = await semInfo(t.admin, key);
      assert.equal(i?.available, 2);
      assert.equal(i?.waiters, 2);
      assert.deepEqual(await owners(), [`${b.owner}=1`]);
      assert.equal(D.done, false);
      await b.release();
      const cp = await C.p;
      assert.equal(cp.permits, 3);
      i = await semInfo(t.admin, key);
      assert.equal(i?.waiters, 1);
      assert.equal(D.done, false);
      await cp.release();
      const d = await D.p;
      assert.deepEqual(await owners(), [`${d.owner}=1`]);
      // Every acquisition is its own owner.
      assert.equal(new Set([all.owner, a.owner, b.owner, cp.owner, d.owner]).size, 5);
      await d.release();
      assert.equal(d.released, true);
      await assertEmpty(t.admin, key, 3);
    });

    it("a timed-out, a refused and an aborted wait leave nothing queued or held, also when the cancel crosses a grant", async () => {
      const key = t.fresh();
      const sem = t.session.semaphore(key, 2);
      const holder = await sem.acquire(2);
      await assert.rejects(sem.acquire(1, { timeoutMs: 100 }), BusyError);
      assert.equal(await sem.tryAcquire(), undefined);
      const ac = new AbortController();
      const p = sem.acquire(2, { signal: ac.signal });
      await waitFor("queued", async () => (await semInfo(t.admin, key))?.waiters === 1);
      const cause = new Error("stop");
      ac.abort(cause);
      await assert.rejects(p, (e) => e === cause);
      let i = await semInfo(t.admin, key);
      assert.equal(i?.waiters, 0);
      assert.deepEqual(
        i?.holders.map((h) => h.owner),
        [holder.owner],
      );
      await holder.release();
      await assertEmpty(t.admin, key, 2);

      // Release and abort in the same tick: whoever wins, nothing is left.
      for (let k = 0; k < 15; k++) {
        const h = await sem.acquire(2);
        const ac2 = new AbortController();
        const w = sem.acquire(1, { signal: ac2.signal }).then(
          (pm) => pm.release().then(() => "granted"),
          () => "cancelled",
        );
        await waitFor("queued", async () => (await semInfo(t.admin, key))?.waiters === 1);
        const r = h.release();
        ac2.abort();
        await r;
        await w;
        await waitFor("nothing held", async () => {
          i = await semInfo(t.admin, key);
          return i?.holders.length === 0 && i.waiters === 0;
        }, 3000);
      }
      await assertEmpty(t.admin, key, 2);
    });

    if (kind === "ioredis") {
      it("the session connection killed: permits re-attached (SEM.RENEW ... SESSION), kept past their lease", async () => {
        const s2 = await Session.open(t.client.client, { leaseMs: KEPT_LEASE_MS });
        try {
          const key = t.fresh();
          const permit = await s2.semaphore(key, 3).acquire(2);
          const before = (await semInfo(t.admin, key))!.holders[0].keepalive_client!;
          assert.equal(typeof before, "number", "bound to the session connection");
          const reconnected = new Promise((r) => s2.once("reconnected", r));
          await t.admin.call("CLIENT", "KILL", "ID", String(before));
          await reconnected;
          await waitFor("re-attached to the new session connection", async () => {
            const id = (await semInfo(t.admin, key))?.holders[0]?.keepalive_client;
            return typeof id === "number" && id !== before;
          }, 5000);
          await sleep(KEPT_LEASE_MS + 500); // past a lease since the re-attach
          const i = await semInfo(t.admin, key);
          assert.deepEqual(
            i?.holders.map((h) => [h.owner, h.permits]),
            [[permit.owner, 2]],
          );
          assert.equal(permit.signal.aborted, false);
          await permit.release(1);
          assert.equal(permit.permits, 1);
          await permit.release();
          await assertEmpty(t.admin, key, 3);
        } finally {
          await s2.close();
        }
      });

      it("a stopped holder's session connection killed (CLIENT KILL): its permits come back within the lease", async () => {
        const key = t.fresh();
        const lease = 1000;
        const sem = t.session.semaphore(key, 2);
        await sem.available(); // SEM.INIT done before the child takes both permits
        const child = spawn(process.execPath, [join(__dirname, "sem-holder.js"), "ioredis", String(t.server.port), key, String(lease), "2"], {
          stdio: ["ignore", "pipe", "inherit"],
        });
        try {
          const owner = await new Promise<string>((res, rej) => {
            child.stdout!.on("data", (d: Buffer) => {
              const m = /held (\S+)/.exec(d.toString());
              if (m) res(m[1]);
            });
            child.on("exit", (code) => rej(new Error(`holder exited ${code}`)));
          });
          const held = (await semInfo(t.admin, key))!.holders;
          assert.deepEqual(
            held.map((h) => [h.owner, h.permits]),
            [[owner, 2]],
          );
          const waiting = sem.acquire(2, { timeoutMs: 20000 });
          await waitFor("queued", async () => (await semInfo(t.admin, key))?.waiters === 1);
          child.kill("SIGSTOP"); // it cannot reconnect and re-attach
          const t0 = Date.now();
          await t.admin.call("CLIENT", "KILL", "ID", String(held[0].keepalive_client));
          const p = await waiting;
          const waited = Date.now() - t0;
          console.log(`# semaphore: holder's session connection killed -> waiter served after ${waited} ms (lease ${lease})`);
          assert.ok(waited <= lease + 1500, `served ${waited} ms after the kill`);
          assert.equal(p.permits, 2);
          await p.release();
          await assertEmpty(t.admin, key, 2);
        } finally {
          child.kill("SIGKILL");
        }
      });

      it("permits whose keys are deleted are reported lost: permit.signal aborts with a LostError", async () => {
        const s2 = await Session.open(t.client.client, { leaseMs: 1000 });
        try {
          const key = t.fresh();
          const permit = await s2.semaphore(key, 1).acquire();
          const lost = new Promise<LostError>((r) => permit.onLost(r));
          await t.admin.del(key, `{${key}}:timeout`);
          const err = await lost;
          assert.ok(err instanceof LostError);
          assert.equal(err.key, key);
          assert.equal(err.owner, permit.owner);
          assert.equal(permit.signal.aborted, true);
          assert.equal(permit.signal.reason, err);
          await assert.rejects(permit.release(), LostError);
        } finally {
          await s2.close();
        }
      });

    }

    it("latch: wait() woken by the last countDown; an open latch answers at once; a timeout answers false", async () => {
      const key = t.fresh();
      const latch = t.session.latch(key);
      assert.equal(await latch.init(2), true);
      assert.equal(await latch.init(5), false);
      assert.equal(await latch.count(), 2);
      const w = settled(latch.wait());
      await waitFor("waiting", async () => (await latchWaiters(t.admin, key)) === 1);
      assert.equal(await latch.countDown(), 1);
      assert.equal(await latchWaiters(t.admin, key), 1);
      assert.equal(w.done, false);
      assert.equal(await latch.countDown(), 0);
      assert.equal(await w.p, true);
      assert.equal(await latch.count(), 0);
      assert.equal(await t.admin.exists(key), 0);
      assert.equal(await latch.wait({ timeoutMs: 0 }), true);
      assert.equal(await latch.init(1), true);
      assert.equal(await latch.wait({ timeoutMs: 0 }), false);
      assert.equal(await latch.wait({ timeoutMs: 50 }), false);
      const ac = new AbortController();
      const aborted = latch.wait({ signal: ac.signal });
      await waitFor("waiting", async () => (await latchWaiters(t.admin, key)) === 1);
      ac.abort();
      await assert.rejects(aborted, (e: Error) => e.name === "AbortError");
      await waitFor("no waiter", async () => (await latchWaiters(t.admin, key)) === 0, 3000);
      assert.equal(await latch.countDown(), 0);
    });

    it("latch: deleted while waited on -> LatchGoneError (GONE)", async () => {
      const key = t.fresh();
      const latch = t.session.latch(key);
      await latch.init(3);
      const w = latch.wait({ timeoutMs: 10000 });
      await waitFor("waiting", async () => (await latchWaiters(t.admin, key)) === 1);
      const gone = assert.rejects(w, (e: unknown) => e instanceof LatchGoneError && e.code === "GONE" && e.key === key);
      await t.admin.del(key);
      await gone;
    });
  });
}
