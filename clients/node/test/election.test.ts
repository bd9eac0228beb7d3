// Leader election (ELECT.*) on one server. Leases of 1 s: the session PINGs every 250 ms while an
// election campaigns or leads. The hand-off runs on ioredis and node-redis 5 and 4; the rest
// (the session's code is the same whatever the client) on ioredis.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import type IORedis from "ioredis";

import { BusyError, Election, Leader, Leadership, LostError } from "../src";
import { CLIENT_KINDS, fixture, info, waitFor, waiters } from "./helpers";

// A leader believes it leads until its last answered PING + half its lease. With 1 s, an event
// loop held up for half a second on a loaded machine (CI runs every suite at once) lets a leader
// go before the test cuts it off or force-releases it. 4 s tolerates a 2 s stall and still ends
// the deadline test within 2 s of the cut.
const LEASE = 4000;
// For the tests whose leader must simply go on leading while others campaign.
const STEADY_LEASE = 10_000;

/** The election's keys still there: the lock, the leader record. */
async function leftBehind(admin: IORedis, name: string): Promise<string[]> {
  const out: string[] = [];
  for (const k of [name, `{${name}}:leader`]) if ((await admin.exists(k)) === 1) out.push(k);
  return out;
}

async function observers(admin: IORedis): Promise<number> {
  const m = /lock_election_observers:(\d+)/.exec(await admin.info("lock"));
  return m ? Number(m[1]) : 0;
}

function brief(l: Leader | null): [string, bigint, string | null] | null {
  return l && [l.candidate, l.term, l.value];
}

for (const kind of CLIENT_KINDS) {
  describe(`election, ${kind}`, () => {
    const t = fixture({ kind, sessions: 2 });

    it("campaign, resign, first-come-first-served hand-off", async () => {
      const name = "el:fifo";
      const e1 = t.sessions[0].election(name, { value: "a", leaseMs: STEADY_LEASE });
      const e2 = new Election(t.sessions[1], name, { value: "b", leaseMs: STEADY_LEASE });
      const e3 = t.sessions[0].election(name, { value: "c", leaseMs: STEADY_LEASE });
      const l1 = await e1.campaign({ timeoutMs: 0 });
      assert.ok(l1.term > 0n && l1.isLeader);
      await assert.rejects(e2.campaign({ timeoutMs: 0 }), BusyError);
      await assert.rejects(e2.campaign({ timeoutMs: 50 }), BusyError);
      assert.deepEqual(await waiters(t.admin, name), []);

      const p2 = e2.campaign();
      await waitFor("the second candidate queued", async () => (await waiters(t.admin, name)).length === 1);
      let l3: Leadership | undefined;
      const p3 = e3.campaign().then((l) => (l3 = l));
      await waitFor("the third candidate queued", async () => (await waiters(t.admin, name)).length === 2);

      assert.equal(await l1.resign(), true);
      assert.equal(await l1.resign(), false);
      assert.ok(!l1.lost && !l1.isLeader && !l1.signal.aborted, "a resign is not a loss");
      const l2 = await p2;
      assert.ok(l2.candidate !== l1.candidate && l2.term > l1.term);
      assert.deepEqual(brief(await e1.leader()), [l2.candidate, l2.term, "b"]);
      assert.equal(l3, undefined, "first come, first served");
      assert.equal((await waiters(t.admin, name)).length, 1);

      assert.equal(await l2.resign(), true);
      await p3;
      assert.ok(l3!.term > l2.term);
      assert.deepEqual(brief(await e1.leader()), [l3!.candidate, l3!.term, "c"]);
      assert.equal(await l3!.resign(), true);
      assert.equal(await e1.leader(), null);
      assert.deepEqual(await leftBehind(t.admin, name), []);
      await assert.rejects(l3!.proclaim("late"), LostError);
    });
  });
}

describe("election, ioredis", () => {
  const t = fixture({ kind: "ioredis", sessions: 2 });

  it("the value and proclaim are visible in leader()", async () => {
    const name = "el:value";
    const e = t.sessions[0].election(name, { value: "10.0.0.5:8080", leaseMs: STEADY_LEASE });
    assert.equal(await e.leader(), null);
    const l = await e.campaign({ timeoutMs: 0 });
    const who = await e.leader();
    assert.deepEqual(brief(who), [l.candidate, l.term, "10.0.0.5:8080"]);
    assert.ok(who!.ttlMs > 0 && who!.ttlMs <= STEADY_LEASE);
    assert.equal(await l.proclaim("10.0.0.6:8080"), l.term);
    assert.equal((await e.leader())?.value, "10.0.0.6:8080");
    assert.equal(await l.resign(), true);
    assert.equal(await e.leader(), null);
    const plain = await t.sessions[0].election(name, { leaseMs: STEADY_LEASE }).campaign({ timeoutMs: 0 });
    assert.deepEqual(brief(await e.leader()), [plain.candidate, plain.term, null]);
    await plain.resign();
    assert.deepEqual(await leftBehind(t.admin, name), []);
  });

  it("observe yields every change in order, and ends when its signal aborts", async () => {
    const name = "el:observe";
    const e1 = t.sessions[0].election(name, { value: "a", leaseMs: STEADY_LEASE });
    const e2 = t.sessions[1].election(name, { value: "b", leaseMs: STEADY_LEASE });
    const stop = new AbortController();
    const seen: (Leader | null)[] = [];
    let ended = false;
    const watching = (async () => {
      for await (const change of new Election(t.client.client, name).observe({ signal: stop.signal })) seen.push(change);
      ended = true;
    })();
    const next = async (n: number) => {
      await waitFor(`change ${n}`, () => seen.length === n, 5000);
      await waitFor("the observer waiting again", async () => (await observers(t.admin)) === 1);
      return seen[n - 1];
    };
    await waitFor("the observer waiting", async () => (await observers(t.admin)) === 1);
    const l1 = await e1.campaign({ timeoutMs: 0 });
    assert.deepEqual(brief(await next(1)), [l1.candidate, l1.term, "a"]);
    const p2 = e2.campaign();
    await waitFor("the second candidate queued", async () => (await waiters(t.admin, name)).length === 1);
    await l1.proclaim("a2");
    assert.deepEqual(brief(await next(2)), [l1.candidate, l1.term, "a2"]);
    await l1.resign();
    const l2 = await p2;
    assert.deepEqual(brief(await next(3)), [l2.candidate, l2.term, "b"]);
    await l2.resign();
    assert.equal(await next(4), null, "nobody leads");
    stop.abort();
    await watching;
    assert.ok(ended && seen.length === 4);
    await waitFor("no observer left", async () => (await observers(t.admin)) === 0);
    assert.deepEqual(await leftBehind(t.admin, name), []);
  });

  it("LOCK.FORCERELEASE: the loss is pushed, as forced (not the local deadline)", async () => {
    const name = "el:forced";
    const e = t.sessions[0].election(name, { leaseMs: LEASE });
    const l = await e.campaign({ timeoutMs: 0 });
    const lost = new Promise<LostError>((res) => l.onLost(res));
    assert.equal(await t.admin.call("LOCK.FORCERELEASE", name), 1);
    const err = await Promise.race([lost, new Promise<null>((res) => setTimeout(() => res(null), 5000))]);
    assert.ok(err instanceof LostError && err.reason === "forced");
    assert.ok(l.signal.aborted && l.signal.reason === err && !l.isLeader);
    assert.throws(() => l.check(), LostError);
    await waitFor("the record gone", async () => (await leftBehind(t.admin, name)).length === 0);
    const next = await e.campaign({ timeoutMs: 0 });
    assert.ok(next.term > l.term && !next.lost);
    await next.resign();
    assert.deepEqual(await leftBehind(t.admin, name), []);
  });

  it("a leader whose session connection is killed: lost, the next candidate leads", async () => {
    const name = "el:killed";
    const l1 = await t.sessions[0].election(name, { leaseMs: LEASE }).campaign({ timeoutMs: 0 });
    const p2 = t.sessions[1].election(name, { leaseMs: LEASE }).campaign();
    await waitFor("the second candidate queued", async () => (await waiters(t.admin, name)).length === 1);
    const lost = new Promise<LostError>((res) => l1.onLost(res));
    // the session connection: the one keeping the lock (LOCK.INFO's keepalive_client)
    const kc = (await info(t.admin, name))?.keepalive_client;
    assert.equal(typeof kc, "number");
    assert.equal(await t.admin.call("CLIENT", "KILL", "ID", String(kc)), 1);
    const err = await lost;
    assert.equal(err.reason, "connection");
    const l2 = await p2;
    assert.ok(l2.term > l1.term && !l1.isLeader);
    assert.equal((await t.sessions[1].election(name).leader())?.candidate, l2.candidate);
    await l2.resign();
    assert.deepEqual(await leftBehind(t.admin, name), []);
  });

  it("a leader cut off (server stopped) stops believing at its deadline, before the server could hand over", async () => {
    const name = "el:deadline";
    const l = await t.sessions[0].election(name, { leaseMs: LEASE }).campaign({ timeoutMs: 0 });
    await waitFor("a PING answered since", () => l.deadline > performance.now() + LEASE / 2 - 100 && l.isLeader);
    const lost = new Promise<number>((res) => l.onLost(() => res(performance.now())));
    const stopped = performance.now();
    t.server.kill("SIGSTOP");
    let noticed: number;
    try {
      noticed = await Promise.race([lost, new Promise<number>((res) => setTimeout(() => res(-1), LEASE))]);
    } finally {
      t.server.kill("SIGCONT");
    }
    assert.ok(noticed > 0, "lost within a lease of the stop");
    assert.equal(l.lostReason, "deadline");
    assert.ok(l.deadline <= stopped + LEASE / 2);
    assert.ok(noticed < l.deadline + LEASE / 2, "given up before the server could hand over");
    await waitFor("resigned after the stop", async () => (await leftBehind(t.admin, name)).length === 0);
  });

  it("an aborted campaign leaves nothing queued or held", async () => {
    const name = "el:abort";
    const l = await t.sessions[0].election(name, { leaseMs: STEADY_LEASE }).campaign({ timeoutMs: 0 });
    const ac = new AbortController();
    const p = t.sessions[1].election(name, { leaseMs: STEADY_LEASE }).campaign({ signal: ac.signal });
    await waitFor("queued", async () => (await waiters(t.admin, name)).length === 1);
    ac.abort(new Error("stop"));
    await assert.rejects(p, /stop/);
    assert.deepEqual(await waiters(t.admin, name), []);
    assert.equal(await l.resign(), true);
    assert.deepEqual(await leftBehind(t.admin, name), []);
  });
});
