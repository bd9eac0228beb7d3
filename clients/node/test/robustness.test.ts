// What a user trial found: waits that must survive their connection's loss, the errors of a
// refused password and of a lease under the server's floor, `using` after a late loss, string
// tokens.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import type IORedis from "ioredis";

import {
  AuthenticationError,
  LeaseTooShortError,
  LockError,
  ModuleNotLoadedError,
  Session,
  UnavailableError,
} from "../src";
import { CLIENT_KINDS, Client, Server, blockedClients, connectClient, info, sleep, waitFor, waiters } from "./helpers";

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  assert.fail("expected a rejection");
}

for (const kind of CLIENT_KINDS) {
  describe(`a wait survives its connection, ${kind}`, () => {
    let server: Server;
    let admin: IORedis;
    let c: Client;
    let session: Session;
    let n = 0;
    const fresh = () => `w:${kind}:${++n}`;

    before(async () => {
      server = await Server.start();
      admin = server.admin();
      c = await connectClient(kind, server.port);
      session = await Session.open(c.client, { leaseMs: 5000 });
    });
    after(async () => {
      await admin?.call("CONFIG", "SET", "timeout", "0").catch(() => {});
      await session?.close();
      await c?.close();
      admin?.disconnect();
      await server?.stop();
    });

    it("CLIENT KILL of the waiting connection 5 times during one wait: it queues again and gets the lock, no owner left over", async () => {
      const key = fresh();
      const holder = await session.lock(key).acquire();
      const waiting = session.lock(key).acquire({ timeoutMs: 30000 });
      let seen = "";
      for (let i = 0; i < 5; i++) {
        // Each time a new connection (another id) blocks for the wait.
        let id = "";
        await waitFor(`wait ${i + 1} blocked`, async () => {
          const ids = await blockedClients(admin);
          id = ids.find((x) => x !== seen) ?? "";
          return id !== "";
        });
        seen = id;
        await admin.call("CLIENT", "KILL", "ID", id);
      }
      await waitFor("the wait blocked again", async () => (await blockedClients(admin)).length === 1);
      assert.equal((await waiters(admin, key)).length, 1, "one waiter: the old owners were cancelled");
      await holder.release();
      const hold = await waiting;
      assert.equal((await info(admin, key))?.owner, hold.owner);
      assert.deepEqual(await waiters(admin, key), []);
      await hold.release();
      assert.equal(await info(admin, key), null);
    });

    it("a killer loop on the waiting connection until the holder releases: the acquire succeeds, nothing left over", async () => {
      const key = fresh();
      const holder = await session.lock(key).acquire();
      const waiting = session.lock(key).acquire({ timeoutMs: 30000 });
      let done = false;
      let kills = 0;
      void waiting.finally(() => (done = true)).catch(() => {});
      const killer = (async () => {
        while (!done) {
          for (const id of await blockedClients(admin)) {
            await admin.call("CLIENT", "KILL", "ID", id).catch(() => {});
            kills++;
          }
          if (kills >= 3 && holder.count > 0) await holder.release();
          await sleep(5);
        }
      })();
      const hold = await waiting;
      await killer;
      assert.ok(kills >= 3);
      assert.equal((await info(admin, key))?.owner, hold.owner);
      assert.equal((await info(admin, key))?.holds, 1, "one owner, one hold");
      assert.deepEqual(await waiters(admin, key), []);
      await hold.release();
      assert.equal(await info(admin, key), null);
    });

    it("an idle reaper (CONFIG SET timeout 1) closing pooled connections: waits still work", async () => {
      const key = fresh();
      // A pooled wait connection, idle after this wait.
      const first = await session.lock(key).acquire({ timeoutMs: 5000 });
      await first.release();
      const before = String(await admin.call("CLIENT", "LIST"));
      await admin.call("CONFIG", "SET", "timeout", "1");
      try {
        // Until the server has reaped an idle connection of ours.
        await waitFor(
          "an idle connection reaped",
          async () => {
            const now = String(await admin.call("CLIENT", "LIST"));
            const ids = (t: string) => new Set([...t.matchAll(/\bid=(\d+)/g)].map((m) => m[1]));
            const was = ids(before);
            const is = ids(now);
            return [...was].some((id) => !is.has(id));
          },
          15000,
        );
        for (let i = 0; i < 3; i++) {
          const holder = await session.lock(key).acquire({ timeoutMs: 5000 });
          const waiting = session.lock(key).acquire({ timeoutMs: 10000 });
          await waitFor("waiter queued", async () => (await waiters(admin, key)).length === 1);
          await holder.release();
          const h = await waiting;
          await h.release();
        }
      } finally {
        await admin.call("CONFIG", "SET", "timeout", "0");
      }
      assert.equal(await info(admin, key), null);
      assert.deepEqual(await waiters(admin, key), []);
    });

    it("a wait with an owner given by the caller cannot change owner: its broken connection is UnavailableError, nothing left", async () => {
      const key = fresh();
      const other = fresh();
      const mine = await session.lock(other).acquire();
      const holder = await session.lock(key).acquire();
      const waiting = session.lock(key).acquire({ timeoutMs: 30000, owner: mine.owner });
      await waitFor("blocked", async () => (await blockedClients(admin)).length === 1);
      await admin.call("CLIENT", "KILL", "ID", (await blockedClients(admin))[0]);
      assert.ok((await rejection(waiting)) instanceof UnavailableError);
      assert.deepEqual(await waiters(admin, key), []);
      await holder.release();
      await mine.release();
    });

    it("using: a routine that returned before the loss resolves with its value", async () => {
      const key = fresh();
      let forced = false;
      // The loss comes between the routine's return and the release: the release is preceded by a
      // FORCERELEASE from another connection.
      const out = await session.using(key, async () => {
        if (kind === "ioredis") {
          const client = c.client as IORedis;
          const call = client.call.bind(client);
          (client as unknown as { call: unknown }).call = async (...args: string[]) => {
            if (args[0] === "LOCK.RELEASE" && args[1] === key && !forced) {
              forced = true;
              await admin.call("LOCK.FORCERELEASE", key);
            }
            return call(...(args as [string]));
          };
        } else {
          const client = c.client as { sendCommand: (a: string[]) => Promise<unknown> };
          const send = client.sendCommand.bind(client);
          client.sendCommand = async (args: string[]) => {
            if (args[0] === "LOCK.RELEASE" && args[1] === key && !forced) {
              forced = true;
              await admin.call("LOCK.FORCERELEASE", key);
            }
            return send(args);
          };
        }
        return "value";
      });
      assert.equal(forced, true, "the loss happened after the routine returned");
      assert.equal(out, "value");
      assert.equal(await info(admin, key), null);
    });

    it("tokens: tokenString is the bigint in decimal, JSON-safe", async () => {
      const hold = await session.lock(fresh()).acquire();
      assert.equal(typeof hold.token, "bigint");
      assert.equal(hold.tokenString, hold.token.toString());
      assert.throws(() => JSON.stringify({ t: hold.token }), TypeError);
      assert.equal(JSON.parse(JSON.stringify({ t: hold.tokenString })).t, String(hold.token));
      await hold.release();
    });

    it("a lease under the server's floor: LeaseTooShortError in the user's words, before anything is held", async () => {
      const floor = Number(/lock_keepalive_min_lease_ms:(\d+)/.exec(String(await admin.info("lock")))![1]);
      assert.ok(floor > 300);
      const e = await rejection(Session.open(c.client, { leaseMs: 300 }));
      assert.ok(e instanceof LeaseTooShortError && e instanceof LockError, `got ${String(e)}`);
      assert.equal(e.leaseMs, 300);
      assert.equal(e.minLeaseMs, floor);
      assert.match(e.message, /lease 300 ms/);
      assert.doesNotMatch(e.message, /KEEPALIVE/);
      assert.equal(session.minLeaseMs, floor);
      const key = fresh();
      const e2 = await rejection(session.lock(key).acquire({ leaseMs: 300 }));
      assert.ok(e2 instanceof LeaseTooShortError);
      assert.equal(await info(admin, key), null);
      const ok = await session.lock(key).acquire({ leaseMs: floor });
      await ok.release();
    });
  });
}

describe("authentication and permissions", () => {
  let server: Server;
  let admin: IORedis;

  before(async () => {
    server = await Server.start();
    admin = server.admin();
    await admin.call("CONFIG", "SET", "requirepass", "secret");
    await admin.call("AUTH", "secret");
    await admin.call("ACL", "SETUSER", "nolock", "on", ">pw", "~*", "+@all", "-lock.session");
  });
  after(async () => {
    admin?.disconnect();
    await server?.stop();
  });

  for (const kind of CLIENT_KINDS) {
    it(`the password changed after the client connected: AuthenticationError WRONGPASS, not unavailable (${kind})`, async () => {
      const c = await connectClient(kind, server.port, { password: "secret" });
      try {
        await admin.call("CONFIG", "SET", "requirepass", "changed");
        const e = await rejection(Session.open(c.client));
        assert.ok(e instanceof AuthenticationError, `got ${String(e)}`);
        assert.equal(e.code, "WRONGPASS");
      } finally {
        await admin.call("CONFIG", "SET", "requirepass", "secret");
        await c.close();
      }
    });

    it(`an ACL refusal of the lock commands: AuthenticationError NOPERM (${kind})`, async () => {
      // A user allowed everything but LOCK.SESSION.
      const c = await connectClient(kind, server.port, { username: "nolock", password: "pw" });
      try {
        const e = await rejection(Session.open(c.client));
        assert.ok(e instanceof AuthenticationError, `got ${String(e)}`);
        assert.equal(e.code, "NOPERM");
      } finally {
        await c.close();
      }
    });
  }

  it("ioredis with a wrong password from the start: AuthenticationError, not 'Connection is closed.'", async () => {
    const c = await connectClient("ioredis", server.port, { password: "wrong" });
    try {
      const e = await rejection(Session.open(c.client));
      assert.ok(e instanceof AuthenticationError, `got ${String(e)}`);
      assert.equal(e.code, "WRONGPASS");
    } finally {
      await c.close();
    }
  });

  it("ioredis without a password: AuthenticationError NOAUTH", async () => {
    const c = await connectClient("ioredis", server.port);
    try {
      const e = await rejection(Session.open(c.client));
      assert.ok(e instanceof AuthenticationError, `got ${String(e)}`);
      assert.equal(e.code, "NOAUTH");
    } finally {
      await c.close();
    }
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
