"""Leader election (ELECT.*) through the library, against a real server with the module.

Leases of 1 s: the session PINGs every 250 ms while an election campaigns or leads."""

import asyncio
import os
import queue
import signal
import threading
import time

import pytest

from redis_lock_client import BusyError, Election, LostError, Session
from redis_lock_client import asyncio as alc

from conftest import wait_for, waiters

# A leader believes it leads until its last answered PING + half its lease. With 1 s, a thread
# held up for half a second on a loaded machine (CI runs every suite at once) let a leader go
# before the test cut it off or force-released it (seen in CI: not a leader right after a PING
# answered). 4 s tolerates a 2 s stall and still ends the deadline test within 2 s of the cut.
LEASE = 4000
# For the tests whose leader must simply go on leading while others campaign.
STEADY_LEASE = 10_000


def left_behind(r, name):
    """The election's keys still there: the lock, the leader record."""
    return [k for k in (name, "{%s}:leader" % name) if r.exists(k)]


def observers(r):
    return int(r.info("lock").get("lock_election_observers", 0))


def in_thread(fn):
    """Runs fn on a thread: (thread, a list that gets its result or exception)."""
    out = []

    def run():
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_campaign_resign_and_fifo_hand_off(server, r):
    name = "el:fifo"
    with Session(server.client()) as s1, Session(server.client()) as s2:
        e1 = s1.election(name, value="a", lease_ms=STEADY_LEASE)
        e2 = Election(s2, name, value="b", lease_ms=STEADY_LEASE)
        e3 = Election(s1, name, value="c", lease_ms=STEADY_LEASE)
        l1 = e1.campaign(timeout=0)
        assert l1.term > 0 and l1.is_leader
        with pytest.raises(BusyError):
            e2.campaign(timeout=0)
        with pytest.raises(BusyError):
            e2.campaign(timeout=0.05)
        assert waiters(r, name) == 0  # a try and a timed-out wait leave nobody queued

        t2, got2 = in_thread(e2.campaign)
        wait_for("the second candidate queued", lambda: waiters(r, name) == 1)
        t3, got3 = in_thread(e3.campaign)
        wait_for("the third candidate queued", lambda: waiters(r, name) == 2)

        assert l1.resign() is True
        assert l1.resign() is False  # resigning twice is no error
        assert not l1.lost.is_set() and not l1.is_leader  # a resign is not a loss
        t2.join(5)
        l2 = got2[0]
        assert l2.candidate != l1.candidate and l2.term > l1.term
        assert e1.leader()[:3] == (l2.candidate, l2.term, "b")
        assert t3.is_alive() and waiters(r, name) == 1  # first come, first served

        assert l2.resign() is True
        t3.join(5)
        l3 = got3[0]
        assert l3.term > l2.term and e1.leader()[:3] == (l3.candidate, l3.term, "c")
        with l3:
            assert l3.is_leader
        assert not l3.is_leader
        assert e1.leader() is None
        assert left_behind(r, name) == []
        with pytest.raises(LostError):
            l3.proclaim("late")


def test_value_and_proclaim_are_visible_in_leader(r):
    name = "el:value"
    with Session(r) as session:
        e = session.election(name, value="10.0.0.5:8080", lease_ms=STEADY_LEASE)
        assert e.leader() is None
        leadership = e.campaign(timeout=0)
        who = e.leader()
        assert (who.candidate, who.term, who.value) == (leadership.candidate, leadership.term, "10.0.0.5:8080")
        assert 0 < who.ttl_ms <= STEADY_LEASE
        assert leadership.proclaim("10.0.0.6:8080") == leadership.term
        assert e.leader().value == "10.0.0.6:8080"
        assert leadership.resign() is True
        assert e.leader() is None
        # no value: the record has none
        plain = Election(session, name, lease_ms=STEADY_LEASE).campaign(timeout=0)
        assert e.leader()[:3] == (plain.candidate, plain.term, None)
        plain.resign()
        assert left_behind(r, name) == []


def test_observe_yields_every_change_in_order(server, r):
    name = "el:observe"
    seen = queue.Queue()
    with Session(server.client()) as s1, Session(server.client()) as s2:
        e1 = s1.election(name, value="a", lease_ms=STEADY_LEASE)
        e2 = s2.election(name, value="b", lease_ms=STEADY_LEASE)
        obs = Election(server.client(), name).observe()

        def watch():
            for change in obs:
                seen.put(change)
            seen.put("end")

        t = threading.Thread(target=watch, daemon=True)
        t.start()

        def next_change():
            change = seen.get(timeout=5)
            wait_for("the observer waiting again", lambda: change == "end" or observers(r) == 1)
            return change

        wait_for("the observer waiting", lambda: observers(r) == 1)
        l1 = e1.campaign(timeout=0)
        assert next_change()[:3] == (l1.candidate, l1.term, "a")
        t2, got2 = in_thread(e2.campaign)
        wait_for("the second candidate queued", lambda: waiters(r, name) == 1)
        l1.proclaim("a2")
        assert next_change()[:3] == (l1.candidate, l1.term, "a2")
        l1.resign()
        t2.join(5)
        l2 = got2[0]
        assert next_change()[:3] == (l2.candidate, l2.term, "b")
        l2.resign()
        assert next_change() is None  # nobody leads
        obs.close()  # ends the step waiting now
        assert seen.get(timeout=5) == "end"
        t.join(5)
        wait_for("no observer left", lambda: observers(r) == 0)
        assert left_behind(r, name) == []


def test_forcerelease_pushes_lost_as_forced(r):
    # pushed by the server: reason "forced", not the local deadline's "deadline"
    name = "el:forced"
    with Session(r) as session:
        reasons = []
        e = Election(session, name, lease_ms=LEASE, on_lost=lambda l: reasons.append(l.lost_reason))
        leadership = e.campaign(timeout=0)
        assert r.execute_command("LOCK.FORCERELEASE", name) == 1
        assert leadership.lost.wait(5)
        wait_for("the callback", lambda: reasons)
        assert leadership.lost_reason == "forced" and reasons == ["forced"]
        assert not leadership.is_leader
        with pytest.raises(LostError):
            leadership.check()
        assert leadership.resign() is False
        wait_for("the record gone", lambda: left_behind(r, name) == [])
        # the next candidate leads
        nxt = e.campaign(timeout=0)
        assert nxt.term > leadership.term and not nxt.lost.is_set()
        nxt.resign()
        assert left_behind(r, name) == []


def test_killed_session_connection_hands_over_and_fires_lost(server, r):
    name = "el:killed"
    with Session(server.client()) as s1, Session(server.client()) as s2:
        l1 = s1.election(name, lease_ms=LEASE).campaign(timeout=0)
        t2, got2 = in_thread(s2.election(name, lease_ms=LEASE).campaign)
        wait_for("the second candidate queued", lambda: waiters(r, name) == 1)
        r.client_kill_filter(_id=s1.session_client_id())
        assert l1.lost.wait(5)
        assert l1.lost_reason == "connection" and not l1.is_leader
        t2.join(5)
        l2 = got2[0]
        assert l2.term > l1.term and r.execute_command("ELECT.LEADER", name) is not None
        assert s1.election(name).leader().candidate == l2.candidate
        l2.resign()
        assert left_behind(r, name) == []


def test_a_leader_cut_off_stops_believing_at_its_deadline(server, r):
    """The server stops answering (SIGSTOP): no PING answered, so the
    leadership is lost at last answered PING's send time + lease/2, before the
    server could hand over."""
    name = "el:deadline"
    with Session(r) as session:
        leadership = session.election(name, lease_ms=LEASE).campaign(timeout=0)
        first = leadership.deadline
        wait_for("a PING answered: the deadline moves on", lambda: leadership.deadline > first)
        assert leadership.is_leader
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            assert leadership.lost.wait(LEASE / 1000)
            noticed = time.monotonic()
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert leadership.lost_reason == "deadline"
        # believed at most half a lease past a PING sent before the stop, and
        # given up before the server could hand over (that PING's send + lease)
        assert leadership.deadline <= stopped + LEASE / 2000
        assert noticed < leadership.deadline + LEASE / 2000
        # resigned in the background once the server answers again
        wait_for("resigned after the stop", lambda: left_behind(r, name) == [])


def test_ctrl_c_while_campaigning_leaves_nothing(r):
    name = "el:cancel"
    with Session(r) as session:
        leader = session.election(name, lease_ms=STEADY_LEASE).campaign(timeout=0)
        main = threading.main_thread().ident

        def interrupt():
            wait_for("queued", lambda: waiters(r, name) == 1)
            signal.pthread_kill(main, signal.SIGINT)

        t = threading.Thread(target=interrupt)
        t.start()
        with pytest.raises(KeyboardInterrupt):
            session.election(name, lease_ms=STEADY_LEASE).campaign()
        t.join()
        wait_for("the waiter gone", lambda: waiters(r, name) == 0)
        assert leader.resign() is True
        assert left_behind(r, name) == []  # nobody was handed it


# asyncio: the same on redis.asyncio


@pytest.fixture
async def ar(server, r):
    import redis.asyncio as aredis

    client = aredis.Redis(port=server.port)
    yield client
    await client.aclose()


async def await_for(what, pred, timeout=5.0):
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


async def test_asyncio_hand_off_value_and_observe(r, ar):
    name = "el:async"
    async with alc.Session(ar) as s1, alc.Session(ar) as s2:
        e1 = s1.election(name, value="a", lease_ms=STEADY_LEASE)
        e2 = alc.Election(s2, name, value="b", lease_ms=STEADY_LEASE)
        obs = alc.Election(ar, name).observe()
        seen = asyncio.Queue()

        async def watch():
            async for change in obs:
                await seen.put(change)
            await seen.put("end")

        watcher = asyncio.ensure_future(watch())

        async def next_change():
            change = await asyncio.wait_for(seen.get(), 5)
            await await_for("the observer waiting again", lambda: change == "end" or observers(r) == 1)
            return change

        await await_for("the observer waiting", lambda: observers(r) == 1)
        l1 = await e1.campaign(timeout=0)
        assert (await next_change())[:3] == (l1.candidate, l1.term, "a")
        with pytest.raises(BusyError):
            await e2.campaign(timeout=0)
        campaign2 = asyncio.ensure_future(e2.campaign())
        await await_for("the second candidate queued", lambda: waiters(r, name) == 1)
        assert await l1.proclaim("a2") == l1.term
        assert (await e2.leader()).value == "a2"
        assert (await next_change())[:3] == (l1.candidate, l1.term, "a2")
        async with l1:
            pass  # leaving it resigns
        l2 = await asyncio.wait_for(campaign2, 5)
        assert l2.term > l1.term and not l1.lost.is_set()
        assert (await next_change())[:3] == (l2.candidate, l2.term, "b")
        assert await l2.resign() is True
        assert await next_change() is None
        await obs.close()
        assert await asyncio.wait_for(seen.get(), 5) == "end"
        await watcher
        assert await e1.leader() is None
        assert left_behind(r, name) == []


async def test_asyncio_lost_on_forcerelease_and_at_the_deadline(server, r, ar):
    name = "el:async-lost"
    async with alc.Session(ar) as session:
        reasons = []
        e = session.election(name, lease_ms=LEASE, on_lost=lambda l: reasons.append(l.lost_reason))
        leadership = await e.campaign(timeout=0)
        assert r.execute_command("LOCK.FORCERELEASE", name) == 1
        await asyncio.wait_for(leadership.lost.wait(), 5)
        assert leadership.lost_reason == "forced" and reasons == ["forced"] and not leadership.is_leader
        await await_for("the record gone", lambda: left_behind(r, name) == [])

        leadership = await e.campaign(timeout=0)
        first = leadership.deadline
        await await_for("a PING answered: the deadline moves on", lambda: leadership.deadline > first)
        assert leadership.is_leader
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            await asyncio.wait_for(leadership.lost.wait(), LEASE / 1000)
            noticed = time.monotonic()
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert leadership.lost_reason == "deadline"
        assert leadership.deadline <= stopped + LEASE / 2000 and noticed < leadership.deadline + LEASE / 2000
        await await_for("resigned after the stop", lambda: left_behind(r, name) == [])
