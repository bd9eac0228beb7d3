"""The drop-in's implicit session: one per connection pool, ended with the
pool (disconnected, its client closed, garbage-collected), so that clients
that come and go leave no thread, no server connection and no fd behind;
and its loss signal (``on_lost``)."""

import asyncio
import gc
import os
import threading

import pytest
import redis
import redis.asyncio as aredis

from redis_lock_client import ModuleLock, default_session
from redis_lock_client.asyncio import ModuleLock as AsyncModuleLock
from redis_lock_client.asyncio import default_session as async_default_session

from conftest import info, wait_for

CLIENTS = 1000


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def server_connections(r):
    return r.info("clients")["connected_clients"]


@pytest.fixture
def baseline(r):
    gc.collect()
    return threading.active_count(), server_connections(r), open_fds()


def assert_back_to(r, baseline):
    threads, conns, fds = baseline
    gc.collect()
    wait_for("the sessions' threads to end", lambda: threading.active_count() <= threads)
    wait_for("the server connections to close", lambda: server_connections(r) <= conns)
    assert open_fds() <= fds + 2  # (the test's own client may have made a connection since)


def use_lock(client, name):
    lock = client.lock(name, lock_class=ModuleLock)  # timeout=None: the implicit session
    assert lock.acquire(blocking_timeout=5)
    assert info(client, name)["keepalive_client"] == default_session(client).session_client_id()
    lock.release()


def test_clients_closed_leave_nothing(server, r, baseline):
    for i in range(CLIENTS):
        client = server.client()
        use_lock(client, f"own{i % 7}")
        client.close()  # its pool is disconnected: the session ends with it
    assert_back_to(r, baseline)


def test_clients_dropped_leave_nothing(server, r, baseline):
    for i in range(CLIENTS):
        use_lock(server.client(), f"gc{i % 7}")  # never closed: the pool is garbage-collected
    assert_back_to(r, baseline)


def test_clients_sharing_a_pool_share_one_session(server, r, baseline):
    threads = baseline[0]
    pool = redis.ConnectionPool(port=server.port)
    sessions = set()
    for i in range(CLIENTS):
        client = redis.Redis(connection_pool=pool)
        use_lock(client, f"shared{i % 7}")
        sessions.add(default_session(client).token)
        client.close()  # (does not disconnect a pool it was given)
    assert len(sessions) == 1
    assert threading.active_count() == threads + 1  # one session thread for the pool
    pool.disconnect()
    assert_back_to(r, baseline)


def test_pools_garbage_collected_leave_nothing(server, r, baseline):
    """Pools never disconnected (their clients do not own them): the
    implicit session goes when its pool is collected."""
    for i in range(100):
        pool = redis.ConnectionPool(port=server.port)
        use_lock(redis.Redis(connection_pool=pool), f"pool{i % 7}")
        del pool
    assert_back_to(r, baseline)


def test_pool_disconnect_releases_the_holds(server, r):
    client = server.client()
    lock = client.lock("held", lock_class=ModuleLock)
    assert lock.acquire(blocking=False)
    client.close()
    assert info(r, "held") is None  # released, not left to its lease


def test_on_lost_called_with_the_reason(r):
    reasons = []
    lost = threading.Event()

    def on_lost(reason):
        reasons.append(reason)
        lost.set()

    lock = ModuleLock(r, "watched", on_lost=on_lost)
    assert lock.acquire(blocking=False)
    r.execute_command("LOCK.FORCERELEASE", "watched")
    assert lost.wait(10)
    assert reasons == ["forced"]
    assert not lock.owned()


def test_on_lost_refused_for_a_lease_lock(r):
    with pytest.raises(ValueError, match="on_lost"):
        ModuleLock(r, "leased", timeout=10, on_lost=print)


async def test_async_on_lost(r, server):
    client = aredis.Redis(port=server.port)
    try:
        lost = asyncio.Event()
        reasons = []

        async def on_lost(reason):
            reasons.append(reason)
            lost.set()

        lock = AsyncModuleLock(client, "awatched", on_lost=on_lost)
        assert await lock.acquire(blocking=False)
        r.execute_command("LOCK.FORCERELEASE", "awatched")
        await asyncio.wait_for(lost.wait(), 10)
        assert reasons == ["forced"]
    finally:
        await client.aclose()


async def test_async_clients_closed_leave_nothing(server, r):
    async def use_and_close():
        client = aredis.Redis(host="127.0.0.1", port=server.port)  # (no resolver thread for an IP)
        lock = client.lock(f"aown{i % 7}", lock_class=AsyncModuleLock)
        assert await lock.acquire(blocking_timeout=5)
        session = await async_default_session(client)
        assert info(r, f"aown{i % 7}")["keepalive_client"] == await session.session_client_id()
        await lock.release()
        await client.aclose()

    i = 0
    await use_and_close()
    gc.collect()
    threads, conns, fds = threading.active_count(), server_connections(r), open_fds()
    tasks = len(asyncio.all_tasks())
    for i in range(CLIENTS):
        await use_and_close()
    gc.collect()
    assert len(asyncio.all_tasks()) <= tasks  # no session reader task left
    assert threading.active_count() <= threads
    wait_for("the server connections to close", lambda: server_connections(r) <= conns)
    assert open_fds() <= fds + 2
