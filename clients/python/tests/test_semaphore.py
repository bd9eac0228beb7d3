"""Semaphores and latches through the library, against a real server with the module."""

import asyncio
import signal
import subprocess
import sys
import threading
import time

import pytest
import redis.asyncio as aredis

from redis_lock_client import BusyError, LatchGone, Latch, LostError, NotOwnerError, Semaphore, Session
from redis_lock_client import asyncio as alc
from redis_lock_client import close_default_session, default_session
from redis_lock_client._common import sem_info

from conftest import wait_for


def sinfo(r, key):
    return sem_info(r.execute_command("SEM.INFO", key))


def sem_waiters(r, key):
    i = sinfo(r, key)
    return 0 if i is None else i["waiters"]


def latch_waiters(r, key):
    i = Latch(r, key).info()
    return 0 if i is None else i["waiters"]


def assert_idle(r, key, permits):
    """No holders, no waiters, every permit available again."""
    i = sinfo(r, key)
    assert i["holders"] == [] and i["waiters"] == 0, i
    assert i["available"] == permits and i["permits"] == permits, i
    assert r.exists("{%s}:timeout" % key) == 0  # the sorted set goes with its last member


def test_threads_never_exceed_the_permits(server, r):
    client = server.client(max_connections=200)
    inside = max_inside = done = 0
    guard = threading.Lock()
    errors = []
    with Session(client) as session:
        sem = session.semaphore("pool", permits=3)
        start = threading.Barrier(40)

        def worker(i):
            nonlocal inside, max_inside, done
            n = 1 + i % 2  # mixed: 1 and 2 permits
            try:
                start.wait()
                for _ in range(5):
                    with sem.acquire(n, timeout=30) as p:
                        assert p.permits == n
                        with guard:
                            inside += n
                            max_inside = max(max_inside, inside)
                        time.sleep(0)
                        with guard:
                            inside -= n
                            done += 1
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        holder = sem.acquire(3, timeout=0)  # all back: the whole semaphore at once
        assert sinfo(r, "pool")["holders"][0]["keepalive_client"] == session.session_client_id()
        holder.release()
    client.close()
    assert not errors, errors[:3]
    assert done == 200
    assert 0 < max_inside <= 3
    assert_idle(r, "pool", 3)


def test_fifo_with_mixed_permit_counts(server, r):
    with Session(r) as session:
        sem = session.semaphore("fifo", permits=3)
        holder = sem.acquire(3)
        got = {}
        events = {}
        go = {}

        def waiter(name, n):
            p = sem.acquire(n, timeout=30)
            got[name] = p
            events[name].set()
            go[name].wait(30)
            p.release()

        threads = []
        for i, (name, n) in enumerate([("a", 2), ("b", 1), ("c", 3), ("d", 1)]):
            events[name], go[name] = threading.Event(), threading.Event()
            t = threading.Thread(target=waiter, args=(name, n))
            t.start()
            threads.append(t)
            wait_for(f"{name} queued", lambda i=i: sem_waiters(r, "fifo") == i + 1)
        holder.release()  # 3 free: a (2) then b (1)
        assert events["a"].wait(10) and events["b"].wait(10)
        assert not events["c"].is_set() and not events["d"].is_set()
        go["a"].set()
        threads[0].join(10)
        # 2 free, c (3) first in line: d (1) must not overtake it, nor a try
        i = sinfo(r, "fifo")
        assert i["available"] == 2 and i["waiters"] == 2, i
        assert [h["owner"] for h in i["holders"]] == [got["b"].owner]
        with pytest.raises(BusyError):
            sem.acquire(1, timeout=0)
        go["b"].set()  # 3 free: c
        assert events["c"].wait(10)
        assert got["c"].permits == 3 and not events["d"].is_set()
        go["c"].set()
        assert events["d"].wait(10)
        go["d"].set()
        for t in threads:
            t.join(10)
    assert_idle(r, "fifo", 3)


def test_holder_killed_permits_back_within_lease(server, r):
    lease_ms = 1000
    script = (
        "import time, redis\n"
        "from redis_lock_client import Session\n"
        f"s = Session(redis.Redis(port={server.port}), lease_ms={lease_ms})\n"
        "p = s.semaphore('victim', permits=2).acquire(2)\n"
        "print(p.owner, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        owner = proc.stdout.readline().strip()
        holders = sinfo(r, "victim")["holders"]
        assert [h["owner"] for h in holders] == [owner] and holders[0]["permits"] == 2
        assert "keepalive_client" in holders[0]  # bound to the holder's session
        with Session(r) as session:
            proc.kill()
            t0 = time.monotonic()
            with session.semaphore("victim").acquire(2, timeout=lease_ms / 1000 + 2.0) as p:
                waited = time.monotonic() - t0
                assert [h["owner"] for h in sinfo(r, "victim")["holders"]] == [p.owner]
        print(f"after kill -9 of the holder: 2 permits back in {waited * 1000:.0f} ms (lease {lease_ms} ms)")
    finally:
        proc.kill()
        proc.wait()
    assert_idle(r, "victim", 2)


def test_session_connection_killed_permits_reattached(r):
    with Session(r, lease_ms=1000) as session:
        sem = session.semaphore("re", permits=2)
        p = sem.acquire()
        old = session.session_client_id()
        assert sinfo(r, "re")["holders"][0]["keepalive_client"] == old
        r.execute_command("CLIENT", "KILL", "ID", old)
        new = wait_for("a new session connection", lambda: session.session_client_id() != old and session.session_client_id())
        wait_for("re-attached", lambda: sinfo(r, "re")["holders"][0].get("keepalive_client") == new)
        assert not p.lost.is_set() and sem.available() == 1
        p.release()
        assert_idle(r, "re", 2)


def test_cancelled_waits_leave_nothing(r):
    with Session(r) as session:
        sem = session.semaphore("cancel", permits=1)
        assert sem.available() == 1  # SEM.INIT goes with the object's first command
        r.execute_command("SEM.ACQUIRE", "cancel", "other", "PX", 30000)
        with pytest.raises(BusyError):
            sem.acquire(timeout=0.2)  # the wait runs out in the server
        assert sem_waiters(r, "cancel") == 0
        main = threading.main_thread().ident

        def interrupt():
            wait_for("queued", lambda: sem_waiters(r, "cancel") == 1)
            signal.pthread_kill(main, signal.SIGINT)

        t = threading.Thread(target=interrupt)
        t.start()
        with pytest.raises(KeyboardInterrupt):  # LOCK.CANCEL, then SEM.RELEASE
            sem.acquire()
        t.join()
        i = sinfo(r, "cancel")
        assert i["waiters"] == 0 and [h["owner"] for h in i["holders"]] == ["other"]
        assert r.execute_command("SEM.RELEASE", "cancel", "other") == 0
        assert session.holds() == []
    assert_idle(r, "cancel", 1)  # nobody was handed the permit


def test_partial_release_and_loss(r):
    with Session(r) as session:
        sem = Semaphore(session, "part", permits=3)
        assert sem.init(5) is False  # set once
        p = sem.acquire(3, blocking=False)
        p.release(2)
        assert p.permits == 1 and sem.available() == 2
        r.execute_command("SEM.RELEASE", "part", p.owner)  # taken from under it
        with pytest.raises(NotOwnerError):
            p.release()
        assert p.lost.is_set() and p.lost_reason == "gone"
    assert_idle(r, "part", 3)


def test_semaphore_on_a_client_uses_its_default_session(r):
    sem = Semaphore(r, "dflt", permits=2)
    p = sem.acquire(2)
    assert sinfo(r, "dflt")["holders"][0]["keepalive_client"] == default_session(r).session_client_id()
    close_default_session(r)  # releases its permits
    assert p.count == 0
    assert_idle(r, "dflt", 2)


def test_permits_deleted_signal_lost(r):
    with Session(r, lease_ms=1000) as session:
        lost = []
        session.on_lost(lost.append)
        p = session.semaphore("del", permits=2).acquire()
        r.delete("{del}:timeout")  # the permit set: the server tells at its next renewal
        assert p.lost.wait(5)
        assert p.lost_reason == "gone" and lost == [p]
        with pytest.raises(LostError):
            p.check()
        p.release()  # quiet
        assert session.holds() == []


def test_latch_wait_woken_by_count_down(r):
    latch = Latch(r, "ready")
    assert latch.wait(timeout=0) is True  # a missing latch is open
    assert latch.init(2) is True and latch.init(9) is False
    assert latch.wait(timeout=0) is False and latch.count() == 2
    out = []
    t = threading.Thread(target=lambda: out.append(latch.wait(timeout=10)))
    t.start()
    wait_for("waiting", lambda: latch_waiters(r, "ready") == 1)
    assert latch.count_down() == 1
    assert latch_waiters(r, "ready") == 1 and not out
    assert Latch(r, "ready").count_down() == 0
    t.join(10)
    assert out == [True] and latch.count() == 0 and r.exists("ready") == 0


def test_latch_gone_on_delete(r):
    latch = Latch(r, "doomed")
    latch.init(5)
    out = []

    def wait():
        try:
            out.append(latch.wait())
        except LatchGone as e:
            out.append(e)

    t = threading.Thread(target=wait)
    t.start()
    wait_for("waiting", lambda: latch_waiters(r, "doomed") == 1)
    r.delete("doomed")
    t.join(10)
    assert len(out) == 1 and isinstance(out[0], LatchGone)


@pytest.fixture
async def ar(server, r):
    client = aredis.Redis(port=server.port, max_connections=200)
    yield client
    await client.aclose()


async def test_async_semaphore_fifo_and_cancel(r, ar):
    async with alc.Session(ar) as session:
        sem = session.semaphore("apool", permits=2)
        holder = await sem.acquire(2)
        order = []

        async def waiter(name, n):
            async with await sem.acquire(n, timeout=10):
                order.append(name)

        tasks = []
        for i, (name, n) in enumerate([("big", 2), ("small", 1)]):
            tasks.append(asyncio.ensure_future(waiter(name, n)))
            await _await_for(lambda i=i: sem_waiters(r, "apool") == i + 1)
        stuck = asyncio.ensure_future(sem.acquire(1))  # cancelled while queued
        await _await_for(lambda: sem_waiters(r, "apool") == 3)
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        assert sem_waiters(r, "apool") == 2
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert order == ["big", "small"]
        assert session.holds() == []
    assert_idle(r, "apool", 2)


async def test_async_latch(r, ar):
    latch = alc.Latch(ar, "alatch")
    assert await latch.init(1, ttl=30) is True
    waiting = asyncio.ensure_future(latch.wait(timeout=10))
    await _await_for(lambda: latch_waiters(r, "alatch") == 1)
    assert await latch.count_down() == 0
    assert await asyncio.wait_for(waiting, 10) is True
    await latch.init(3)
    waiting = asyncio.ensure_future(latch.wait())
    await _await_for(lambda: latch_waiters(r, "alatch") == 1)
    r.delete("alatch")
    with pytest.raises(LatchGone):
        await asyncio.wait_for(waiting, 10)


async def _await_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.01)
