"""Benchmark of redis-lock-client (run through bench.sh).

(a) uncontended acquire+release, library vs the same bare commands through redis-py;
(b) one hot lock at 16 threads, library vs bare;
(c) library vs redis-py's own Lock (polling, sleep=0.1 and sleep=0.001) at 1, 16, 64 threads.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

from redis_lock_client import Session

REPO = Path(__file__).resolve().parents[2]
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
MODULE = os.environ.get("LOCK_MODULE", str(REPO / "target" / "release" / "liblock.so"))
DURATION = float(os.environ.get("BENCH_SECONDS", "3"))


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


def run_threads(n, cycle):
    """Each of n threads runs cycle() (acquire, release; returns its wait in s)
    until DURATION passes. Returns (acquisitions/s, waits)."""
    stop = threading.Event()
    waits = [[] for _ in range(n)]
    counts = [0] * n
    start = threading.Barrier(n + 1)

    def worker(i):
        start.wait()
        while not stop.is_set():
            waits[i].append(cycle())
            counts[i] += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.monotonic()
    time.sleep(DURATION)
    stop.set()
    done = sum(counts)
    elapsed = time.monotonic() - t0
    for t in threads:
        t.join(30)
    return done / elapsed, [w for ws in waits for w in ws]


def interleaved(n, lib, bare, rounds=3):
    """lib and bare alternately, ``rounds`` runs of DURATION/rounds each (the
    machine's noise hits both alike); the median run of each."""
    global DURATION
    full, DURATION = DURATION, DURATION / rounds
    try:
        runs = {"lib": [], "bare": []}
        for _ in range(rounds):
            runs["lib"].append(run_threads(n, lib))
            runs["bare"].append(run_threads(n, bare))
    finally:
        DURATION = full

    def median(rs):
        rs = sorted(rs, key=lambda r: r[0])
        return rs[len(rs) // 2]

    return median(runs["lib"]), median(runs["bare"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("BENCH_OUT"))
    args = ap.parse_args()
    proc, port, d = start_server()
    rows = []
    try:
        client = redis.Redis(port=port, max_connections=300, socket_timeout=None)
        session = Session(client)
        tok = session.token

        # (a) uncontended
        lib_lock = session.lock("a")

        def lib_cycle():
            t = time.perf_counter()
            h = lib_lock.acquire()
            w = time.perf_counter() - t
            h.release()
            return w

        owner = f"{tok}:bare"

        def bare_cycle(key="a"):
            t = time.perf_counter()
            client.execute_command("LOCK.ACQUIRE", key, owner, "PX", 30000, "FENCE", "SESSION", tok, "BLOCK", 0)
            w = time.perf_counter() - t
            client.execute_command("LOCK.RELEASE", key, owner)
            return w

        (lib, la), (bare, ba) = interleaved(1, lib_cycle, bare_cycle)
        rows.append(("(a) uncontended, 1 thread", "library", lib, pct(la, 50), pct(la, 99)))
        rows.append(("(a) uncontended, 1 thread", "bare commands", bare, pct(ba, 50), pct(ba, 99)))
        ratio_a = lib / bare

        # (b) hot lock at 16 threads
        hot = session.lock("b")

        def lib_hot():
            t = time.perf_counter()
            h = hot.acquire()
            w = time.perf_counter() - t
            h.release()
            return w

        ids = iter(range(10**9))
        tl = threading.local()

        def bare_hot():
            if not hasattr(tl, "owner"):
                tl.owner = f"{tok}:bare{next(ids)}"
            t = time.perf_counter()
            client.execute_command("LOCK.ACQUIRE", "b", tl.owner, "PX", 30000, "FENCE", "SESSION", tok, "BLOCK", 0)
            w = time.perf_counter() - t
            client.execute_command("LOCK.RELEASE", "b", tl.owner)
            return w

        (lib_b, lw), (bare_b, bw) = interleaved(16, lib_hot, bare_hot)
        rows.append(("(b) hot lock, 16 threads", "library", lib_b, pct(lw, 50), pct(lw, 99)))
        rows.append(("(b) hot lock, 16 threads", "bare commands", bare_b, pct(bw, 50), pct(bw, 99)))
        ratio_b = lib_b / bare_b

        # (c) vs redis-py's Lock
        for n in (1, 16, 64):
            key = f"c{n}"
            lk = session.lock(key)

            def lib_c(lk=lk):
                t = time.perf_counter()
                h = lk.acquire()
                w = time.perf_counter() - t
                h.release()
                return w

            rate, ws = run_threads(n, lib_c)
            rows.append((f"(c) one hot lock, {n} threads", "redis-lock-client", rate, pct(ws, 50), pct(ws, 99)))
            for sleep in (0.1, 0.001):
                rl = client.lock(f"{key}-{sleep}", timeout=10, sleep=sleep)

                def py_c(rl=rl):
                    t = time.perf_counter()
                    rl.acquire()
                    w = time.perf_counter() - t
                    rl.release()
                    return w

                rate, ws = run_threads(n, py_c)
                rows.append((f"(c) one hot lock, {n} threads", f"redis-py Lock sleep={sleep}", rate,
                             pct(ws, 50), pct(ws, 99)))
        session.close()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)

    def ms(x):
        return "" if x is None else f"{x * 1000:.2f}"

    v = subprocess.run([SERVER, "--version"], capture_output=True, text=True).stdout.split()[:3]
    lines = [
        f"redis-lock-client bench: {' '.join(v)}, Python {sys.version.split()[0]}, redis-py {redis.__version__}, "
        f"{DURATION:.0f} s per row, {os.cpu_count()} cores",
        "",
        "| scenario | client | acquisitions/s | p50 wait ms | p99 wait ms |",
        "|---|---|---:|---:|---:|",
    ]
    for sc, who, rate, p50, p99 in rows:
        lines.append(f"| {sc} | {who} | {rate:,.0f} | {ms(p50)} | {ms(p99)} |")
    lines += ["", f"library / bare: uncontended {ratio_a:.2f}x (target >= 0.9), hot 16 threads {ratio_b:.2f}x (target >= 0.9)"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
