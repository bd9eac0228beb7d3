"""Benchmark of redis-lock-client (run through bench.sh).

(a) uncontended acquire+release, library vs the same bare commands through redis-py;
(b) one hot lock at 16 threads (16 tasks for asyncio), library vs bare;
(c) library vs redis-py's own Lock (polling, sleep=0.1 and sleep=0.001) at 1, 16, 64 threads.

(a) and (b), sync and asyncio, are measured in pairs: REPS repetitions, each one run of the
library and one of the bare commands (order alternating), RUN_SECONDS each after WARM_SECONDS
of warm-up, so that the machine's slow spells fall on both alike. Reported: the median rate of
each, and the median of the per-repetition ratios library/bare with its min-max range.

"Bare" is what the library sends, sent through the same client object with nothing around it:
``LOCK.ACQUIRE k <owner> PX 30000 FENCE SESSION <token> BLOCK 0`` on a connection of the
client's pool (redis-py's ``execute_command``, as the library's wait takes one from the pool),
then ``LOCK.RELEASE k <owner>`` through the client, a fresh owner per cycle.
"""

import argparse
import asyncio
import itertools
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis
import redis.asyncio as aredis

from redis_lock_client import Session
from redis_lock_client.asyncio import Session as AsyncSession

REPO = Path(__file__).resolve().parents[2]
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
MODULE = os.environ.get("LOCK_MODULE", str(REPO / "target" / "release" / "liblock.so"))
REPS = int(os.environ.get("BENCH_REPS", "7"))
RUN_SECONDS = float(os.environ.get("BENCH_RUN_SECONDS", "1.5"))
WARM_SECONDS = float(os.environ.get("BENCH_WARM_SECONDS", "0.2"))
#: seconds per row of (c)
C_SECONDS = float(os.environ.get("BENCH_SECONDS", "2"))
LEASE = 30000


def start_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = tempfile.mkdtemp(prefix="lockpy-bench-")
    proc = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", d, "--loadmodule", MODULE],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            if redis.Redis(port=port).ping():
                return proc, port, d
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("server did not start")
            time.sleep(0.02)


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def run_threads(n, cycle, seconds, warm=0.0):
    """n threads run cycle() (acquire, release; returns its wait in s) for
    warm + seconds; only the last ``seconds`` count. Returns (acquisitions/s, waits)."""
    stop = threading.Event()
    waits = [[] for _ in range(n)]
    start = threading.Barrier(n + 1)

    def worker(i):
        mine = waits[i]
        start.wait()
        while not stop.is_set():
            mine.append(cycle())

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    start.wait()
    if warm:
        time.sleep(warm)
    marks = [len(w) for w in waits]
    t0 = time.monotonic()
    time.sleep(seconds)
    ends = [len(w) for w in waits]
    elapsed = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join(30)
    counted = [w for ws, a, b in zip(waits, marks, ends) for w in ws[a:b]]
    return len(counted) / elapsed, counted


async def run_tasks(n, cycle, seconds, warm=0.0):
    """The asyncio twin of run_threads: n tasks of ``await cycle()``."""
    stop = False
    waits = [[] for _ in range(n)]

    async def worker(i):
        mine = waits[i]
        while not stop:
            mine.append(await cycle())

    tasks = [asyncio.ensure_future(worker(i)) for i in range(n)]
    if warm:
        await asyncio.sleep(warm)
    marks = [len(w) for w in waits]
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    ends = [len(w) for w in waits]
    elapsed = time.monotonic() - t0
    stop = True
    await asyncio.gather(*tasks)
    counted = [w for ws, a, b in zip(waits, marks, ends) for w in ws[a:b]]
    return len(counted) / elapsed, counted


class Pair:
    """REPS runs of lib and bare, interleaved; the medians and per-repetition ratios."""

    def __init__(self, scenario):
        self.scenario = scenario
        self.lib, self.bare, self.ratios = [], [], []
        self.lib_waits, self.bare_waits = [], []

    def add(self, lib, bare):
        self.lib.append(lib[0])
        self.bare.append(bare[0])
        self.ratios.append(lib[0] / bare[0])
        self.lib_waits += lib[1]
        self.bare_waits += bare[1]
        print(f"  {self.scenario}: library {lib[0]:,.0f}/s, bare {bare[0]:,.0f}/s, "
              f"{lib[0] / bare[0]:.2f}x", file=sys.stderr, flush=True)

    def rows(self):
        return [
            (self.scenario, "library", statistics.median(self.lib), pct(self.lib_waits, 50), pct(self.lib_waits, 99)),
            (self.scenario, "bare commands", statistics.median(self.bare), pct(self.bare_waits, 50),
             pct(self.bare_waits, 99)),
        ]

    def ratio(self):
        return statistics.median(self.ratios), min(self.ratios), max(self.ratios)


def paired(scenario, n, lib, bare):
    run_threads(n, lib, WARM_SECONDS)
    run_threads(n, bare, WARM_SECONDS)
    p = Pair(scenario)
    for i in range(REPS):
        if i % 2 == 0:
            rl = run_threads(n, lib, RUN_SECONDS, WARM_SECONDS)
            rb = run_threads(n, bare, RUN_SECONDS, WARM_SECONDS)
        else:
            rb = run_threads(n, bare, RUN_SECONDS, WARM_SECONDS)
            rl = run_threads(n, lib, RUN_SECONDS, WARM_SECONDS)
        p.add(rl, rb)
    return p


async def apaired(scenario, n, lib, bare):
    await run_tasks(n, lib, WARM_SECONDS)
    await run_tasks(n, bare, WARM_SECONDS)
    p = Pair(scenario)
    for i in range(REPS):
        if i % 2 == 0:
            rl = await run_tasks(n, lib, RUN_SECONDS, WARM_SECONDS)
            rb = await run_tasks(n, bare, RUN_SECONDS, WARM_SECONDS)
        else:
            rb = await run_tasks(n, bare, RUN_SECONDS, WARM_SECONDS)
            rl = await run_tasks(n, lib, RUN_SECONDS, WARM_SECONDS)
        p.add(rl, rb)
    return p


def sync_pairs(client, session):
    tok = session.token
    ids = itertools.count(1)
    perf = time.perf_counter

    def lib_cycle(lock):
        def cycle():
            t = perf()
            h = lock.acquire()
            w = perf() - t
            h.release()
            return w

        return cycle

    def bare_cycle(key):
        def cycle():
            owner = f"{tok}:b{next(ids)}"
            t = perf()
            client.execute_command("LOCK.ACQUIRE", key, owner, "PX", LEASE, "FENCE", "SESSION", tok, "BLOCK", 0)
            w = perf() - t
            client.execute_command("LOCK.RELEASE", key, owner)
            return w

        return cycle

    a = paired("(a) uncontended, 1 thread", 1, lib_cycle(session.lock("a")), bare_cycle("a"))
    b = paired("(b) hot lock, 16 threads", 16, lib_cycle(session.lock("b")), bare_cycle("b"))
    return [a, b]


async def async_pairs(port):
    client = aredis.Redis(port=port, max_connections=300, socket_timeout=None)
    session = await AsyncSession(client).start()
    tok = session.token
    ids = itertools.count(1)
    perf = time.perf_counter
    try:
        def lib_cycle(lock):
            async def cycle():
                t = perf()
                h = await lock.acquire()
                w = perf() - t
                await h.release()
                return w

            return cycle

        def bare_cycle(key):
            async def cycle():
                owner = f"{tok}:b{next(ids)}"
                t = perf()
                await client.execute_command("LOCK.ACQUIRE", key, owner, "PX", LEASE, "FENCE", "SESSION", tok,
                                             "BLOCK", 0)
                w = perf() - t
                await client.execute_command("LOCK.RELEASE", key, owner)
                return w

            return cycle

        a = await apaired("(a) asyncio uncontended, 1 task", 1, lib_cycle(session.lock("aa")), bare_cycle("aa"))
        b = await apaired("(b) asyncio hot lock, 16 tasks", 16, lib_cycle(session.lock("ab")), bare_cycle("ab"))
        return [a, b]
    finally:
        await session.close()
        await client.aclose()


def vs_redis_py(client, session):
    rows = []
    for n in (1, 16, 64):
        key = f"c{n}"
        lk = session.lock(key)

        def lib_c(lk=lk):
            t = time.perf_counter()
            h = lk.acquire()
            w = time.perf_counter() - t
            h.release()
            return w

        rate, ws = run_threads(n, lib_c, C_SECONDS, WARM_SECONDS)
        rows.append((f"(c) one hot lock, {n} threads", "redis-lock-client", rate, pct(ws, 50), pct(ws, 99)))
        for sleep in (0.1, 0.001):
            rl = client.lock(f"{key}-{sleep}", timeout=10, sleep=sleep)

            def py_c(rl=rl):
                t = time.perf_counter()
                rl.acquire()
                w = time.perf_counter() - t
                rl.release()
                return w

            rate, ws = run_threads(n, py_c, C_SECONDS, WARM_SECONDS)
            rows.append((f"(c) one hot lock, {n} threads", f"redis-py Lock sleep={sleep}", rate,
                         pct(ws, 50), pct(ws, 99)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("BENCH_OUT"))
    ap.add_argument("--only", choices=["sync", "asyncio", "pairs"], help="a part of the bench (profiling)")
    args = ap.parse_args()
    proc, port, d = start_server()
    pairs, rows = [], []
    try:
        client = redis.Redis(port=port, max_connections=300, socket_timeout=None)
        if args.only in (None, "sync", "pairs"):
            session = Session(client)
            pairs += sync_pairs(client, session)
            session.close()
        if args.only in (None, "asyncio", "pairs"):
            pairs += asyncio.run(async_pairs(port))
        if args.only is None:
            session = Session(client)
            rows = vs_redis_py(client, session)
            session.close()
        client.close()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)

    def ms(x):
        return "" if x is None else f"{x * 1000:.2f}"

    v = subprocess.run([SERVER, "--version"], capture_output=True, text=True).stdout.split()[:3]
    lines = [
        f"redis-lock-client bench: {' '.join(v)}, Python {sys.version.split()[0]}, redis-py {redis.__version__}, "
        f"{os.cpu_count()} cores",
        "",
        f"(a), (b): {REPS} repetitions of one library run and one bare run (order alternating), "
        f"{RUN_SECONDS:g} s each after {WARM_SECONDS:g} s warm-up; rates are medians of the runs, "
        "ratios the median of the per-repetition ratios library/bare (min-max); waits pooled over the runs. "
        f"(c): one run of {C_SECONDS:g} s per row.",
        "",
        "| scenario | client | acquisitions/s | p50 wait ms | p99 wait ms |",
        "|---|---|---:|---:|---:|",
    ]
    for p in pairs:
        for sc, who, rate, p50, p99 in p.rows():
            lines.append(f"| {sc} | {who} | {rate:,.0f} | {ms(p50)} | {ms(p99)} |")
    for sc, who, rate, p50, p99 in rows:
        lines.append(f"| {sc} | {who} | {rate:,.0f} | {ms(p50)} | {ms(p99)} |")
    lines += ["", "| library / bare (target >= 0.9x) | median ratio | min | max |", "|---|---:|---:|---:|"]
    for p in pairs:
        med, lo, hi = p.ratio()
        lines.append(f"| {p.scenario} | {med:.2f}x | {lo:.2f}x | {hi:.2f}x |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
