// The library on one server, through ioredis and through node-redis (v5 and v4).

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { spawn } from "node:child_process";
import { join } from "node:path";

import { BusyError, DeadlockError, LostError, ModuleNotLoadedError, NotOwnerError, Session, UnavailableError } from "../src";
import { CLIENT_KINDS, KEPT_LEASE_MS, Server, connectClient, fixture, freePort, info, sleep, waitFor, waiters } from "./helpers";

for (const kind of CLIENT_KINDS) {
  describe(`one server, ${kind}`, () => {
    const t = fixture({ kind, sessionOptions: { leaseMs: 5000 }, keyPrefix: `k:${kind}` });

    it("using: a fenced hold bound to the session, released after", async () => {
      const key = t.fresh();
      let token = 0n;
      const out = await t.session.using(key, async (signal, hold) => {
        assert.equal(signal.aborted, false);
        assert.equal(typeof hold.token, "bigint");
        token = hold.token;
        const i = await info(t.admin, key);
        assert.equal(i?.owner, hold.owner);
        assert.ok(hold.owner.startsWith(t.session.token + ":"));
        assert.ok(typeof i?.keepalive_client === "number", "bound to the session connection");
        return 42;
      });
      assert.equal(out, 42);
      assert.equal(await info(t.admin, key), null);
      const h2 = await t.session.lock(key).acquire();
      assert.ok(h2.token > token, "tokens increase");
      await h2.release();
    });

    it("re-entry through the same Lock object: one owner, counted holds", async () => {
      const key = t.fresh();
      const lock = t.session.lock(key);
      const h1 = await lock.acquire();
      const h2 = await lock.acquire();
      assert.equal(h1, h2);
      assert.equal(h1.count, 2);
      assert.equal((await info(t.admin, key))?.holds, 2);
      // Another Lock object is another owner: busy.
      await assert.rejects(t.session.lock(key).acquire({ timeoutMs: 0 }), BusyError);
      await h1.release();
      assert.equal((await info(t.admin, key))?.holds, 1);
      await h1.release();
      assert.equal(await info(t.admin, key), null);
      // After the last release the next acquisition takes a fresh owner.
      const h3 = await lock.acquire();
      assert.notEqual(h3.owner, h1.owner);
      await h3.release();
      await assert.rejects(h3.release().then(() => h3.extend()), NotOwnerError);
    });

    it("1,000 concurrent acquirers on one lock: never two inside", async () => {
      const key = t.fresh();
      let inside = 0;
      let max = 0;
      let count = 0;
      await Promise.all(
        Array.from({ length: 1000 }, () =>
          t.session.using(key, async () => {
            inside++;
            max = Math.max(max, inside);
            await new Promise((r) => setImmediate(r));
            count++;
            inside--;
          }),
        ),
      );
      assert.equal(count, 1000);
      assert.equal(max, 1);
      assert.equal(await info(t.admin, key), null);
      assert.ok(t.session.waitConnections <= 1000);
    });

    it("100 waiters are served in arrival order", async () => {
      const key = t.fresh();
      const holder = await t.session.lock(key).acquire();
      const order: number[] = [];
      const done: Promise<void>[] = [];
      for (let i = 0; i < 100; i++) {
        done.push(
          t.session.using(key, async () => {
            order.push(i);
          }),
        );
        await waitFor(`waiter ${i} queued`, async () => (await waiters(t.admin, key)).length === i + 1);
      }
      await holder.release();
      await Promise.all(done);
      assert.deepEqual(order, Array.from({ length: 100 }, (_, i) => i));
    });

    it("a timed-out wait: BusyError, no waiter left", async () => {
      const key = t.fresh();
      const holder = await t.session.lock(key).acquire();
      const t0 = Date.now();
      await assert.rejects(t.session.lock(key).acquire({ timeoutMs: 200 }), BusyError);
      assert.ok(Date.now() - t0 >= 190);
      assert.deepEqual(await waiters(t.admin, key), []);
      assert.equal((await info(t.admin, key))?.owner, holder.owner);
      await holder.release();
    });

    it("an AbortSignal cancels a wait: no waiter, no hold", async () => {
      const key = t.fresh();
      const holder = await t.session.lock(key).acquire();
      const ac = new AbortController();
      const lock = t.session.lock(key);
      const p = lock.acquire({ signal: ac.signal });
      await waitFor("queued", async () => (await waiters(t.admin, key)).length === 1);
      const cause = new Error("stop");
      ac.abort(cause);
      await assert.rejects(p, (e) => e === cause);
      assert.deepEqual(await waiters(t.admin, key), []);
      await holder.release();
      assert.equal(await info(t.admin, key), null, "the cancelled waiter holds nothing");
      assert.equal(lock.hold, undefined);
    });

    it("a cancel racing the grant leaves no hold", async () => {
      // Release and abort in the same tick, 20 times: whoever wins, nothing is left held.
      for (let i = 0; i < 20; i++) {
        const key = t.fresh();
        const holder = await t.session.lock(key).acquire();
        const ac = new AbortController();
        const p = t.session.lock(key).acquire({ signal: ac.signal }).then(
          (h) => h.release().then(() => "granted"),
          () => "cancelled",
        );
        await waitFor("queued", async () => (await waiters(t.admin, key)).length === 1);
        const r = holder.release();
        ac.abort();
        await r;
        await p;
        await waitFor("free", async () => (await info(t.admin, key)) === null, 3000);
      }
    });

    it("LOCK.FORCERELEASE aborts hold.signal with a LostError", async () => {
      const key = t.fresh();
      const hold = await t.session.lock(key).acquire();
      const lost = new Promise<number>((r) => hold.signal.addEventListener("abort", () => r(performance.now())));
      const onLost = new Promise<LostError>((r) => hold.onLost(r));
      const t0 = performance.now();
      assert.equal(await t.admin.call("LOCK.FORCERELEASE", key), 1);
      const t1 = await lost;
      console.log(`# ${kind}: FORCERELEASE -> hold.signal aborted in ${(t1 - t0).toFixed(2)} ms`);
      const err = hold.signal.reason as LostError;
      assert.ok(err instanceof LostError);
      assert.equal(err.reason, "forced");
      assert.equal((await onLost).reason, "forced");
      assert.equal(hold.lost, true);
      await assert.rejects(hold.release(), LostError);
    });

    it("using: the callback's signal is the hold's, aborted on loss; using rejects with the LostError", { timeout: 10000 }, async () => {
      const key = t.fresh();
      let seen: AbortSignal | undefined;
      const run = t.session.using(key, async (signal, hold) => {
        seen = signal;
        assert.equal(signal, hold.signal);
        assert.equal(signal.aborted, false);
        const aborted = new Promise<void>((r) => signal.addEventListener("abort", () => r()));
        assert.equal(await t.admin.call("LOCK.FORCERELEASE", key), 1);
        await aborted;
        return "done";
      });
      await assert.rejects(run, (e: unknown) => e instanceof LostError && e.reason === "forced");
      assert.ok(seen?.reason instanceof LostError);
      // a later using() of the key gets a fresh, unaborted signal
      assert.equal(await t.session.using(key, async (signal) => signal.aborted), false);
    });

    it("a plain lease ends by itself (hold not bound to the session)", async () => {
      const key = t.fresh();
      const lock = t.session.lock(key);
      const hold = await lock.acquireNow({ leaseMs: 300 }, false);
      assert.equal((await info(t.admin, key))?.keepalive_client, undefined);
      const t0 = Date.now();
      const next = await t.session.lock(key).acquire({ timeoutMs: 5000 });
      assert.ok(Date.now() - t0 >= 200, "served once the lease ended");
      assert.notEqual(next.owner, hold.owner);
      await next.release();
    });

    it("the session connection killed: re-attached, kept alive past its lease", async () => {
      const s2 = await Session.open(t.client.client, { leaseMs: KEPT_LEASE_MS });
      try {
        const key = t.fresh();
        const hold = await s2.lock(key).acquire();
        const before = (await info(t.admin, key))?.keepalive_client as number;
        assert.ok(before);
        const reconnected = new Promise((r) => s2.once("reconnected", r));
        await t.admin.call("CLIENT", "KILL", "ID", String(before));
        await reconnected;
        await waitFor("re-attached to a new connection", async () => {
          const id = (await info(t.admin, key))?.keepalive_client;
          return typeof id === "number" && id !== before;
        }, 5000);
        await sleep(KEPT_LEASE_MS + 500); // past a lease since the re-attach
        assert.equal((await info(t.admin, key))?.owner, hold.owner);
        assert.equal(hold.signal.aborted, false);
        await hold.release();
      } finally {
        await s2.close();
      }
    });

    it("a wait that would close a cycle of waits is refused with DeadlockError; the other wait is served", async () => {
      const x = t.fresh();
      const y = t.fresh();
      const a = await t.session.lock(x).acquire({ timeoutMs: 0 }); // owner A holds x
      const b = await t.session.lock(y).acquire({ timeoutMs: 0 }); // owner B holds y
      const aWaits = t.session.lock(y).acquire({ timeoutMs: 10000, owner: a.owner });
      await waitFor("A queued for y", async () => (await waiters(t.admin, y)).length === 1);
      const err = await t.session
        .lock(x)
        .acquire({ timeoutMs: 10000, owner: b.owner })
        .then(() => assert.fail("B's wait for x was queued"), (e: unknown) => e);
      assert.ok(err instanceof DeadlockError, String(err));
      assert.equal(err.code, "DEADLOCK");
      for (const part of [`'${x}'`, `'${y}'`, a.owner, b.owner]) assert.ok(err.message.includes(part), err.message);
      assert.equal((await waiters(t.admin, x)).length, 0);
      await assert.rejects(t.session.lock(t.fresh()).acquire({ timeoutMs: 0, owner: "nobody" }), /holds nothing/);
      await assert.rejects(t.session.lock(x).acquire({ timeoutMs: 0, owner: a.owner }), /already holds/);
      await b.release();
      const ay = await aWaits;
      assert.equal(ay.owner, a.owner);
      assert.equal((await info(t.admin, y))?.owner, a.owner);
      await ay.release();
      assert.equal((await info(t.admin, x))?.owner, a.owner);
      await a.release();
      assert.equal(await info(t.admin, x), null);
      assert.equal(await info(t.admin, y), null);
    });

    it("read-write lock: readers share, the writer excludes, upgrade beside readers is DEADLOCK", async () => {
      const key = t.fresh();
      const a = t.session.rwlock(key);
      const b = t.session.rwlock(key);
      const ra = await a.read.acquire();
      const rb = await b.read.acquire({ timeoutMs: 0 });
      await assert.rejects(a.write.acquire({ timeoutMs: 0 }), DeadlockError);
      const w = t.session.rwlock(key).write.acquire({ timeoutMs: 5000 });
      await waitFor("writer queued", async () => (await waiters(t.admin, key)).length === 1);
      await ra.release();
      await rb.release();
      const wh = await w;
      assert.equal((await info(t.admin, key))?.mode, "write");
      // downgrade: the writer takes a read hold, releases the write hold, keeps reading
      const wl = t.session.rwlock(key);
      void wl;
      await wh.release();
      const c1 = t.session.rwlock(key);
      const cw = await c1.write.acquire();
      const cr = await c1.read.acquire();
      assert.equal(cr.owner, cw.owner);
      await cw.release();
      assert.equal((await info(t.admin, key))?.mode, "read");
      await cr.release();
      assert.equal(await info(t.admin, key), null);
    });

    it("multi-lock: all keys or none", async () => {
      const k1 = t.fresh();
      const k2 = t.fresh();
      const single = await t.session.lock(k2).acquire();
      await assert.rejects(t.session.multiLock([k1, k2]).acquire({ timeoutMs: 0 }), BusyError);
      assert.equal(await info(t.admin, k1), null, "nothing taken");
      const p = t.session.using([k1, k2], async (_s, hold) => {
        assert.equal(hold.tokens.length, 2);
        assert.ok((await info(t.admin, k1))?.owner === hold.owner && (await info(t.admin, k2))?.owner === hold.owner);
        return "both";
      });
      await waitFor("multi queued", async () => (await waiters(t.admin, k2)).length === 1);
      await single.release();
      assert.equal(await p, "both");
      assert.equal(await info(t.admin, k1), null);
      assert.equal(await info(t.admin, k2), null);
    });

    it("kill -9 of a holder process: the next waiter is served within lease + slack", async () => {
      const key = t.fresh();
      const lease = 1000;
      const child = spawn(process.execPath, [join(__dirname, "holder.js"), kind, String(t.server.port), key, String(lease)], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      try {
        await new Promise<void>((res, rej) => {
          child.stdout!.on("data", (d: Buffer) => d.toString().includes("held") && res());
          child.on("exit", (code) => rej(new Error(`holder exited ${code}`)));
        });
        assert.ok((await info(t.admin, key))?.owner);
        const waiting = t.session.lock(key).acquire({ timeoutMs: 20000 });
        await waitFor("queued", async () => (await waiters(t.admin, key)).length === 1);
        const t0 = Date.now();
        child.kill("SIGKILL");
        const h = await waiting;
        const waited = Date.now() - t0;
        console.log(`# ${kind}: holder killed -> next waiter served after ${waited} ms (lease ${lease})`);
        assert.ok(waited <= lease + 1500, `served ${waited} ms after the kill`);
        await h.release();
      } finally {
        child.kill("SIGKILL");
      }
    });
  });
}

describe("failures", () => {
  it("module missing -> ModuleNotLoadedError", async () => {
    const server = await Server.start({ module: false });
    try {
      for (const kind of CLIENT_KINDS) {
        const c = await connectClient(kind, server.port);
        try {
          await assert.rejects(Session.open(c.client), ModuleNotLoadedError);
        } finally {
          await c.close();
        }
      }
    } finally {
      await server.stop();
    }
  });

  for (const kind of CLIENT_KINDS) {
    it(`server down -> UnavailableError; holds lost once down longer than the lease (${kind})`, async () => {
      const server = await Server.start();
      const c = await connectClient(kind, server.port);
      let s: Session | undefined;
      try {
        s = await Session.open(c.client, { leaseMs: 1000 });
        const hold = await s.lock("k").acquire();
        const lost = new Promise<LostError>((r) => hold.onLost(r));
        await server.stop();
        await assert.rejects(s.lock("other").acquire({ timeoutMs: 100 }), UnavailableError);
        assert.equal((await lost).reason, "down");
        assert.equal(hold.signal.aborted, true);
      } finally {
        await s?.close();
        await c.close();
        await server.stop();
      }
    });
  }

  it("no server at all -> UnavailableError from Session.open", async () => {
    const port = await freePort();
    const IORedis = (await import("ioredis")).default;
    const io = new IORedis({ port, host: "127.0.0.1", lazyConnect: true });
    await assert.rejects(Session.open(io), UnavailableError);
    io.disconnect();
    const { createClient } = await import("redis");
    const nr = createClient({ socket: { port, host: "127.0.0.1" } });
    await assert.rejects(Session.open(nr), UnavailableError);
    const { createClient: createClient4 } = await import("redis4");
    const nr4 = createClient4({ socket: { port, host: "127.0.0.1" } });
    await assert.rejects(Session.open(nr4), UnavailableError);
  });
});
