// Benchmark: the library vs the bare commands through the same client (ioredis and node-redis),
// and vs node-redlock v5, on one redis-server with the module (started here on a free port).
// "Clients" are concurrent async loops in this process. Prints a markdown table and writes it to
// --out FILE / $BENCH_OUT.
//
// (a), (b) and (b') (the same through using(), ioredis only) are measured in pairs: REPS
// repetitions, each one run of the library and one of the bare commands (order alternating),
// RUN_SECONDS each after WARM_SECONDS of warm-up, so that the machine's slow spells fall on both
// alike. Reported: the median rate of each, and the median of the per-repetition ratios
// library/bare with its min-max range.
//
// "Bare" is what the library sends, sent through the same client with nothing around it:
// `LOCK.ACQUIRE k <owner> PX 30000 BLOCK 0 FENCE SESSION <token>` on a dedicated connection
// duplicated from the client with the options the library gives its waiting connections (one per
// concurrent client, as the library's wait pool keeps), then `LOCK.RELEASE k <owner>` through the
// client itself; a fresh owner per cycle, as the library's.

import { writeFileSync } from "node:fs";

import IORedis from "ioredis";
import { createClient } from "redis";
import Redlock from "redlock";

import { Session } from "../src";
import { Server } from "../test/helpers";

const REPS = Number(process.env.BENCH_REPS || 7);
const RUN_SECONDS = Number(process.env.BENCH_RUN_SECONDS || 1.5);
const WARM_SECONDS = Number(process.env.BENCH_WARM_SECONDS || 0.2);
/** Seconds per row of (c). */
const C_SECONDS = Number(process.env.BENCH_SECONDS || 2);
const LEASE = "30000";

interface Result {
  rate: number;
  failures: number;
  waits: number[];
}

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/**
 * Runs `clients` loops of `cycle` for warm + seconds; only the last `seconds` count. `cycle` returns
 * the ms it waited for the lock, or null on failure.
 */
async function run(clients: number, cycle: (i: number) => Promise<number | null>, seconds: number, warm: number): Promise<Result> {
  const waits: number[] = [];
  let failures = 0;
  let stop = false;
  const loops = Array.from({ length: clients }, async (_, i) => {
    while (!stop) {
      const w = await cycle(i);
      if (w === null) failures++;
      else waits.push(w);
    }
  });
  if (warm > 0) await new Promise((r) => setTimeout(r, warm * 1000));
  const mark = waits.length;
  const failMark = failures;
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const end = waits.length;
  const failEnd = failures;
  const elapsed = (performance.now() - t0) / 1000;
  stop = true;
  await Promise.all(loops);
  const counted = waits.slice(mark, end);
  return { rate: counted.length / elapsed, failures: failEnd - failMark, waits: counted };
}

interface Pair {
  scenario: string;
  lib: number[];
  bare: number[];
  ratios: number[];
  libWaits: number[];
  bareWaits: number[];
}

type Cycle = (i: number) => Promise<number | null>;

async function paired(scenario: string, clients: number, lib: Cycle, bare: Cycle): Promise<Pair> {
  await run(clients, lib, WARM_SECONDS, 0);
  await run(clients, bare, WARM_SECONDS, 0);
  const p: Pair = { scenario, lib: [], bare: [], ratios: [], libWaits: [], bareWaits: [] };
  for (let i = 0; i < REPS; i++) {
    let l: Result, b: Result;
    if (i % 2 === 0) {
      l = await run(clients, lib, RUN_SECONDS, WARM_SECONDS);
      b = await run(clients, bare, RUN_SECONDS, WARM_SECONDS);
    } else {
      b = await run(clients, bare, RUN_SECONDS, WARM_SECONDS);
      l = await run(clients, lib, RUN_SECONDS, WARM_SECONDS);
    }
    p.lib.push(l.rate);
    p.bare.push(b.rate);
    p.ratios.push(l.rate / b.rate);
    for (const w of l.waits) p.libWaits.push(w);
    for (const w of b.waits) p.bareWaits.push(w);
    process.stderr.write(
      `  ${scenario}: library ${l.rate.toFixed(0)}/s, bare ${b.rate.toFixed(0)}/s, ${(l.rate / b.rate).toFixed(2)}x\n`,
    );
  }
  p.libWaits.sort((a, b) => a - b);
  p.bareWaits.sort((a, b) => a - b);
  return p;
}

function pairRows(p: Pair): string[] {
  const r = (who: string, rates: number[], waits: number[]) =>
    `| ${p.scenario} | ${who} | ${median(rates).toFixed(0)} | ${pct(waits, 50).toFixed(2)} | ${pct(waits, 99).toFixed(2)} |`;
  return [r("library", p.lib, p.libWaits), r("bare commands", p.bare, p.bareWaits)];
}

function ratioRow(p: Pair): string {
  return `| ${p.scenario} | ${median(p.ratios).toFixed(2)}x | ${Math.min(...p.ratios).toFixed(2)}x | ${Math.max(...p.ratios).toFixed(2)}x |`;
}

/** The options the library gives its dedicated (waiting) ioredis connections (src/adapter.ts). */
const IOREDIS_DEDICATED = {
  lazyConnect: true,
  retryStrategy: () => null,
  enableOfflineQueue: false,
  autoResubscribe: false,
  autoResendUnfulfilledCommands: false,
  maxRetriesPerRequest: 0,
  commandTimeout: undefined,
  reconnectOnError: null,
};

interface Bare {
  name: string;
  client: object;
  /** A dedicated connection (as the library's wait pool opens), its command function. */
  dedicated(): Promise<{ send: (args: string[]) => Promise<unknown>; close: () => void }>;
  /** A command through the client itself. */
  send(args: string[]): Promise<unknown>;
  close(): Promise<void>;
}

async function ioredisBare(port: number): Promise<Bare> {
  const client = new IORedis({ port, host: "127.0.0.1" });
  return {
    name: "ioredis",
    client,
    async dedicated() {
      const r = client.duplicate(IOREDIS_DEDICATED);
      await r.connect();
      return { send: (a) => r.call(...(a as [string, ...string[]])), close: () => r.disconnect(false) };
    },
    send: (a) => client.call(...(a as [string, ...string[]])),
    close: async () => void client.disconnect(),
  };
}

async function nodeRedisBare(port: number): Promise<Bare> {
  const client = createClient({ socket: { port, host: "127.0.0.1" } });
  client.on("error", () => {});
  await client.connect();
  return {
    name: "node-redis",
    client,
    async dedicated() {
      // The library's dedicated node-redis connections (src/adapter.ts).
      const r = client.duplicate({
        socket: { ...(client.options?.socket ?? {}), reconnectStrategy: false },
        disableOfflineQueue: true,
        pingInterval: undefined,
      });
      r.on("error", () => {});
      await r.connect();
      return { send: (a) => r.sendCommand(a), close: () => void r.destroy() };
    },
    send: (a) => client.sendCommand(a),
    close: async () => void (await client.close()),
  };
}

async function pairsFor(bare: Bare): Promise<Pair[]> {
  const session = await Session.open(bare.client);
  const tok = session.token;
  let n = 0;
  const conns = await Promise.all(Array.from({ length: 16 }, () => bare.dedicated()));
  try {
    const bareCycle =
      (key: string): Cycle =>
      async (i) => {
        const o = `${tok}:b${++n}`;
        const t = performance.now();
        await conns[i].send(["LOCK.ACQUIRE", key, o, "PX", LEASE, "BLOCK", "0", "FENCE", "SESSION", tok]);
        const w = performance.now() - t;
        await bare.send(["LOCK.RELEASE", key, o]);
        return w;
      };
    // (a) uncontended acquire + release, one client
    const a = await paired(
      `(a) ${bare.name}: lock(k).acquire() + release(), 1 client`,
      1,
      async () => {
        const t = performance.now();
        const h = await session.lock("a").acquire();
        const w = performance.now() - t;
        await h.release();
        return w;
      },
      bareCycle("a"),
    );
    // (b) one hot lock, 16 clients, each: acquire with BLOCK, release, repeat
    const b = await paired(
      `(b) ${bare.name}: lock(k).acquire() + release(), hot lock, 16 clients`,
      16,
      async () => {
        const t = performance.now();
        const h = await session.lock("b").acquire();
        const w = performance.now() - t;
        await h.release();
        return w;
      },
      bareCycle("b"),
    );
    if (bare.name !== "ioredis") return [a, b];
    // (b') the same through using(), which also gives the callback the hold's AbortSignal
    const bu = await paired(
      `(b') ${bare.name}: using(k, fn), hot lock, 16 clients`,
      16,
      async () => {
        const t = performance.now();
        let w = 0;
        await session.using("bu", async () => {
          w = performance.now() - t;
        });
        return w;
      },
      bareCycle("bu"),
    );
    return [a, b, bu];
  } finally {
    for (const c of conns) c.close();
    await session.close();
  }
}

async function vsRedlock(port: number): Promise<string[]> {
  const client = new IORedis({ port, host: "127.0.0.1" });
  const session = await Session.open(client);
  const redlockDefault = new Redlock([client]);
  const redlockTight = new Redlock([client], { retryCount: -1, retryDelay: 10, retryJitter: 5 });
  redlockDefault.on("error", () => {});
  redlockTight.on("error", () => {});
  const row = (name: string, clients: number, r: Result, vs?: Result) => {
    r.waits.sort((a, b) => a - b);
    const ratio = vs ? ` (${(r.rate / vs.rate).toFixed(2)}x)` : "";
    return `| ${name} | ${clients} | ${r.rate.toFixed(0)}${ratio} | ${pct(r.waits, 50).toFixed(2)} | ${pct(r.waits, 99).toFixed(2)} | ${r.failures} |`;
  };
  const rows: string[] = [];
  try {
    for (const clients of [1, 16, 64]) {
      const lib = await run(
        clients,
        async () => {
          const t = performance.now();
          let w = 0;
          await session.using(`c:lib:${clients}`, async () => {
            w = performance.now() - t;
          });
          return w;
        },
        C_SECONDS,
        WARM_SECONDS,
      );
      const rd = await run(
        clients,
        async () => {
          const t = performance.now();
          try {
            const l = await redlockDefault.acquire([`c:rd:${clients}`], 30000);
            const w = performance.now() - t;
            await l.release();
            return w;
          } catch {
            return null;
          }
        },
        C_SECONDS,
        WARM_SECONDS,
      );
      const rt = await run(
        clients,
        async () => {
          const t = performance.now();
          const l = await redlockTight.acquire([`c:rt:${clients}`], 30000);
          const w = performance.now() - t;
          await l.release();
          return w;
        },
        C_SECONDS,
        WARM_SECONDS,
      );
      rows.push(
        row("library (using)", clients, lib),
        row("redlock v5, defaults (retryCount 10, retryDelay 200, jitter 100)", clients, rd, lib),
        row("redlock v5, retryDelay 10, jitter 5, retryCount -1", clients, rt, lib),
      );
      process.stderr.write(`  (c) ${clients} clients: library ${lib.rate.toFixed(0)}/s, redlock ${rd.rate.toFixed(0)}/s, ${rt.rate.toFixed(0)}/s\n`);
    }
  } finally {
    await session.close();
    client.disconnect();
  }
  return rows;
}

async function main(): Promise<void> {
  const outIdx = process.argv.indexOf("--out");
  const out = outIdx > 0 ? process.argv[outIdx + 1] : process.env.BENCH_OUT;
  const onlyIdx = process.argv.indexOf("--only");
  const only = onlyIdx > 0 ? process.argv[onlyIdx + 1] : undefined; // ioredis | node-redis | pairs
  const server = await Server.start();
  const pairs: Pair[] = [];
  let cRows: string[] = [];
  let version: RegExpMatchArray | null = null;
  try {
    const admin = server.admin();
    version = String(await admin.info("server")).match(/(redis|valkey)_version:(\S+)/);
    admin.disconnect();
    for (const make of [ioredisBare, nodeRedisBare]) {
      const bare = await make(server.port);
      try {
        if (!only || only === "pairs" || only === bare.name) pairs.push(...(await pairsFor(bare)));
      } finally {
        await bare.close();
      }
    }
    if (!only) cRows = await vsRedlock(server.port);
  } finally {
    await server.stop();
  }
  const nodeRedisVersion = require("redis/package.json").version as string;
  const ioredisVersion = require("ioredis/package.json").version as string;
  const text = [
    `# redis-lock-client benchmark (${version ? version[1] + " " + version[2] : "server"}, node ${process.version}, ioredis ${ioredisVersion}, node-redis ${nodeRedisVersion})`,
    "",
    `(a), (b), (b'): ${REPS} repetitions of one library run and one bare run (order alternating), ${RUN_SECONDS} s each after ${WARM_SECONDS} s warm-up; rates are medians of the runs, ratios the median of the per-repetition ratios library/bare (min-max); waits pooled over the runs. (c): one run of ${C_SECONDS} s per row.`,
    "",
    "## (a) uncontended acquire + release, 1 client; (b) one hot lock, 16 clients; (b') the same through using()",
    "",
    "| scenario | client | acquisitions/s | p50 wait ms | p99 wait ms |",
    "|---|---|---:|---:|---:|",
    ...pairs.flatMap(pairRows),
    "",
    "| library / bare (target >= 0.9x) | median ratio | min | max |",
    "|---|---:|---:|---:|",
    ...pairs.map(ratioRow),
    "",
    ...(cRows.length
      ? [
          "## (c) library vs node-redlock v5 (npm `redlock`) on one hot lock, ioredis (ratio: vs the library)",
          "",
          "| case | clients | acquisitions/s | p50 wait ms | p99 wait ms | failed |",
          "|---|---|---|---|---|---|",
          ...cRows,
          "",
        ]
      : []),
  ].join("\n");
  process.stdout.write(text + "\n");
  if (out) writeFileSync(out, text + "\n");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
