"""The threaded library against a real server with the module."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import redis

from redis_lock_client import (
    BusyError,
    DeadlockError,
    LockError,
    ModuleNotLoadedError,
    NotOwnerError,
    Session,
    UnavailableError,
)

from conftest import KEPT_LEASE_MS, Server, free_port, info, wait_for, waiters

HERE = os.path.dirname(os.path.abspath(__file__))


def test_first_lock_five_lines(r):
    with Session(r) as session, session.lock("invoice:7").acquire(timeout=5) as hold:
        assert hold.token > 10**15  # a fencing token, not a hold count
        i = info(r, "invoice:7")
        assert i["owner"].decode() == hold.owner
        assert i["keepalive_client"] == session.session_client_id()
        assert not hold.lost.is_set()
    assert info(r, "invoice:7") is None


def test_reentrant_per_thread(r):
    with Session(r) as session:
        lock = session.lock("re")
        h1 = lock.acquire(timeout=0)
        h2 = lock.acquire(timeout=0)
        assert h1 is h2 and h1.count == 2
        err = []
        t = threading.Thread(target=lambda: err.append(pytest.raises(BusyError, lock.acquire, timeout=0)))
        t.start()
        t.join()
        assert err
        h2.release()
        assert info(r, "re")["owner"].decode() == h1.owner
        h1.release()
        assert info(r, "re") is None
        with pytest.raises(LockError):
            h1.release()


def test_1000_threads_never_two_inside(server, r):
    client = server.client(max_connections=1100)
    inside = 0
    max_inside = 0
    done = 0
    guard = threading.Lock()
    errors = []
    with Session(client) as session:
        lock = session.lock("hot")
        start = threading.Barrier(50)

        def worker(i):
            nonlocal inside, max_inside, done
            try:
                if i < 50:
                    start.wait()
                with lock.acquire(timeout=None):
                    with guard:
                        inside += 1
                        max_inside = max(max_inside, inside)
                    time.sleep(0)
                    with guard:
                        inside -= 1
                        done += 1
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(1000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    client.close()
    assert not errors, errors[:3]
    assert done == 1000
    assert max_inside == 1
    assert info(r, "hot") is None


def test_fifo_100_waiters(server, r):
    client = server.client(max_connections=200)  # redis-py 8's pool stops at 100
    with Session(client) as session:
        lock = session.lock("fifo")
        holder = lock.acquire()
        order = []
        threads = []
        for i in range(100):
            def waiter(i=i):
                with lock.acquire(timeout=30):
                    order.append(i)
            t = threading.Thread(target=waiter)
            t.start()
            threads.append(t)
            wait_for(f"waiter {i} queued", lambda: waiters(r, "fifo") == i + 1)
        holder.release()
        for t in threads:
            t.join(30)
        assert order == list(range(100))


def test_timed_out_wait_leaves_no_waiter(r):
    with Session(r) as session:
        r.execute_command("LOCK.ACQUIRE", "busy", "other", "PX", 30000)
        t0 = time.monotonic()
        with pytest.raises(BusyError):
            session.lock("busy").acquire(timeout=0.2)
        assert time.monotonic() - t0 >= 0.2
        assert waiters(r, "busy") == 0
        assert r.execute_command("LOCK.WAITERS", "busy") == []
        with pytest.raises(BusyError):
            session.lock("busy").acquire(timeout=0)
        assert info(r, "busy")["owner"] == b"other"
        assert session.holds() == []


def test_served_when_a_lease_ends(r):
    with Session(r) as session:
        r.execute_command("LOCK.ACQUIRE", "lease", "crashed", "PX", 400)
        t0 = time.monotonic()
        with session.lock("lease").acquire(timeout=10) as hold:
            waited = time.monotonic() - t0
            assert info(r, "lease")["owner"].decode() == hold.owner
        assert waited >= 0.3  # not before the other's lease ended
        print(f"served {waited * 1000:.0f} ms after a 400 ms lease was taken")


def test_kept_alive_past_lease_and_renew(r):
    with Session(r, lease_ms=KEPT_LEASE_MS) as session:
        hold = session.lock("keep").acquire()
        time.sleep(KEPT_LEASE_MS / 1000 + 0.5)
        i = info(r, "keep")
        assert i["owner"].decode() == hold.owner and not hold.lost.is_set()
        assert hold.extend(5000) == 5000
        assert 4000 < info(r, "keep")["ttl"] <= 5000
        hold.release()


def test_holder_killed_next_waiter_served_within_lease(server, r):
    # The hold must outlive its first lease while the holder lives (see KEPT_LEASE_MS).
    lease_ms = KEPT_LEASE_MS
    script = (
        "import sys, time, redis\n"
        "from redis_lock_client import Session\n"
        f"s = Session(redis.Redis(port={server.port}), lease_ms={lease_ms})\n"
        "h = s.lock('victim').acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        time.sleep(lease_ms / 1000 * 1.2)  # kept past its lease while it lives
        assert info(r, "victim") is not None
        with Session(r) as session:
            holder = info(r, "victim")["owner"]
            proc.kill()
            t0 = time.monotonic()
            with session.lock("victim").acquire(timeout=lease_ms / 1000 + 2.0) as hold:
                waited = time.monotonic() - t0
                assert info(r, "victim")["owner"] != holder
                assert hold.token
        print(f"after kill -9 of the holder: served in {waited * 1000:.0f} ms (lease {lease_ms} ms)")
    finally:
        proc.kill()
        proc.wait()


def test_session_connection_killed_reattached(r):
    with Session(r, lease_ms=KEPT_LEASE_MS) as session:
        hold = session.lock("reattach").acquire()
        old = session.session_client_id()
        assert info(r, "reattach")["keepalive_client"] == old
        r.execute_command("CLIENT", "KILL", "ID", old)
        new = wait_for("a new session connection", lambda: session.session_client_id() != old and session.session_client_id())
        wait_for("re-attached", lambda: info(r, "reattach").get("keepalive_client") == new)
        time.sleep(KEPT_LEASE_MS / 1000 + 0.5)  # past the lease: renewed by the new session connection
        i = info(r, "reattach")
        assert i["owner"].decode() == hold.owner and i["keepalive_client"] == new
        assert not hold.lost.is_set()
        hold.release()


def test_forcerelease_signals_lost(r):
    with Session(r) as session:
        fired = []
        got = threading.Event()
        session.on_lost(lambda h: (fired.append((h, time.monotonic())), got.set()))
        hold = session.lock("forced").acquire()
        t0 = time.monotonic()
        assert r.execute_command("LOCK.FORCERELEASE", "forced") == 1
        assert hold.lost.wait(5)
        assert got.wait(5)
        delay = fired[0][1] - t0
        assert fired[0][0] is hold and hold.lost_reason == "forced"
        print(f"FORCERELEASE -> lost callback in {delay * 1000:.2f} ms")
        hold.release()  # a lost hold releases quietly
        assert session.holds() == []


def test_ctrl_c_while_waiting_leaves_nothing(r):
    with Session(r) as session:
        r.execute_command("LOCK.ACQUIRE", "cancel", "other", "PX", 30000)
        main = threading.main_thread().ident

        def interrupt():
            wait_for("queued", lambda: waiters(r, "cancel") == 1)
            signal.pthread_kill(main, signal.SIGINT)

        t = threading.Thread(target=interrupt)
        t.start()
        with pytest.raises(KeyboardInterrupt):
            session.lock("cancel").acquire()
        t.join()
        wait_for("the waiter gone", lambda: waiters(r, "cancel") == 0)
        r.execute_command("LOCK.RELEASE", "cancel", "other")
        assert info(r, "cancel") is None  # nobody was handed it
        assert session.holds() == []


def test_rwlock(r):
    with Session(r) as session:
        rw = session.rwlock("cfg")
        r1 = rw.read_lock().acquire(timeout=0)
        out = []
        t = threading.Thread(target=lambda: out.append(rw.read_lock().acquire(timeout=0)))
        t.start()
        t.join()
        r2 = out[0]
        assert r1.owner != r2.owner
        busy = []
        t = threading.Thread(target=lambda: busy.append(pytest.raises(BusyError, rw.write_lock().acquire, timeout=0.05)))
        t.start()
        t.join()
        assert busy
        with pytest.raises(DeadlockError):
            rw.write_lock().acquire(timeout=0)  # upgrade beside another reader
        r2.release()
        w = rw.write_lock().acquire(timeout=0)  # the only reader upgrades
        assert w.owner == r1.owner
        w.release()
        r1.release()
        assert info(r, "cfg") is None


def test_multilock_all_or_none(r):
    with Session(r) as session:
        r.execute_command("LOCK.ACQUIRE", "acct:2", "audit", "PX", 30000)
        with pytest.raises(BusyError):
            session.multilock(["acct:1", "acct:2"]).acquire(timeout=0)
        assert info(r, "acct:1") is None
        got = []
        t = threading.Thread(target=lambda: got.append(session.multilock(["acct:1", "acct:2"]).acquire(timeout=10)))
        t.start()
        wait_for("queued", lambda: waiters(r, "acct:2") == 1)
        r.execute_command("LOCK.RELEASE", "acct:2", "audit")
        t.join()
        h = got[0]
        assert len(h.tokens) == 2
        assert info(r, "acct:1")["keepalive_client"] == session.session_client_id()
        h.release()
        assert info(r, "acct:1") is None and info(r, "acct:2") is None


def test_release_not_owner(r):
    with Session(r) as session:
        hold = session.lock("gone").acquire()
        r.delete("gone")
        with pytest.raises(NotOwnerError):
            hold.release()
        assert hold.lost.is_set()


def test_wait_closing_a_cycle_is_refused(r):
    # Owner A holds x, owner B holds y; A waits for y (as A: owner=); B asking
    # for x would close the cycle: DeadlockError at once, B keeps y, and A is
    # served once B lets y go.
    with Session(r) as session:
        a = session.lock("x").acquire(timeout=0)
        b = session.lock("y").acquire(timeout=0)
        got = []
        t = threading.Thread(target=lambda: got.append(session.lock("y").acquire(timeout=10, owner=a.owner)))
        t.start()
        wait_for("A queued for y", lambda: waiters(r, "y") == 1)
        with pytest.raises(DeadlockError) as e:
            session.lock("x").acquire(timeout=10, owner=b.owner)
        msg = str(e.value)
        assert msg.startswith("DEADLOCK") and "'x'" in msg and "'y'" in msg, msg
        assert b.owner in msg and a.owner in msg, msg
        assert waiters(r, "x") == 0 and info(r, "y")["owner"].decode() == b.owner
        with pytest.raises(LockError):
            session.lock("z").acquire(timeout=0, owner="not-a-holder")
        with pytest.raises(LockError):
            session.lock("x").acquire(timeout=0, owner=a.owner)  # a re-entry, not a second lock
        b.release()
        t.join(5)
        assert got and got[0].owner == a.owner and info(r, "y")["owner"].decode() == a.owner
        got[0].release()
        assert info(r, "x")["owner"].decode() == a.owner  # x untouched by the release of y
        a.release()
    assert info(r, "x") is None and info(r, "y") is None


def test_close_releases_everything(r):
    session = Session(r)
    session.lock("a").acquire()
    session.multilock(["b", "c"]).acquire()
    session.rwlock("d").read_lock().acquire()
    sid = session.session_client_id()
    session.close()
    for k in "abcd":
        assert info(r, k) is None
    wait_for("session connection closed", lambda: f"id={sid} " not in r.execute_command("CLIENT", "LIST").decode())
    with pytest.raises(LockError):
        session.lock("a").acquire()


def test_module_missing():
    srv = Server(module=False).start()
    try:
        with pytest.raises(ModuleNotLoadedError, match="--loadmodule"):
            Session(srv.client())
    finally:
        srv.cleanup()


def test_server_down():
    with pytest.raises(UnavailableError):
        Session(redis.Redis(port=free_port()))
    srv = Server().start()
    try:
        session = Session(srv.client(), lease_ms=1000)
        srv.kill()
        with pytest.raises(UnavailableError):
            session.lock("x").acquire(timeout=1)
        session.close()
    finally:
        srv.cleanup()


def test_socket_timeout_shorter_than_wait(server, r):
    client = server.client(socket_timeout=0.2)
    with Session(client) as session:
        r.execute_command("LOCK.ACQUIRE", "slow", "other", "PX", 800)
        with session.lock("slow").acquire(timeout=5) as hold:  # waits past the 0.2 s socket timeout
            assert info(r, "slow")["owner"].decode() == hold.owner
    client.close()


def test_session_down_longer_than_lease_is_lost():
    srv = Server().start()
    try:
        session = Session(srv.client(), lease_ms=1000)
        hold = session.lock("x").acquire()
        lost = []
        session.on_lost(lost.append)
        srv.kill()
        t0 = time.monotonic()
        assert hold.lost.wait(5)
        print(f"server gone: hold lost ({hold.lost_reason}) {(time.monotonic() - t0) * 1000:.0f} ms after the kill")
        assert hold.lost_reason == "session-down" and lost == [hold]
        session.close()
    finally:
        srv.cleanup()
