#!/usr/bin/env python3
"""Instructions per operation, module against Redis's own floors (callgrind).

Starts redis-server (or $REDIS_SERVER) with the module under
`valgrind --tool=callgrind`, and for each case zeroes the counters, runs a
fixed number of operations from a deterministic client, dumps, and divides:

- uncontended: `LOCK.ACQUIRE k:<rand> o PX 30000` against `SET k:<rand> o NX
  PX 30000` (redis-benchmark -c 50 -P 16, fresh keys, as S1b);
- hand-off, for each client count: N clients loop acquire + release on one
  key (`LOCK.ACQUIRE hot cI PX 30000 BLOCK 10000` / `LOCK.RELEASE hot cI`)
  against `BLPOP hot 10` / `RPUSH hot t` (S2's blpop): per cycle one
  acquire that waits and one release that hands the lock (the token) on;
  the same through a one-permit semaphore (`SEM.ACQUIRE` / `SEM.RELEASE`);
  and through the floor module, loaded next to the lock module
  (`FLOOR.ACQUIRE hot 10000` / `FLOOR.RELEASE hot`: libfloor.so, bench/floor,
  S2's module-floor: a module that only blocks and unblocks, the module
  API's own hand-off; left out, with a note, when it is not built).

Prints a table per path: instructions per operation by part (inclusive
costs of Redis's and the module's functions). Instructions, not time: the
kernel's side (TCP, the pipe a module unblock writes) is not counted; see
`perf` for that. Usage:

    scripts/profile-floor.py [--module PATH] [--floor-module PATH] [--requests 100000]
                             [--clients 16,64] [--cycles 20000] [--keep DIR]
"""

import argparse
import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


async def read_reply(r):
    line = await r.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind in (b"+", b":"):
        return rest
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else (await r.readexactly(n + 2))[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [await read_reply(r) for _ in range(n)]
    raise RuntimeError(f"bad reply {line!r}")


def command(port, *args):
    async def run():
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(enc(*args))
        reply = await read_reply(r)
        w.close()
        return reply

    return asyncio.run(run())


async def cycler(port, i, protocol, cycles):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    me = b"c%d" % i
    if protocol == "module":
        acquire = enc("LOCK.ACQUIRE", "hot", me, "PX", "30000", "BLOCK", "10000")
        release, released = enc("LOCK.RELEASE", "hot", me), b"0"
    elif protocol == "semaphore":
        acquire = enc("SEM.ACQUIRE", "hot", me, "PX", "30000", "BLOCK", "10000")
        release, released = enc("SEM.RELEASE", "hot", me), b"0"
    elif protocol == "floor":
        acquire = enc("FLOOR.ACQUIRE", "hot", "10000")
        release, released = enc("FLOOR.RELEASE", "hot"), b"1"
    else:
        acquire = enc("BLPOP", "hot", "10")
        release, released = enc("RPUSH", "hot", "t"), b"1"
    for _ in range(cycles):
        while True:
            w.write(acquire)
            if await read_reply(r) is not None:
                break
        w.write(release)
        got = await read_reply(r)
        if got != released:
            raise RuntimeError(f"{protocol} release answered {got!r}")
    w.close()


def cycles(port, protocol, clients, per_client):
    async def run():
        await asyncio.gather(
            *(cycler(port, i, protocol, per_client) for i in range(clients))
        )

    asyncio.run(run())


class Server:
    def __init__(self, server, modules, out):
        """modules: (path, [load arguments]) of each module to load."""
        self.port = free_port()
        self.out = out
        loads = []
        for path, args in modules:
            loads += ["--loadmodule", path, *args]
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p",
             server, "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", out, *loads],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while True:
            try:
                if command(self.port, "PING") == b"PONG":
                    break
            except OSError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                self.stop()
                sys.exit("server did not start")
            time.sleep(0.2)
        self.dumps = 0

    def measure(self, name, run):
        """Ir of `run()` alone: {function: inclusive Ir}, with 'TOTAL' and
        'SELF:<object>' (self cost of each object's own code)."""
        subprocess.run(["callgrind_control", "-z", str(self.proc.pid)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run()
        subprocess.run(["callgrind_control", "-d", name, str(self.proc.pid)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.dumps += 1
        path = f"{self.out}/cg.{self.proc.pid}.{self.dumps}"
        costs = {}
        for inclusive in ("yes", "no"):
            text = subprocess.run(
                ["callgrind_annotate", f"--inclusive={inclusive}", "--threshold=100", path],
                check=True, capture_output=True, text=True).stdout
            for line in text.splitlines():
                m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$", line)
                if not m:
                    continue
                ir, what = int(m.group(1).replace(",", "")), m.group(2)
                if what == "PROGRAM TOTALS":
                    costs["TOTAL"] = ir
                    continue
                fm = re.match(r"[^:]*:(.*?) \[(.*)\]$", what)
                if not fm:
                    continue
                if inclusive == "yes":
                    costs[fm.group(1)] = costs.get(fm.group(1), 0) + ir
                else:
                    # Self cost in a module's object: its own code.
                    obj = "SELF:" + os.path.basename(fm.group(2))
                    costs[obj] = costs.get(obj, 0) + ir
        return costs

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


# Module API calls listed one by one (inclusive; nested RM_ calls are few
# and named where they nest).
API = ["RM_OpenKey", "RM_CloseKey", "RM_KeyType", "RM_ValueLength", "RM_HashGet",
       "RM_HashSet", "RM_ScanCursorCreate", "RM_ScanKey", "RM_ScanCursorDestroy",
       "RM_SetAbsExpire", "RM_GetAbsExpire", "RM_DeleteKey",
       "RM_NotifyKeyspaceEvent", "RM_SignalModifiedKey", "RM_Replicate",
       "RM_ReplicateVerbatim", "RM_PublishMessage", "RM_GetContextFlags",
       "RM_StringPtrLen", "RM_CreateString", "RM_FreeString", "RM_Milliseconds",
       "RM_GetSelectedDb", "RM_BlockClient", "RM_SetDisconnectCallback",
       "RM_UnblockClient", "RM_GetBlockedClientPrivateData", "RM_GetClientId",
       "RM_ReplyWithLongLong", "RM_ReplyWithNull", "RM_CreateTimer", "RM_StopTimer"]
ALLOC = ["RM_Alloc", "RM_Free", "RM_Realloc", "RM_Calloc"]


# Per module: its object (the profiled copy), the functions Redis's module
# dispatch calls in it, and its name in the rows.
LOCK = ("liblock-profiled.so", ["lock::ffi::command::on_command"], "liblock.so")
FLOOR = ("libfloor-profiled.so",
         ["floor::ffi::floor_acquire", "floor::ffi::floor_release"], "libfloor.so")


def rows_for(c, ops, command_fn, module=LOCK):
    get = lambda f: c.get(f, 0)
    obj, entries, name = module
    blocked = get("moduleHandleBlockedClients")
    served = get("handleClientsBlockedOnKeys")
    command = sum(get(f) for f in command_fn)
    rows = [
        ("total", get("TOTAL")),
        ("event loop, read, parse, reply write (outside processCommand)",
         get("TOTAL") - get("processCommand") - blocked),
        ("processCommand before call() (lookup, checks)",
         get("processCommand") - get("call") - served),
        ("call() around the command (stats, propagation)", get("call") - command),
    ]
    rows += [(f, get(f)) for f in command_fn]
    if served:
        rows.append(("handleClientsBlockedOnKeys (BLPOP waiter served)", served))
    if blocked:
        rows.append(("moduleHandleBlockedClients (unblock, reply callback)", blocked))
    if get("RedisModuleCommandDispatcher"):
        rows.append(("of the module's: Redis's module dispatch (context)",
                     get("RedisModuleCommandDispatcher") - sum(get(f) for f in entries)))
        rows += [("  " + f, get(f)) for f in API if get(f)]
        rows.append(("  Rust allocations (RM_Alloc/RM_Free)", sum(get(f) for f in ALLOC)))
        rows.append((f"  the module's own code ({name})", get("SELF:" + obj)))
    return [(name, ir / ops) for name, ir in rows]


def table(title, columns):
    names = []
    for _, rows in columns:
        for name, _ in rows:
            if name not in names:
                names.append(name)
    print(f"\n{title} (instructions per operation)")
    width = max(len(n) for n in names) + 2
    print("".ljust(width) + "".join(f"{label:>16}" for label, _ in columns))
    for name in names:
        cells = []
        for _, rows in columns:
            value = dict(rows).get(name)
            cells.append(f"{value:>16,.0f}" if value is not None else f"{'':>16}")
        print(name.ljust(width) + "".join(cells))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--module", default=os.environ.get(
        "LOCK_MODULE", f"{ROOT}/target/release/liblock.so"))
    p.add_argument("--floor-module", default=f"{ROOT}/target/release/libfloor.so",
                   help="libfloor.so (cargo build --release -p lock-bench-floor), loaded "
                        "next to the module for the hand-off tables' floor column")
    p.add_argument("--server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--clients", default="16,64")
    p.add_argument("--cycles", type=int, default=20_000,
                   help="hand-off cycles per client count")
    p.add_argument("--only", default="uncontended,handoff")
    p.add_argument("--module-args", default="",
                   help="the module's load arguments, e.g. 'redisson-notify no'")
    p.add_argument("--keep", help="keep the callgrind files in this directory")
    a = p.parse_args()
    out = a.keep or tempfile.mkdtemp(prefix="profile-floor.")
    os.makedirs(out, exist_ok=True)
    # Copies: rebuilding a module under a running server crashes it.
    module = f"{out}/{LOCK[0]}"
    shutil.copy(a.module, module)
    modules = [(module, a.module_args.split())]
    floor = os.path.isfile(a.floor_module)
    if floor:
        shutil.copy(a.floor_module, f"{out}/{FLOOR[0]}")
        modules.append((f"{out}/{FLOOR[0]}", []))
    elif "handoff" in a.only:
        print(f"note: no floor column: {a.floor_module} not found "
              "(cargo build --release -p lock-bench-floor, or --floor-module PATH)")
    server = Server(a.server, modules, out)
    try:
        if "uncontended" in a.only:
            n = a.requests
            cols = []
            for label, args, fn in [
                ("LOCK.ACQUIRE", ["LOCK.ACQUIRE", "k:__rand_int__", "o", "PX", "30000"],
                 ["RedisModuleCommandDispatcher"]),
                ("SET NX PX", ["SET", "k:__rand_int__", "o", "NX", "PX", "30000"],
                 ["setCommand"]),
            ]:
                bench = ["redis-benchmark", "-p", str(server.port), "-c", "50", "-P", "16",
                         "-r", "1000000000", "-q"]
                subprocess.run(bench + ["-n", "5000"] + args, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                command(server.port, "FLUSHALL")
                costs = server.measure(label.replace(" ", "-"), lambda: subprocess.run(
                    bench + ["-n", str(n)] + args, check=True,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                keys = int(command(server.port, "DBSIZE"))
                if keys < 0.99 * n:
                    sys.exit(f"{label}: only {keys} keys after {n} commands")
                cols.append((label, rows_for(costs, n, fn)))
                command(server.port, "FLUSHALL")
            table("Uncontended acquire, fresh keys, redis-benchmark -c 50 -P 16", cols)
            acq, set_ = cols[0][1][0][1], cols[1][1][0][1]
            print(f"SET NX PX / LOCK.ACQUIRE: {set_ / acq:.3f}x")
        if "handoff" in a.only:
            for clients in [int(c) for c in a.clients.split(",")]:
                per = max(1, a.cycles // clients)
                cols = []
                protocols = [
                    ("module", ["RedisModuleCommandDispatcher"], LOCK),
                    ("blpop", ["blpopCommand", "rpushCommand"], LOCK),
                    ("semaphore", ["RedisModuleCommandDispatcher"], LOCK),
                ]
                if floor:
                    protocols.append(("floor", ["RedisModuleCommandDispatcher"], FLOOR))
                for protocol, fns, mod in protocols:
                    command(server.port, "DEL", "hot", "{hot}:timeout")
                    if protocol == "blpop":
                        command(server.port, "RPUSH", "hot", "t")
                    if protocol == "semaphore":
                        command(server.port, "SEM.INIT", "hot", "1")
                    cycles(server.port, protocol, clients, 20)
                    costs = server.measure(
                        f"{protocol}-{clients}",
                        lambda: cycles(server.port, protocol, clients, per))
                    cols.append((protocol, rows_for(costs, clients * per, fns, mod)))
                table(f"Hand-off, {clients} clients, one acquire that waits + one "
                      "release that hands on", cols)
                m, b = cols[0][1][0][1], cols[1][1][0][1]
                print(f"blpop / module: {b / m:.3f}x")
                if floor:
                    f = cols[3][1][0][1]
                    print(f"floor / module: {f / m:.3f}x")
                    print(f"blpop / floor: {b / f:.3f}x")
    finally:
        server.stop()
        if not a.keep:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
