"""ModuleLock against redis-py's own Lock tests (tests/test_lock.py in
redis-py), rewritten for the module: "no longer owned" is made with
LOCK.FORCERELEASE or an overwrite instead of a SET of the token key."""

import threading
import time

import pytest
from redis.exceptions import LockError, LockNotOwnedError

from redis_lock_client import ModuleLock, close_default_session, default_session

from conftest import info, wait_for, waiters


@pytest.fixture
def lk(r):
    def make(name, **kw):
        return r.lock(name, lock_class=ModuleLock, **kw)

    yield make
    close_default_session(r)


def test_lock(r, lk):
    lock = lk("foo")
    assert lock.acquire(blocking=False)
    i = info(r, "foo")
    assert i["owner"] == lock.local.token
    assert i["keepalive_client"] == default_session(r).session_client_id()  # timeout=None: kept alive
    lock.release()
    assert r.get("foo") is None


def test_lock_token(r, lk):
    lock = lk("foo")
    assert lock.acquire(blocking=False, token="abc")
    assert info(r, "foo")["owner"] == b"abc"
    assert lock.local.token == b"abc"
    lock.release()


def test_locked_and_owned(r, lk):
    lock = lk("foo")
    assert not lock.locked() and not lock.owned()
    lock.acquire(blocking=False)
    assert lock.locked() and lock.owned()
    other = lk("foo")
    assert other.locked() and not other.owned()
    lock.release()
    assert not lock.locked() and not lock.owned()


def test_competing_locks(lk):
    lock1 = lk("foo")
    lock2 = lk("foo")
    assert lock1.acquire(blocking=False)
    assert not lock2.acquire(blocking=False)
    lock1.release()
    assert lock2.acquire(blocking=False)
    assert not lock1.acquire(blocking=False)
    lock2.release()


def test_timeout(r, lk):
    lock = lk("foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl("foo") <= 10000
    assert "keepalive_client" not in info(r, "foo")
    lock.release()


def test_float_timeout(r, lk):
    lock = lk("foo", timeout=9.5)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl("foo") <= 9500
    lock.release()


def test_blocking_timeout(lk):
    lock1 = lk("foo")
    assert lock1.acquire(blocking=False)
    bt = 0.2
    lock2 = lk("foo", blocking_timeout=bt)
    start = time.monotonic()
    assert not lock2.acquire()
    assert time.monotonic() - start >= bt
    lock1.release()


def test_blocking_waits_for_release(r, lk):
    lock1 = lk("foo")
    lock1.acquire()
    got = []
    t = threading.Thread(target=lambda: got.append(lk("foo").acquire()))
    t.start()
    wait_for("queued", lambda: waiters(r, "foo") == 1)
    lock1.release()
    t.join(5)
    assert got == [True]


def test_context_manager(r, lk):
    with lk("foo", timeout=10) as lock:
        assert info(r, "foo")["owner"] == lock.local.token
    assert r.get("foo") is None


def test_context_manager_raises_when_not_acquired(lk):
    lk("foo").acquire(blocking=False)
    with pytest.raises(LockError):
        with lk("foo", blocking_timeout=0.1):
            pass


def test_releasing_unlocked_lock_raises_error(lk):
    with pytest.raises(LockError):
        lk("foo").release()


def test_releasing_lock_no_longer_owned_raises_error(r, lk):
    lock = lk("foo")
    lock.acquire(blocking=False)
    r.execute_command("LOCK.FORCERELEASE", "foo")
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert lock.local.token is None
    lock2 = lk("bar", timeout=10)
    lock2.acquire()
    r.delete("bar")
    r.set("bar", "a")
    with pytest.raises(LockNotOwnedError):
        lock2.release()


def test_extend_lock(r, lk):
    lock = lk("foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl("foo") <= 10000
    assert lock.extend(10)
    assert 16000 < r.pttl("foo") <= 20000
    lock.release()


def test_extend_lock_replace_ttl(r, lk):
    lock = lk("foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert lock.extend(10, replace_ttl=True)
    assert 8000 < r.pttl("foo") <= 10000
    lock.release()


def test_extend_lock_float(r, lk):
    lock = lk("foo", timeout=10.5)
    assert lock.acquire(blocking=False)
    assert lock.extend(10.5)
    assert 16000 < r.pttl("foo") <= 21000
    lock.release()


def test_extending_unlocked_lock_raises_error(lk):
    with pytest.raises(LockError):
        lk("foo", timeout=10).extend(10)


def test_extending_lock_with_no_timeout_raises_error(lk):
    lock = lk("foo")
    assert lock.acquire(blocking=False)
    with pytest.raises(LockError):
        lock.extend(10)
    lock.release()


def test_extending_lock_no_longer_owned_raises_error(r, lk):
    lock = lk("foo", timeout=10)
    assert lock.acquire(blocking=False)
    r.execute_command("LOCK.FORCERELEASE", "foo")
    with pytest.raises(LockNotOwnedError):
        lock.extend(10)


def test_reacquire_lock(r, lk):
    lock = lk("foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert r.pexpire("foo", 5000)
    assert r.pttl("foo") <= 5000
    assert lock.reacquire()
    assert 8000 < r.pttl("foo") <= 10000
    lock.release()


def test_reacquiring_unlocked_lock_raises_error(lk):
    with pytest.raises(LockError):
        lk("foo", timeout=10).reacquire()


def test_reacquiring_lock_with_no_timeout_raises_error(lk):
    lock = lk("foo")
    assert lock.acquire(blocking=False)
    with pytest.raises(LockError):
        lock.reacquire()
    lock.release()


def test_reacquiring_lock_no_longer_owned_raises_error(r, lk):
    lock = lk("foo", timeout=10)
    assert lock.acquire(blocking=False)
    r.execute_command("LOCK.FORCERELEASE", "foo")
    with pytest.raises(LockNotOwnedError):
        lock.reacquire()


def test_lock_error_gives_correct_lock_name(lk):
    lock = lk("foo")
    with pytest.raises(LockError) as e:
        lock.release()
    if hasattr(e.value, "lock_name"):
        assert e.value.lock_name == "foo"


def test_thread_local_token(lk):
    lock = lk("foo", timeout=10)
    assert lock.acquire(blocking=False)
    seen = []
    t = threading.Thread(target=lambda: seen.append(getattr(lock.local, "token", None)))
    t.start()
    t.join()
    assert seen == [None]
    lock.release()
