"""One error table (docs/clients.md): refused credentials and permissions
are AuthenticationError (never retried, never "unavailable"), a server
without the module says so, a lease below the server's floor is refused
when the session opens, in the user's words."""

import threading

import pytest
import redis
import redis.asyncio as aredis
import redis.exceptions as rex

from redis_lock_client import (
    AuthenticationError,
    LeaseTooShortError,
    LockError,
    ModuleLock,
    ModuleNotLoadedError,
    Session,
    UnavailableError,
)
from redis_lock_client.asyncio import ModuleLock as AsyncModuleLock
from redis_lock_client.asyncio import Session as AsyncSession

from conftest import Server, info


@pytest.fixture(scope="module")
def secured():
    srv = Server(password="sekret").start()
    admin = srv.client()
    # a user that may log in but not run the module's commands
    admin.acl_setuser("nolock", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                      commands=["+@all", "-lock.session", "-lock.acquire"])
    admin.acl_setuser("noacquire", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                      commands=["+@all", "-lock.acquire"])
    try:
        yield srv
    finally:
        srv.cleanup()


def connections_received(srv):
    return srv.client().info("stats")["total_connections_received"]


def test_wrong_password_is_authentication_error(secured):
    threads = threading.active_count()
    before = connections_received(secured)
    bad = redis.Redis(port=secured.port, password="wrong")
    with pytest.raises(AuthenticationError) as e:
        Session(bad)
    assert isinstance(e.value, rex.AuthenticationError) and isinstance(e.value, LockError)
    assert not isinstance(e.value, UnavailableError)
    with pytest.raises(AuthenticationError):
        bad.lock("k", lock_class=ModuleLock).acquire(blocking_timeout=5)
    # refused once each, not retried (the fixture's own INFO client is one more)
    assert connections_received(secured) - before <= 4
    assert threading.active_count() == threads  # no session thread left retrying


def test_no_password_is_authentication_error(secured):
    with pytest.raises(AuthenticationError):
        Session(redis.Redis(port=secured.port))


def test_noperm_is_authentication_error(secured):
    client = redis.Redis(port=secured.port, username="nolock", password="pw")
    with pytest.raises(AuthenticationError, match="(?i)noperm|permission"):
        Session(client)  # LOCK.SESSION refused by the ACL
    client = redis.Redis(port=secured.port, username="noacquire", password="pw")
    with Session(client) as session:
        with pytest.raises(AuthenticationError, match="(?i)noperm|permission"):
            session.lock("perm").acquire(timeout=1)  # LOCK.ACQUIRE refused
    with pytest.raises(AuthenticationError):
        client.lock("perm", lock_class=ModuleLock, timeout=5).acquire(blocking=False)
    client.close()


async def test_async_wrong_password(secured):
    bad = aredis.Redis(port=secured.port, password="wrong")
    try:
        with pytest.raises(AuthenticationError):
            await AsyncSession(bad).start()
        with pytest.raises(AuthenticationError):
            await bad.lock("k", lock_class=AsyncModuleLock).acquire(blocking_timeout=5)
    finally:
        await bad.aclose()


def test_module_missing_is_worded_as_missing():
    srv = Server(module=False).start()
    try:
        with pytest.raises(ModuleNotLoadedError) as e:
            Session(srv.client())
        msg = str(e.value)
        assert "--loadmodule" in msg and "not loaded" in msg and "too old" not in msg
        with pytest.raises(ModuleNotLoadedError, match="--loadmodule"):
            srv.client().lock("k", lock_class=ModuleLock, timeout=5).acquire(blocking=False)
    finally:
        srv.cleanup()


def min_lease(r):
    i = r.info("lock")
    return int(i.get("lock_keepalive_min_lease_ms", i.get("keepalive_min_lease_ms")))


def test_lease_below_the_floor_refused_when_the_session_opens(r):
    threads = threading.active_count()
    floor = min_lease(r)
    with pytest.raises(LeaseTooShortError) as e:
        Session(r, lease_ms=300)
    assert isinstance(e.value, ValueError) and isinstance(e.value, LockError)
    msg = str(e.value)
    assert "lease 300 ms" in msg and str(floor) in msg and "KEEPALIVE" not in msg
    assert threading.active_count() == threads  # nothing left running
    with Session(r, lease_ms=floor) as session, session.lock("floor").acquire(timeout=0) as hold:
        assert info(r, "floor")["owner"].decode() == hold.owner


def test_the_floor_is_the_servers(r):
    """At hz 100 the server keeps shorter leases alive: the floor is read, not assumed."""
    r.config_set("hz", 100)
    try:
        floor = min_lease(r)
        assert floor < 704
        with Session(r, lease_ms=floor) as session, session.lock("hz").acquire(timeout=0):
            pass
    finally:
        r.config_set("hz", 10)
    with pytest.raises(LeaseTooShortError):
        Session(r, lease_ms=floor)


@pytest.mark.parametrize("lease_ms", [0, -1])
def test_non_positive_session_lease(r, lease_ms):
    with pytest.raises(LeaseTooShortError, match="not positive"):
        Session(r, lease_ms=lease_ms)


async def test_async_lease_below_the_floor(server):
    client = aredis.Redis(port=server.port)
    try:
        with pytest.raises(LeaseTooShortError, match="lease 300 ms is below"):
            await AsyncSession(client, lease_ms=300).start()
    finally:
        await client.aclose()


def test_dropin_negative_timeout_refused(r):
    """redis-py sends ``SET ... PX -1000``, which the server refuses; the
    drop-in refuses it before sending anything."""
    lock = r.lock("neg", lock_class=ModuleLock, timeout=-1)
    with pytest.raises(LeaseTooShortError, match="not positive"):
        lock.acquire(blocking=False)
    assert not r.exists("neg")


def test_dropin_wrong_type_key(r):
    """A key holding another type: redis-py's acquire fails (False), its
    ``with`` raises LockError naming the lock; a wait with no end raises LockError."""
    r.set("str", "x")
    lock = r.lock("str", lock_class=ModuleLock)
    assert lock.acquire(blocking=False) is False
    assert lock.acquire(blocking_timeout=0.2) is False
    with pytest.raises(rex.LockError) as e:
        lock.acquire()
    assert e.value.lock_name == "str"
    with pytest.raises(rex.LockError):
        with r.lock("str", lock_class=ModuleLock, blocking_timeout=0.1):
            pass
    assert r.get("str") == b"x"


def test_election_lease_below_the_floor(r):
    with Session(r) as session:
        election = session.election("short", lease_ms=300)
        with pytest.raises(LeaseTooShortError, match="lease 300 ms is below"):
            election.campaign(timeout=0)
        assert election.leader() is None  # nothing was sent
    with Session(r) as session, pytest.raises(LeaseTooShortError, match="not positive"):
        session.election("zero", lease_ms=0)


def test_dropin_extend_and_reacquire_as_redis_py(r):
    """redis-py's rules: an extend to a lease of 0 or less leaves the expiry
    and returns True; ``timeout=0`` is no expiry, so extend() raises
    LockNotOwnedError and reacquire() returns True, changing nothing."""
    lock = r.lock("ext", lock_class=ModuleLock, timeout=10)
    assert lock.acquire(blocking=False)
    old = r.pttl("ext")
    assert lock.extend(-1, replace_ttl=True) is True
    assert lock.extend(-20) is True
    assert 0 < r.pttl("ext") <= old and lock.owned()
    lock.release()
    forever = r.lock("zero", lock_class=ModuleLock, timeout=0)
    assert forever.acquire(blocking=False)
    with pytest.raises(rex.LockNotOwnedError):
        forever.extend(0)
    assert forever.reacquire() is True
    assert forever.owned()
    forever.release()
    assert not r.exists("zero")
