"""The asyncio twins of the main tests."""

import asyncio
import itertools
import time

import pytest
import redis.asyncio as aredis
from redis.exceptions import LockError, LockNotOwnedError

from redis_lock_client import BusyError, DeadlockError, ModuleNotLoadedError, UnavailableError
from redis_lock_client.asyncio import Election, ModuleLock, Session, close_default_session

from conftest import KEPT_LEASE_MS, Server, free_port, info, waiters


async def await_for(what, pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def ar(server, r):
    client = aredis.Redis(port=server.port, max_connections=1100)
    yield client
    await client.aclose()


async def test_first_lock(r, ar):
    async with Session(ar) as session:
        async with await session.lock("invoice:7").acquire(timeout=5) as hold:
            assert hold.token > 10**15
            assert info(r, "invoice:7")["keepalive_client"] == await session.session_client_id()
    assert info(r, "invoice:7") is None


async def test_1000_tasks_never_two_inside(r, ar):
    inside = max_inside = done = 0
    async with Session(ar) as session:
        lock = session.lock("hot")

        async def worker():
            nonlocal inside, max_inside, done
            async with lock as _:
                inside += 1
                max_inside = max(max_inside, inside)
                await asyncio.sleep(0)
                inside -= 1
                done += 1

        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(1000))), 60)
    assert done == 1000 and max_inside == 1
    assert info(r, "hot") is None


async def test_fifo_100_waiters(r, ar):
    async with Session(ar) as session:
        lock = session.lock("fifo")
        holder = await lock.acquire()
        order = []

        async def waiter(i):
            h = await lock.acquire(timeout=30)
            order.append(i)
            await h.release()

        tasks = []
        for i in range(100):
            tasks.append(asyncio.ensure_future(waiter(i)))
            await await_for("queued", lambda: waiters(r, "fifo") == i + 1)
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert order == list(range(100))


async def test_timeout_leaves_no_waiter(r, ar):
    async with Session(ar) as session:
        r.execute_command("LOCK.ACQUIRE", "busy", "other", "PX", 30000)
        with pytest.raises(BusyError):
            await session.lock("busy").acquire(timeout=0.2)
        assert waiters(r, "busy") == 0 and r.execute_command("LOCK.WAITERS", "busy") == []
        assert session.holds() == []


async def test_task_cancel_leaves_nothing(r, ar):
    async with Session(ar) as session:
        r.execute_command("LOCK.ACQUIRE", "cancel", "other", "PX", 30000)
        task = asyncio.ensure_future(session.lock("cancel").acquire())
        await await_for("queued", lambda: waiters(r, "cancel") == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await await_for("waiter gone", lambda: waiters(r, "cancel") == 0)
        r.execute_command("LOCK.RELEASE", "cancel", "other")
        assert info(r, "cancel") is None
        assert session.holds() == []


async def test_a_cancel_at_any_step_ends_the_wait(r, ar):
    """Cancelled after k = 0..24 event-loop steps, wherever that lands (the
    pool's connect if its connection is closed, the write, the wait), a
    waiting acquire and an observer's step end with CancelledError and leave
    no waiter.  redis-py writes through asyncio.wait_for when the connection
    has a socket timeout (5 s by default in redis-py 8), and on Python 3.11
    wait_for loses a cancel that lands just after the write (CPython
    gh-86296): the acquire then waited for ever (seen as
    test_async_semaphore_fifo_and_cancel hanging under load).  Without the
    fix this fails at k = 1 on Python 3.11; 3.12's wait_for loses nothing."""
    async with Session(ar) as session:
        r.execute_command("LOCK.ACQUIRE", "steps", "other", "PX", 30000)
        obs = Election(ar, "el:steps").observe()
        for k in range(25):
            for start, connected in itertools.product((session.lock("steps").acquire, obs.__anext__), (1, 0)):
                if connected:  # the window at the same step whatever the machine's speed
                    await ar.ping()
                task = asyncio.ensure_future(start())
                for _ in range(k):
                    await asyncio.sleep(0)
                task.cancel()
                await asyncio.wait({task}, timeout=5)
                assert task.cancelled(), f"cancelled after {k} steps: {task}"
        await await_for("no waiter or observer left", lambda: waiters(r, "steps") == 0
                        and r.info("lock")["lock_election_observers"] == 0)
        r.execute_command("LOCK.RELEASE", "steps", "other")
        assert info(r, "steps") is None and session.holds() == []


async def test_session_killed_reattached(r, ar):
    async with Session(ar, lease_ms=KEPT_LEASE_MS) as session:
        hold = await session.lock("reattach").acquire()
        old = await session.session_client_id()
        r.execute_command("CLIENT", "KILL", "ID", old)

        async def new_id():
            sid = await session.session_client_id()
            return sid != old and sid

        new = await await_for("new session connection", new_id)
        await await_for("re-attached", lambda: info(r, "reattach").get("keepalive_client") == new)
        await asyncio.sleep(KEPT_LEASE_MS / 1000 + 0.5)  # past the lease
        assert info(r, "reattach")["owner"].decode() == hold.owner and not hold.lost.is_set()
        await hold.release()


async def test_forcerelease_lost(r, ar):
    async with Session(ar) as session:
        seen = []
        got = asyncio.Event()

        async def cb(h):
            seen.append(h)
            got.set()

        session.on_lost(cb)
        hold = await session.lock("forced").acquire()
        t0 = time.monotonic()
        r.execute_command("LOCK.FORCERELEASE", "forced")
        await asyncio.wait_for(hold.lost.wait(), 5)
        await asyncio.wait_for(got.wait(), 5)
        print(f"asyncio: FORCERELEASE -> lost in {(time.monotonic() - t0) * 1000:.2f} ms")
        assert seen == [hold] and hold.lost_reason == "forced"


async def test_rw_and_multi(r, ar):
    async with Session(ar) as session:
        r1 = await session.rwlock("cfg").read_lock().acquire(timeout=0)
        r2 = await asyncio.ensure_future(session.rwlock("cfg").read_lock().acquire(timeout=0))
        assert r1.owner != r2.owner
        await r1.release()
        await r2.release()
        m = await session.multilock(["a", "b"]).acquire(timeout=1)
        assert len(m.tokens) == 2
        await m.release()
        assert info(r, "a") is None and info(r, "cfg") is None


async def test_wait_closing_a_cycle_is_refused(r, ar):
    async with Session(ar) as session:
        a = await session.rwlock("x").read_lock().acquire(timeout=0)
        b = await session.multilock(["y"]).acquire(timeout=0)
        waiting = asyncio.ensure_future(session.lock("y").acquire(timeout=10, owner=a.owner))
        await await_for("A queued for y", lambda: waiters(r, "y") == 1)
        with pytest.raises(DeadlockError) as e:
            await session.rwlock("x").write_lock().acquire(timeout=10, owner=b.owner)
        assert "'x'" in str(e.value) and "'y'" in str(e.value)
        await b.release()
        got = await asyncio.wait_for(waiting, 5)
        assert got.owner == a.owner
        await got.release()
        await a.release()
    assert info(r, "x") is None and info(r, "y") is None


async def test_module_missing_and_down():
    srv = Server(module=False).start()
    try:
        with pytest.raises(ModuleNotLoadedError):
            await Session(aredis.Redis(port=srv.port)).start()
    finally:
        srv.cleanup()
    with pytest.raises(UnavailableError):
        await Session(aredis.Redis(port=free_port())).start()


async def test_dropin(r, ar):
    lock = ar.lock("foo", lock_class=ModuleLock)
    assert await lock.acquire(blocking=False)
    assert await lock.owned() and await lock.locked()
    other = ar.lock("foo", lock_class=ModuleLock, blocking_timeout=0.1)
    assert not await other.acquire()
    await lock.release()
    with pytest.raises(LockError):
        await lock.release()
    t = ar.lock("bar", lock_class=ModuleLock, timeout=10)
    async with t:
        assert await t.extend(5)
        assert 13000 < r.pttl("bar") <= 15000
        r.execute_command("LOCK.FORCERELEASE", "bar")
        with pytest.raises(LockNotOwnedError):
            await t.reacquire()
        await t.acquire()
    assert info(r, "bar") is None
    await close_default_session(ar)
