"""A wait survives the loss of its connection (docs/clients.md): the
connection a LOCK.ACQUIRE ... BLOCK is blocked on is killed (CLIENT KILL, an
idle reaper), the library cancels the old owner's wait, releases a grant
that crossed the kill, and waits again on another connection."""

import asyncio
import threading

import pytest
import redis.asyncio as aredis

from redis_lock_client import ModuleLock, Session, UnavailableError
from redis_lock_client.asyncio import ModuleLock as AsyncModuleLock
from redis_lock_client.asyncio import Session as AsyncSession

from conftest import Server, info, wait_for, waiters


def blocked_ids(r, cmd="lock.acquire"):
    """CLIENT IDs of the connections blocked in ``cmd``."""
    return [int(c["id"]) for c in r.client_list() if c.get("cmd") == cmd and "b" in c.get("flags", "")]


def kill_blocked(r, cmd, times, queued=lambda: True):
    """Kill the connection blocked in ``cmd`` ``times`` times, each time once
    the library waits again on a new one (and ``queued()``: its wait is in
    the server's queue); returns the ids killed once it waits again."""
    killed = []

    def new_ids():
        return [i for i in blocked_ids(r, cmd) if i not in killed] if queued() else None

    for _ in range(times):
        new = wait_for(f"a new connection blocked in {cmd}", new_ids)
        assert len(new) == 1
        r.execute_command("CLIENT", "KILL", "ID", new[0])
        killed.append(new[0])
    wait_for(f"blocked in {cmd} again", new_ids)
    return killed


def kill_waiting_connection(r, key, times):
    """Kill the connection waiting on the lock ``key`` ``times`` times (see
    :func:`kill_blocked`)."""
    return kill_blocked(r, "lock.acquire", times, queued=lambda: waiters(r, key) == 1)


def start_thread(call):
    """Run ``call()`` on a thread of its own: (the thread, a dict that gets
    ``value``, what it returned, or ``error``, what it raised)."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except Exception as e:  # noqa: BLE001 - the test looks at it
            outcome["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, outcome


def assert_only_owner(r, key, owner):
    i = info(r, key)
    assert i["owner"].decode() == owner
    assert i["waiters"] == 0


def test_wait_survives_five_kills(r):
    r.execute_command("LOCK.ACQUIRE", "k", "holder", "PX", 60000)
    with Session(r) as session:
        t, outcome = start_thread(lambda: session.lock("k").acquire(timeout=30))
        kill_waiting_connection(r, "k", 5)
        r.execute_command("LOCK.RELEASE", "k", "holder")
        t.join(10)
        assert not t.is_alive()
        hold = outcome["value"]
        assert hold.held
        assert_only_owner(r, "k", hold.owner)  # no leftover owner from the killed waits
        hold.release()
    assert info(r, "k") is None


def test_kill_loop_until_holder_releases(r):
    """Kill whatever connection waits on the lock, in a loop, until the
    holder releases: the waiter is served, nothing is left queued."""
    r.execute_command("LOCK.ACQUIRE", "loop", "holder", "PX", 60000)
    with Session(r) as session:
        t, outcome = start_thread(lambda: session.lock("loop").acquire(timeout=30))
        kills = 0
        while kills < 20:
            ids = blocked_ids(r)
            if ids:
                r.execute_command("CLIENT", "KILL", "ID", ids[0])
                kills += 1
        wait_for("waiting again", lambda: waiters(r, "loop") == 1 and blocked_ids(r))
        r.execute_command("LOCK.RELEASE", "loop", "holder")
        t.join(10)
        assert_only_owner(r, "loop", outcome["value"].owner)
        outcome["value"].release()


def test_timeout_still_counts_across_kills(r):
    r.execute_command("LOCK.ACQUIRE", "t", "holder", "PX", 60000)
    with Session(r) as session:
        t, outcome = start_thread(lambda: session.lock("t").acquire(timeout=1.5))
        kill_waiting_connection(r, "t", 2)
        t.join(10)
        assert not t.is_alive()
        assert type(outcome["error"]).__name__ == "BusyError"
    assert waiters(r, "t") == 0
    assert info(r, "t")["owner"] == b"holder"


def test_idle_reaper(server, r):
    """The server reaps idle pooled connections (CONFIG SET timeout 1): the
    next acquires meet dead pooled connections and still work."""
    client = server.client()
    try:
        with Session(client) as session:
            holds = [session.lock(f"reap{i}").acquire(timeout=5) for i in range(3)]
            for h in holds:
                h.release()
            pooled = len(client.connection_pool._available_connections)
            assert pooled >= 1
            r.config_set("timeout", 1)
            try:
                wait_for("the idle pooled connections reaped",
                         lambda: r.info("clients")["connected_clients"] <= 2, timeout=15, interval=0.1)
                r.execute_command("LOCK.ACQUIRE", "reap0", "holder", "PX", 1500)
                with session.lock("reap0").acquire(timeout=10) as hold:  # a wait on a reaped connection
                    assert_only_owner(r, "reap0", hold.owner)
                with session.lock("reap1").acquire(timeout=0) as hold:  # a try, too
                    assert info(r, "reap1")["owner"].decode() == hold.owner
            finally:
                r.config_set("timeout", 0)
    finally:
        client.close()


def test_dropin_wait_survives_kills(r):
    r.execute_command("LOCK.ACQUIRE", "d", "holder", "PX", 60000)
    lock = r.lock("d", lock_class=ModuleLock, timeout=20, thread_local=False)
    t, outcome = start_thread(lambda: lock.acquire(blocking_timeout=30))
    kill_waiting_connection(r, "d", 5)
    r.execute_command("LOCK.RELEASE", "d", "holder")
    t.join(10)
    assert outcome["value"] is True
    assert_only_owner(r, "d", lock.local.token.decode())
    assert lock.owned()
    lock.release()


def test_unreachable_after_kill_raises_unavailable():
    srv = Server().start()
    try:
        r = srv.client()
        r.execute_command("LOCK.ACQUIRE", "u", "holder", "PX", 60000)
        session = Session(r, lease_ms=2000)
        t, outcome = start_thread(lambda: session.lock("u").acquire(timeout=30))
        wait_for("waiting", lambda: waiters(r, "u") == 1)
        srv.kill()
        t.join(15)
        assert not t.is_alive()
        assert isinstance(outcome["error"], UnavailableError)
        session.close()
    finally:
        srv.cleanup()


@pytest.fixture
async def ar(server, r):
    client = aredis.Redis(port=server.port)
    yield client
    await client.aclose()


async def test_async_wait_survives_five_kills(r, ar):
    r.execute_command("LOCK.ACQUIRE", "ak", "holder", "PX", 60000)
    async with AsyncSession(ar) as session:
        task = asyncio.create_task(session.lock("ak").acquire(timeout=30))
        await asyncio.to_thread(kill_waiting_connection, r, "ak", 5)
        r.execute_command("LOCK.RELEASE", "ak", "holder")
        hold = await asyncio.wait_for(task, 10)
        assert_only_owner(r, "ak", hold.owner)
        await hold.release()


async def test_async_dropin_wait_survives_kills(r, ar):
    r.execute_command("LOCK.ACQUIRE", "ad", "holder", "PX", 60000)
    lock = ar.lock("ad", lock_class=AsyncModuleLock, timeout=20)
    task = asyncio.create_task(lock.acquire(blocking_timeout=30))
    await asyncio.to_thread(kill_waiting_connection, r, "ad", 5)
    r.execute_command("LOCK.RELEASE", "ad", "holder")
    assert await asyncio.wait_for(task, 10) is True
    assert_only_owner(r, "ad", lock.local.token.decode())
    await lock.release()


def test_latch_wait_survives_kills(r):
    from redis_lock_client import Latch

    latch = Latch(r, "gate")
    assert latch.init(1)
    t, outcome = start_thread(lambda: latch.wait(timeout=30))
    kill_blocked(r, "latch.await", 3)
    assert latch.count_down() == 0
    t.join(10)
    assert outcome["value"] is True


def test_campaign_survives_kills(r, server):
    leader_session = Session(server.client())
    with Session(r) as session:
        first = leader_session.election("office").campaign(timeout=0)
        t, outcome = start_thread(lambda: session.election("office").campaign(timeout=30))
        kill_blocked(r, "elect.campaign", 3)
        assert first.resign()
        t.join(10)
        leadership = outcome["value"]
        assert leadership.is_leader
        leader = session.election("office").leader()
        assert leader.candidate == leadership.candidate
        leadership.resign()
    leader_session.close()
