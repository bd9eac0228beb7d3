// Nothing left behind: a process that forgets session.close() still exits; sessions opened and
// closed leave no handles in this process and no connections on the server.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, it } from "node:test";

import { ModuleRedlock, Session } from "../src";
import { CLIENT_KINDS, clientCount, connectClient, fixture, info, waitFor, waiters } from "./helpers";

/** The process's active resources by type (timers, sockets...), without the given baseline's. */
function resourcesOver(baseline: string[]): string[] {
  const left = [...process.getActiveResourcesInfo()];
  for (const r of baseline) {
    const i = left.indexOf(r);
    if (i >= 0) left.splice(i, 1);
  }
  return left;
}

describe("leaks", () => {
  const t = fixture();

  for (const kind of CLIENT_KINDS) {
    it(`a process that never closes its session exits once its own client is closed; a wait kept it alive until served (${kind})`, async () => {
      const key = `forgot:${kind}`;
      const waitKey = `forgot-wait:${kind}`;
      const parent = await connectClient("ioredis", t.server.port);
      const session = await Session.open(parent.client);
      const blocker = await session.lock(waitKey).acquire();
      const child = spawn(process.execPath, [join(__dirname, "forgetful.js"), kind, String(t.server.port), key, waitKey], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      let out = "";
      child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
      const exited = new Promise<number | null>((res) => child.on("exit", (code) => res(code)));
      let guard: NodeJS.Timeout | undefined;
      try {
        await waitFor("the child waits", async () => out.includes("waiting") && (await waiters(t.admin, waitKey)).length === 1, 15000);
        await blocker.release();
        const code = await Promise.race([
          exited,
          new Promise<"alive">((res) => (guard = setTimeout(() => res("alive"), 15000))),
        ]);
        assert.equal(code, 0, "the child exited by itself with its session open");
        assert.ok(out.includes("held"), "it was served before exiting");
        // Its holds end with their lease once its session connection is gone.
        await waitFor("the forgotten hold ends", async () => (await info(t.admin, key)) === null, 15000);
      } finally {
        clearTimeout(guard);
        child.kill("SIGKILL");
        await session.close();
        await parent.close();
      }
    });
  }

  for (const kind of ["ioredis", "node-redis"] as const) {
    it(`1,000 sessions and redlocks opened, used and closed: no handle, no server connection left (${kind})`, async () => {
      const c = await connectClient(kind, t.server.port);
      try {
        await c.ping();
        const baselineClients = await clientCount(t.admin); // this client's and admin's
        // One session first, so the client's own lazily made timers are in the baseline.
        await (await Session.open(c.client)).close();
        const baselineResources = process.getActiveResourcesInfo();
        for (let i = 0; i < 1000; i++) {
          if (i % 2 === 0) {
            const s = await Session.open(c.client);
            const h = await s.lock(`leak:${kind}:${i}`).acquire({ timeoutMs: 1000 }); // a pooled wait connection too
            await h.release();
            await s.close();
          } else {
            const r = new ModuleRedlock([c.client]);
            const l = await r.acquire([`leak:${kind}:${i}`], 5000);
            await l.release();
            await r.quit();
          }
        }
        await waitFor("the server sees only the connections from before", async () => (await clientCount(t.admin)) === baselineClients, 10000);
        await waitFor("no handle left in this process", () => resourcesOver(baselineResources).length === 0, 10000).catch(() => {
          assert.deepEqual(resourcesOver(baselineResources), [], "handles left");
        });
      } finally {
        await c.close();
      }
    });
  }
});
