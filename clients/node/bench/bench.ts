// Benchmark: the library vs the bare commands through ioredis, and vs node-redlock v5, on one
// redis-server with the module (started here on a free port). "Clients" are concurrent async
// loops in this process. Prints a markdown table and writes it to --out FILE / $BENCH_OUT.

import { writeFileSync } from "node:fs";

import IORedis from "ioredis";
import Redlock from "redlock";

import { Session } from "../src";
import { Server } from "../test/helpers";

const SECONDS = Number(process.env.BENCH_SECONDS || 3);

interface Result {
  name: string;
  clients: number;
  acquisitions: number;
  failures: number;
  seconds: number;
  waits: number[];
}

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Runs `clients` loops of `cycle` for SECONDS; `cycle` returns the ms it waited for the lock, or null on failure. */
async function run(name: string, clients: number, cycle: (i: number) => Promise<number | null>): Promise<Result> {
  const waits: number[] = [];
  let acquisitions = 0;
  let failures = 0;
  const end = performance.now() + SECONDS * 1000;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async (_, i) => {
      while (performance.now() < end) {
        const w = await cycle(i);
        if (w === null) failures++;
        else {
          acquisitions++;
          waits.push(w);
        }
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  waits.sort((a, b) => a - b);
  const r = { name, clients, acquisitions, failures, seconds, waits };
  process.stderr.write(`${name} x${clients}: ${(acquisitions / seconds).toFixed(0)}/s\n`);
  return r;
}

function row(r: Result, vs?: Result): string {
  const rate = r.acquisitions / r.seconds;
  const ratio = vs ? ` (${(rate / (vs.acquisitions / vs.seconds)).toFixed(2)}x)` : "";
  return `| ${r.name} | ${r.clients} | ${rate.toFixed(0)}${ratio} | ${pct(r.waits, 50).toFixed(2)} | ${pct(r.waits, 99).toFixed(2)} | ${r.failures} |`;
}

async function main(): Promise<void> {
  const outIdx = process.argv.indexOf("--out");
  const out = outIdx > 0 ? process.argv[outIdx + 1] : process.env.BENCH_OUT;
  const server = await Server.start();
  const client = new IORedis({ port: server.port, host: "127.0.0.1" });
  const session = await Session.open(client);
  const rows: string[] = [];
  try {
    const version = String(await client.info("server")).match(/(redis|valkey)_version:(\S+)/);
    // (a) uncontended acquire + release, one client
    let n = 0;
    const bareConn = client.duplicate();
    const libA = await run("library: session.lock(k).acquire() + release()", 1, async () => {
      const t = performance.now();
      const h = await session.lock("a:lib").acquire();
      const w = performance.now() - t;
      await h.release();
      return w;
    });
    const bareA = await run("bare: LOCK.ACQUIRE k o PX 30000 BLOCK 0 FENCE SESSION t + LOCK.RELEASE", 1, async () => {
      const o = `bare:${++n}`;
      const t = performance.now();
      await bareConn.call("LOCK.ACQUIRE", "a:bare", o, "PX", "30000", "BLOCK", "0", "FENCE", "SESSION", session.token);
      const w = performance.now() - t;
      await client.call("LOCK.RELEASE", "a:bare", o);
      return w;
    });
    // (b) one hot lock, 16 clients, each: acquire with BLOCK, release, repeat
    const libB = await run("library: session.using(k, ...)", 16, async () => {
      const t = performance.now();
      let w = 0;
      await session.using("b:lib", async () => {
        w = performance.now() - t;
      });
      return w;
    });
    const conns = Array.from({ length: 16 }, () => client.duplicate());
    const bareB = await run("bare: LOCK.ACQUIRE ... BLOCK 0 (own connection) + LOCK.RELEASE", 16, async (i) => {
      const o = `bare:${++n}`;
      const t = performance.now();
      await conns[i].call("LOCK.ACQUIRE", "b:bare", o, "PX", "30000", "BLOCK", "0", "FENCE", "SESSION", session.token);
      const w = performance.now() - t;
      await client.call("LOCK.RELEASE", "b:bare", o);
      return w;
    });
    for (const c of conns) c.disconnect();
    bareConn.disconnect();

    // (c) vs node-redlock v5 on one hot lock
    const redlockDefault = new Redlock([client]);
    const redlockTight = new Redlock([client], { retryCount: -1, retryDelay: 10, retryJitter: 5 });
    redlockDefault.on("error", () => {});
    redlockTight.on("error", () => {});
    const cRows: string[] = [];
    for (const clients of [1, 16, 64]) {
      const lib = await run("library (using)", clients, async () => {
        const t = performance.now();
        let w = 0;
        await session.using(`c:lib:${clients}`, async () => {
          w = performance.now() - t;
        });
        return w;
      });
      const rd = await run("redlock v5, defaults (retryCount 10, retryDelay 200, jitter 100)", clients, async () => {
        const t = performance.now();
        try {
          const l = await redlockDefault.acquire([`c:rd:${clients}`], 30000);
          const w = performance.now() - t;
          await l.release();
          return w;
        } catch {
          return null;
        }
      });
      const rt = await run("redlock v5, retryDelay 10, jitter 5, retryCount -1", clients, async () => {
        const t = performance.now();
        const l = await redlockTight.acquire([`c:rt:${clients}`], 30000);
        const w = performance.now() - t;
        await l.release();
        return w;
      });
      cRows.push(row(lib), row(rd, lib), row(rt, lib));
    }

    const head = "| case | clients | acquisitions/s | p50 wait ms | p99 wait ms | failed |\n|---|---|---|---|---|---|";
    rows.push(
      `# redis-lock-client benchmark (${version ? version[1] + " " + version[2] : "server"}, node ${process.version}, ${SECONDS} s per row)`,
      "",
      "## (a) uncontended acquire + release, 1 client (target: library within 10% of bare)",
      "",
      head,
      row(bareA),
      row(libA, bareA),
      "",
      "## (b) one hot lock, 16 clients (target: library >= 0.9x bare)",
      "",
      head,
      row(bareB),
      row(libB, bareB),
      "",
      "## (c) library vs node-redlock v5 (npm `redlock`) on one hot lock (ratio: vs the library)",
      "",
      head,
      ...cRows,
      "",
    );
  } finally {
    await session.close();
    client.disconnect();
    await server.stop();
  }
  const text = rows.join("\n");
  process.stdout.write(text + "\n");
  if (out) writeFileSync(out, text + "\n");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
