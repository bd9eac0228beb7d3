"""``ModuleLock``: redis-py's ``Lock`` on the module's commands.

    r.lock("name", timeout=10, lock_class=ModuleLock)

behaves from the outside like ``redis.lock.Lock`` (same methods, return
values and exceptions), but waits in the server's fair queue (``BLOCK``)
instead of polling every ``sleep`` seconds (``sleep`` is accepted and
ignored).  ``timeout`` (seconds) is the lease, as in redis-py.
``timeout=None`` (or 0; redis-py: no expiry) becomes a hold kept alive by the
server through the implicit :class:`~redis_lock_client.Session` of the
client's connection pool (``default_session(client)``, made at the first
such acquire): it lasts as long as this process's session connection lives
(and at most its lease, 30 s by default, after the process dies), instead of
forever.  The implicit session ends with its pool: when the pool is
disconnected (``client.close()`` of a client that made its pool) or
garbage-collected.
"""

from __future__ import annotations

import threading
import uuid
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple, Union, cast

import redis.exceptions as rex
import redis.lock

from . import _common as c
from . import _implicit
from ._session import Session
from ._wait import blocking_call
from .errors import CommandError, LeaseTooShortError

__all__ = ["ModuleLock", "default_session", "close_default_session"]


def default_session(client: Any, lease_ms: int = 30000) -> Session:
    """The implicit session ``ModuleLock`` uses for ``timeout=None`` locks of
    ``client``: one per connection pool (per cluster client), shared by every
    client on that pool, ended with the pool (see the module's doc)."""
    # (made of the public Session, which handed itself to _implicit)
    return cast(Session, _implicit.default_session(client, lease_ms))


close_default_session = _implicit.close_default_session


def lock_error(cls: type, message: str, name: Any) -> Exception:
    try:
        return cls(message, lock_name=name)  # type: ignore[no-any-return]
    except TypeError:  # redis-py before 5.1 has no lock_name
        return cls(message)  # type: ignore[no-any-return]


def lease_ms_of(timeout: float) -> int:
    """redis-py's ``timeout`` (seconds, > 0) -> the lease in ms; a negative
    one is refused (redis-py's ``SET ... PX`` is refused by the server)."""
    if timeout < 0:
        raise LeaseTooShortError(f"lease {timeout} s is not positive (timeout must be None, 0 or > 0)")
    return max(1, int(timeout * 1000))


def block_of(blocking: bool, blocking_timeout: Optional[float]) -> Optional[int]:
    """redis-py's ``blocking``/``blocking_timeout`` -> the BLOCK argument
    (0 forever), or None for one try (not blocking, or a timeout <= 0, which
    redis-py also tries once)."""
    if not blocking:
        return None
    if blocking_timeout is None:
        return 0
    return int(blocking_timeout * 1000) or None if blocking_timeout > 0 else None


def owner_from_info(reply: Any, encoder: Any) -> Optional[bytes]:
    """``LOCK.INFO``'s reply -> the owner as bytes (None: no lock)."""
    fields = c.as_map(reply)
    if not fields:
        return None
    owner = fields.get("owner")
    if owner is not None and not isinstance(owner, bytes):
        owner = encoder.encode(owner)
    return owner if isinstance(owner, bytes) else None


def _new_token() -> bytes:
    return uuid.uuid4().hex.encode()


class _ModuleLockBase:
    """What the sync and asyncio ``ModuleLock`` share: their state, and the
    steps of an acquire that do no I/O (each sends and waits in its own way)."""

    def __init__(
        self,
        redis: Any,
        name: Any,
        timeout: Optional[float] = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[float] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        on_lost: Optional[Callable[[str], Any]] = None,
        **_ignored: Any,
    ) -> None:
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.local: Any = threading.local() if self.thread_local else SimpleNamespace()
        self.local.token = None
        self.fencing_token: Optional[int] = None
        if on_lost is not None and timeout:
            raise ValueError("on_lost needs a hold kept by the session: timeout=None (a lease lock just ends)")
        self.on_lost = on_lost
        self._holds: Dict[bytes, Any] = {}  # token -> session Hold (timeout=None only)

    def register_scripts(self) -> None:  # no Lua: the module's commands do it
        pass

    def _err(self, cls: type, message: str) -> Exception:
        return lock_error(cls, message, self.name)

    def _not_owned(self, what: str) -> Exception:
        return self._err(rex.LockNotOwnedError, f"Cannot {what} a lock that's no longer owned")

    def _block(self, blocking: Optional[bool], blocking_timeout: Optional[float]) -> Optional[int]:
        """An acquire's ``blocking``/``blocking_timeout`` (None: the lock's) -> the BLOCK argument."""
        return block_of(
            self.blocking if blocking is None else blocking,
            self.blocking_timeout if blocking_timeout is None else blocking_timeout,
        )

    def _owner(self, token: Optional[Union[str, bytes]]) -> Tuple[bytes, Optional[Callable[[], bytes]]]:
        """An acquire's owner (``token``, or a fresh one) and the maker of the
        owner a wait sent again takes (a fresh one unless the caller chose it)."""
        if token is not None:
            return self.redis.get_encoder().encode(token), None
        return _new_token(), _new_token

    def _acquire_args(self, owner: bytes, block: Optional[int], session: Any) -> List[Any]:
        """``LOCK.ACQUIRE``'s arguments: with a lease (``timeout`` > 0;
        ``session`` None) or kept alive by the implicit ``session``."""
        args: List[Any] = ["LOCK.ACQUIRE", self.name, owner]
        if session is None:
            if self.on_lost is not None:
                raise ValueError("on_lost needs a hold kept by the session: timeout=None")
            assert self.timeout is not None
            args += ["PX", lease_ms_of(self.timeout)]
        else:
            args += ["PX", session.lease_ms, "SESSION", session.token]
        args.append("FENCE")
        if block is not None:
            args += ["BLOCK", block]
        return args

    def _wrong_type(self, block: Optional[int]) -> Literal[False]:
        """An acquire of a key that holds another type of value: redis-py's
        SET NX fails (False), and it polls until blocking_timeout or forever;
        the module cannot queue on it."""
        if block != 0:
            return False
        raise self._err(rex.LockError, f"Unable to acquire lock: {self.name!r} holds another type of value") from None

    def _acquired(self, args: List[Any], reply: Any, session: Any) -> bool:
        """An acquire's reply (the fencing token; None: not acquired) -> its result."""
        if reply is None:
            return False
        owner = c.owner_of(args)  # (a fresh one if the wait's connection broke)
        if session is not None:
            h = session._track("x", (self.name,), owner.decode(), [int(reply)])
            h._lost_callback = self._lost
            self._holds[owner] = h
        self.local.token = owner
        self.fencing_token = int(reply)
        return True

    def _lost(self, reason: str) -> Any:
        # (the asyncio one's on_lost may return a coroutine: its session runs it)
        return None if self.on_lost is None else self.on_lost(reason)

    def _untrack(self, token: bytes) -> None:
        h = self._holds.pop(token, None)
        if h is not None:
            h.count = 0
            h.session._forget(h)


class ModuleLock(_ModuleLockBase, redis.lock.Lock):
    """A drop-in ``lock_class`` for ``redis.Redis.lock`` (and ``RedisCluster.lock``).

    ``on_lost``: called with the reason (``forced``, ``gone``, ``maxhold``,
    ``moved``, ``notowner``, ``session-down``) when a hold kept by the
    implicit session (``timeout=None`` or 0) is lost, on the session's
    thread; pass it to ``ModuleLock(r, name, on_lost=...)`` or set
    ``lock.on_lost`` (``r.lock()`` passes no extra keyword).  A lock with a
    lease (``timeout`` > 0) ends with its lease, as redis-py's: ``on_lost``
    is refused for it.
    """

    def acquire(
        self,
        sleep: Optional[float] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[float] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        owner, new_owner = self._owner(token)
        block = self._block(blocking, blocking_timeout)
        session = None
        if not self.timeout:
            session = default_session(self.redis)
            session._session_conn(session._node_of(self.name))
        args = self._acquire_args(owner, block, session)
        cleanup = ["LOCK.RELEASE", self.name, owner]
        on_fail: Callable[[List[Any]], None] = session._pending_add if session else (lambda a: None)
        cluster = c.is_cluster(self.redis)
        try:
            try:
                reply = blocking_call(self.redis, cluster, args, block, cleanup, on_fail, new_owner)
            except c.NoSession:
                assert session is not None
                session._wait_session(self.name)
                reply = blocking_call(self.redis, cluster, args, block, cleanup, on_fail, new_owner)
        except CommandError as e:
            if c.error_code(e) != "WRONGTYPE":
                raise
            return self._wrong_type(block)
        return self._acquired(args, reply, session)

    def do_acquire(self, token: Union[str, bytes]) -> bool:
        return self.acquire(blocking=False, token=token)

    def locked(self) -> bool:
        return bool(self.redis.exists(self.name))

    def _info_owner(self) -> Optional[bytes]:
        try:
            reply = self.redis.execute_command("LOCK.INFO", self.name)
        except rex.ResponseError:
            return None  # not a lock (overwritten)
        return owner_from_info(reply, self.redis.get_encoder())

    def owned(self) -> bool:
        return self.local.token is not None and bool(self._info_owner() == self.local.token)

    def do_release(self, expected_token: bytes) -> None:  # type: ignore[override]
        try:
            self.redis.execute_command("LOCK.RELEASE", self.name, expected_token)
        except rex.ResponseError as e:
            if c.error_code(e) in ("NOTOWNER", "WRONGTYPE"):
                self._untrack(expected_token)
                raise self._err(rex.LockNotOwnedError, "Cannot release a lock that's no longer owned") from None
            raise
        self._untrack(expected_token)

    def _renew(self, ms: int, what: str) -> Literal[True]:
        try:
            self.redis.execute_command("LOCK.RENEW", self.name, self.local.token, "PX", ms)
        except rex.ResponseError as e:
            if c.error_code(e) in ("NOTOWNER", "WRONGTYPE"):
                raise self._not_owned(what) from None
            raise
        return True

    def _check_owned(self, what: str) -> Literal[True]:
        if self._info_owner() != self.local.token:
            raise self._not_owned(what)
        return True

    def do_extend(self, additional_time: float, replace_ttl: bool) -> Literal[True]:
        if not self.timeout:  # timeout=0: no expiry in redis-py, nothing to extend
            raise self._not_owned("extend")
        ms = int(additional_time * 1000)
        if not replace_ttl:
            pttl = self.redis.pttl(self.name)
            if pttl is None or pttl < 0:
                raise self._not_owned("extend")
            ms += pttl
        if ms <= 0:  # as redis-py: the expiry is left as it is
            return self._check_owned("extend")
        return self._renew(ms, "extend")

    def do_reacquire(self) -> Literal[True]:
        assert self.timeout is not None
        if not self.timeout:  # timeout=0: as redis-py, nothing to reset
            return self._check_owned("reacquire")
        return self._renew(lease_ms_of(self.timeout), "reacquire")
