// What a user trial found: waits that must survive their connection's loss, the errors of a
// refused password and of a lease under the server's floor, `using` after a late loss, string
// tokens.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import type IORedis from "ioredis";

import {
  AuthenticationError,
  Hold,
  LeaseTooShortError,
  LockError,
  ModuleNotLoadedError,
  Session,
} from "../src";
import {
  CLIENT_KINDS,
  ClientKind,
  ConnectOptions,
  Server,
  blockedAgain,
  blockedClients,
  connectClient,
  fixture,
  info,
  killBlocked,
  rejection,
  sleep,
  waitFor,
  waiters,
} from "./helpers";

for (const kind of CLIENT_KINDS) {
  describe(`a wait survives its connection, ${kind}`, () => {
    const t = fixture({
      kind,
      sessionOptions: { leaseMs: 5000 },
      keyPrefix: `w:${kind}`,
      // A test that sets the idle reaper resets it itself; this is for one that failed first.
      tearDown: async ({ admin }) => void (await admin.call("CONFIG", "SET", "timeout", "0").catch(() => {})),
    });

    it("CLIENT KILL of the waiting connection 5 times during one wait: it queues again and gets the lock, no owner left over", async () => {
      const key = t.fresh();
      const holder = await t.session.lock(key).acquire();
      const waiting = t.session.lock(key).acquire({ timeoutMs: 30000 });
      // Each time a new connection (another id) blocks for the wait.
      for (let i = 0; i < 5; i++) await blockedAgain(t.admin, await killBlocked(t.admin));
      assert.equal((await waiters(t.admin, key)).length, 1, "one waiter: the old owners were cancelled");
      await holder.release();
      const hold = await waiting;
      assert.equal((await info(t.admin, key))?.owner, hold.owner);
      assert.deepEqual(await waiters(t.admin, key), []);
      await hold.release();
      assert.equal(await info(t.admin, key), null);
    });

    it("a killer loop on the waiting connection until the holder releases: the acquire succeeds, nothing left over", async () => {
      const key = t.fresh();
      const holder = await t.session.lock(key).acquire();
      const waiting = t.session.lock(key).acquire({ timeoutMs: 30000 });
      let done = false;
      let kills = 0;
      void waiting.finally(() => (done = true)).catch(() => {});
      const killer = (async () => {
        while (!done) {
          for (const id of await blockedClients(t.admin)) {
            await t.admin.call("CLIENT", "KILL", "ID", id).catch(() => {});
            kills++;
          }
          if (kills >= 3 && holder.count > 0) await holder.release();
          await sleep(5);
        }
      })();
      const hold = await waiting;
      await killer;
      assert.ok(kills >= 3);
      assert.equal((await info(t.admin, key))?.owner, hold.owner);
      assert.equal((await info(t.admin, key))?.holds, 1, "one owner, one hold");
      assert.deepEqual(await waiters(t.admin, key), []);
      await hold.release();
      assert.equal(await info(t.admin, key), null);
    });

    it("an idle reaper (CONFIG SET timeout 1) closing pooled connections: waits still work", async () => {
      const key = t.fresh();
      // A pooled wait connection, idle after this wait.
      const first = await t.session.lock(key).acquire({ timeoutMs: 5000 });
      await first.release();
      const before = String(await t.admin.call("CLIENT", "LIST"));
      await t.admin.call("CONFIG", "SET", "timeout", "1");
      try {
        // Until the server has reaped an idle connection of ours.
        await waitFor(
          "an idle connection reaped",
          async () => {
            const now = String(await t.admin.call("CLIENT", "LIST"));
            const ids = (t: string) => new Set([...t.matchAll(/\bid=(\d+)/g)].map((m) => m[1]));
            const was = ids(before);
            const is = ids(now);
            return [...was].some((id) => !is.has(id));
          },
          15000,
        );
        for (let i = 0; i < 3; i++) {
          const holder = await t.session.lock(key).acquire({ timeoutMs: 5000 });
          const waiting = t.session.lock(key).acquire({ timeoutMs: 10000 });
          await waitFor("waiter queued", async () => (await waiters(t.admin, key)).length === 1);
          await holder.release();
          const h = await waiting;
          await h.release();
        }
      } finally {
        await t.admin.call("CONFIG", "SET", "timeout", "0");
      }
      assert.equal(await info(t.admin, key), null);
      assert.deepEqual(await waiters(t.admin, key), []);
    });

    // A wait whose owner cannot change is queued again as the same owner once the cleanup's
    // release (of exactly what it waited for) has answered: what the owner held before stays.

    it("a wait with an owner given by the caller: its broken connection queues the same owner again; its other hold stays", async () => {
      const key = t.fresh();
      const other = t.fresh();
      const mine = await t.session.lock(other).acquire();
      const holder = await t.session.lock(key).acquire();
      const waiting = t.session.lock(key).acquire({ timeoutMs: 30000, owner: mine.owner });
      await blockedAgain(t.admin, await killBlocked(t.admin));
      assert.deepEqual(await waiters(t.admin, key), [mine.owner], "the same owner, queued once");
      await holder.release();
      const hold = await waiting;
      assert.equal(hold.owner, mine.owner);
      assert.equal((await info(t.admin, key))?.owner, mine.owner);
      assert.equal((await info(t.admin, other))?.owner, mine.owner, "the owner's other hold is untouched");
      assert.deepEqual(await waiters(t.admin, key), []);
      await hold.release();
      await mine.release();
      assert.equal(await info(t.admin, key), null);
      assert.equal(await info(t.admin, other), null);
    });

    it("an upgrade whose connection breaks before the server ran it: the same owner again, its read hold kept until released", async () => {
      // An upgrade never waits in the server (a sole reader gets the write hold at once, beside
      // other readers it is DEADLOCK), so its connection is broken while CLIENT PAUSE WRITE holds
      // the command back, the one moment it is in flight.
      const key = t.fresh();
      const rw = t.session.rwlock(key);
      const read = await rw.read.acquire();
      await t.admin.call("CLIENT", "PAUSE", "30000", "WRITE");
      let upgrade: Promise<Hold>;
      try {
        upgrade = rw.write.acquire({ timeoutMs: 30000 });
        await killBlocked(t.admin, "lock.wacquire"); // held back by the pause
        // The cleanup is held back by the pause too, and nothing is sent again before it answers.
        await waitFor("the cleanup's LOCK.CANCEL held back", async () => (await blockedClients(t.admin, "lock.cancel")).length === 1);
        assert.deepEqual(await blockedClients(t.admin, "lock.wacquire"), [], "no resend before the cleanup has answered");
      } finally {
        await t.admin.call("CLIENT", "UNPAUSE");
      }
      const write = await upgrade;
      assert.equal(write.owner, read.owner);
      const i = await info(t.admin, key);
      assert.equal(i?.writer, read.owner);
      assert.deepEqual(i?.readers, [read.owner, 1], "the read hold is kept");
      assert.equal(i?.write_holds, 1);
      assert.deepEqual(await waiters(t.admin, key), []);
      await write.release();
      const after = await info(t.admin, key);
      assert.equal(after?.mode, "read");
      assert.deepEqual(after?.readers, [read.owner, 1], "the read hold outlives the write hold");
      await read.release();
      assert.equal(await info(t.admin, key), null);
    });

    it("a campaign whose connection breaks: the same candidate campaigns again, and leads once the leader resigns", async () => {
      const name = t.fresh();
      const leader = await t.session.election(name, { leaseMs: 5000 }).campaign({ timeoutMs: 0 });
      const campaign = t.session.election(name, { leaseMs: 5000 }).campaign({ timeoutMs: 30000 });
      await waitFor("the campaign queued", async () => (await waiters(t.admin, name)).length === 1);
      const [candidate] = await waiters(t.admin, name);
      await blockedAgain(t.admin, await killBlocked(t.admin, "elect.campaign"), "elect.campaign");
      assert.deepEqual(await waiters(t.admin, name), [candidate], "the same candidate, queued once");
      assert.equal(await leader.resign(), true);
      const leading = await campaign;
      assert.equal(leading.candidate, candidate);
      assert.ok(leading.isLeader && leading.term > leader.term);
      assert.deepEqual(await waiters(t.admin, name), []);
      assert.equal(await leading.resign(), true);
      assert.deepEqual(await waiters(t.admin, name), []);
      assert.equal(await t.admin.exists(name, `{${name}}:leader`), 0, "nothing left behind");
    });

    it("using: a routine that returned before the loss resolves with its value", async () => {
      const key = t.fresh();
      let forced = false;
      // The loss comes between the routine's return and the release: the release is preceded by a
      // FORCERELEASE from another connection.
      const out = await t.session.using(key, async () => {
        if (kind === "ioredis") {
          const client = t.client.client as IORedis;
          const call = client.call.bind(client);
          (client as unknown as { call: unknown }).call = async (...args: string[]) => {
            if (args[0] === "LOCK.RELEASE" && args[1] === key && !forced) {
              forced = true;
              await t.admin.call("LOCK.FORCERELEASE", key);
            }
            return call(...(args as [string]));
          };
        } else {
          const client = t.client.client as { sendCommand: (a: string[]) => Promise<unknown> };
          const send = client.sendCommand.bind(client);
          client.sendCommand = async (args: string[]) => {
            if (args[0] === "LOCK.RELEASE" && args[1] === key && !forced) {
              forced = true;
              await t.admin.call("LOCK.FORCERELEASE", key);
            }
            return send(args);
          };
        }
        return "value";
      });
      assert.equal(forced, true, "the loss happened after the routine returned");
      assert.equal(out, "value");
      assert.equal(await info(t.admin, key), null);
    });

    it("tokens: tokenString is the bigint in decimal, JSON-safe", async () => {
      const hold = await t.session.lock(t.fresh()).acquire();
      assert.equal(typeof hold.token, "bigint");
      assert.equal(hold.tokenString, hold.token.toString());
      assert.throws(() => JSON.stringify({ t: hold.token }), TypeError);
      assert.equal(JSON.parse(JSON.stringify({ t: hold.tokenString })).t, String(hold.token));
      await hold.release();
    });

    it("a lease under the server's floor: LeaseTooShortError in the user's words, before anything is held", async () => {
      const floor = Number(/lock_keepalive_min_lease_ms:(\d+)/.exec(String(await t.admin.info("lock")))![1]);
      assert.ok(floor > 300);
      const e = await rejection(Session.open(t.client.client, { leaseMs: 300 }));
      assert.ok(e instanceof LeaseTooShortError && e instanceof LockError, `got ${String(e)}`);
      assert.equal(e.leaseMs, 300);
      assert.equal(e.minLeaseMs, floor);
      assert.match(e.message, /lease 300 ms/);
      assert.doesNotMatch(e.message, /KEEPALIVE/);
      assert.equal(t.session.minLeaseMs, floor);
      const key = t.fresh();
      const e2 = await rejection(t.session.lock(key).acquire({ leaseMs: 300 }));
      assert.ok(e2 instanceof LeaseTooShortError);
      assert.equal(await info(t.admin, key), null);
      const ok = await t.session.lock(key).acquire({ leaseMs: floor });
      await ok.release();
    });
  });
}

describe("authentication and permissions", () => {
  const t = fixture({
    setUp: async ({ admin }) => {
      await admin.call("CONFIG", "SET", "requirepass", "secret");
      await admin.call("AUTH", "secret");
      await admin.call("ACL", "SETUSER", "nolock", "on", ">pw", "~*", "+@all", "-lock.session");
    },
  });

  /** Session.open through a client of `kind` made with `opts` rejects with AuthenticationError `code`. */
  async function refused(kind: ClientKind, opts: ConnectOptions, code: string, afterConnect?: () => Promise<unknown>): Promise<void> {
    const c = await connectClient(kind, t.server.port, opts);
    try {
      await afterConnect?.();
      const e = await rejection(Session.open(c.client));
      assert.ok(e instanceof AuthenticationError, `got ${String(e)}`);
      assert.equal(e.code, code);
    } finally {
      await c.close();
    }
  }

  for (const kind of CLIENT_KINDS) {
    it(`the password changed after the client connected: AuthenticationError WRONGPASS, not unavailable (${kind})`, async () => {
      try {
        await refused(kind, { password: "secret" }, "WRONGPASS", () => t.admin.call("CONFIG", "SET", "requirepass", "changed"));
      } finally {
        await t.admin.call("CONFIG", "SET", "requirepass", "secret");
      }
    });

    it(`an ACL refusal of the lock commands: AuthenticationError NOPERM (${kind})`, async () => {
      // A user allowed everything but LOCK.SESSION.
      await refused(kind, { username: "nolock", password: "pw" }, "NOPERM");
    });
  }

  it("ioredis with a wrong password from the start: AuthenticationError, not 'Connection is closed.'", async () => {
    await refused("ioredis", { password: "wrong" }, "WRONGPASS");
  });

  it("ioredis without a password: AuthenticationError NOAUTH", async () => {
    await refused("ioredis", {}, "NOAUTH");
  });
});

describe("module missing", () => {
  it("is worded as a missing module (--loadmodule), never as too old", async () => {
    const server = await Server.start({ module: false });
    const c = await connectClient("ioredis", server.port);
    try {
      const e = await rejection(Session.open(c.client));
      assert.ok(e instanceof ModuleNotLoadedError, `got ${String(e)}`);
      assert.match(e.message, /--loadmodule/);
      assert.doesNotMatch(e.message, /too old/);
    } finally {
      await c.close();
      await server.stop();
    }
  });
});
