"""``ModuleLock``: redis-py's ``Lock`` on the module's commands.

    r.lock("name", timeout=10, lock_class=ModuleLock)

behaves from the outside like ``redis.lock.Lock`` (same methods, return
values and exceptions), but waits in the server's fair queue (``BLOCK``)
instead of polling every ``sleep`` seconds (``sleep`` is accepted and
ignored).  ``timeout`` (seconds) is the lease, as in redis-py.
``timeout=None`` (redis-py: no expiry) becomes a hold kept alive by the
server through a per-client :class:`~redis_lock_client.Session`
(``default_session(client)``, made at the first such acquire): it lasts as
long as this process's session connection lives (and at most its lease,
30 s by default, after the process dies), instead of forever.
"""

import threading
import uuid
import weakref
from types import SimpleNamespace

import redis.exceptions as rex
import redis.lock

from . import _common as c
from ._sync import _is_cluster, blocking_call, Session

_sessions = weakref.WeakKeyDictionary()
_sessions_lock = threading.Lock()


def default_session(client, lease_ms=30000):
    """The session ``ModuleLock`` uses for ``timeout=None`` locks of ``client``."""
    with _sessions_lock:
        s = _sessions.get(client)
        if s is None or s._closed:
            s = _sessions[client] = Session(client, lease_ms=lease_ms, name="dropin")
        return s


def close_default_session(client):
    with _sessions_lock:
        s = _sessions.pop(client, None)
    if s is not None:
        s.close()


def lock_error(cls, message, name):
    try:
        return cls(message, lock_name=name)
    except TypeError:  # redis-py before 5.1 has no lock_name
        return cls(message)


class ModuleLock(redis.lock.Lock):
    """A drop-in ``lock_class`` for ``redis.Redis.lock`` (and ``RedisCluster.lock``)."""

    def __init__(
        self,
        redis,
        name,
        timeout=None,
        sleep=0.1,
        blocking=True,
        blocking_timeout=None,
        thread_local=True,
        raise_on_release_error=True,
        **_ignored,
    ):
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.local = threading.local() if self.thread_local else SimpleNamespace()
        self.local.token = None
        self._holds = {}  # token -> session Hold (timeout=None only)

    def register_scripts(self):  # no Lua: the module's commands do it
        pass

    def _err(self, cls, message):
        return lock_error(cls, message, self.name)

    def acquire(self, sleep=None, blocking=None, blocking_timeout=None, token=None):
        if token is None:
            token = uuid.uuid1().hex.encode()
        else:
            token = self.redis.get_encoder().encode(token)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        if not blocking:
            block = None
        elif blocking_timeout is None:
            block = 0
        else:
            block = max(0, int(blocking_timeout * 1000))
            if block == 0:
                block = None
        args = ["LOCK.ACQUIRE", self.name, token]
        session = None
        if self.timeout:
            args += ["PX", max(1, int(self.timeout * 1000))]
        else:
            session = default_session(self.redis)
            session._session_conn(session._node_of(self.name))
            args += ["PX", session.lease_ms, "SESSION", session.token]
        args.append("FENCE")
        if block is not None:
            args += ["BLOCK", block]
        cluster = _is_cluster(self.redis)
        try:
            reply = blocking_call(
                self.redis, cluster, args, block, ["LOCK.RELEASE", self.name, token],
                session._pending_add if session else (lambda a: None),
            )
        except c.NoSession:
            session._wait_session(self.name)
            reply = blocking_call(
                self.redis, cluster, args, block, ["LOCK.RELEASE", self.name, token],
                session._pending_add,
            )
        if reply is None:
            return False
        if session is not None:
            self._holds[token] = session._track("x", (self.name,), token.decode(), [int(reply)])
        self.local.token = token
        self.fencing_token = int(reply)
        return True

    def do_acquire(self, token):
        return self.acquire(blocking=False, token=token)

    def locked(self):
        return bool(self.redis.exists(self.name))

    def _info_owner(self):
        try:
            info = self.redis.execute_command("LOCK.INFO", self.name)
        except rex.ResponseError:
            return None  # not a lock (overwritten)
        if not info:
            return None
        if isinstance(info, dict):
            owner = info.get(b"owner", info.get("owner"))
        else:
            fields = dict(zip(info[::2], info[1::2]))
            owner = fields.get(b"owner", fields.get("owner"))
        if owner is not None and not isinstance(owner, bytes):
            owner = self.redis.get_encoder().encode(owner)
        return owner

    def owned(self):
        return self.local.token is not None and self._info_owner() == self.local.token

    def _untrack(self, token):
        h = self._holds.pop(token, None)
        if h is not None:
            h.count = 0
            h.session._forget(h)

    def do_release(self, expected_token):
        self._untrack(expected_token)
        try:
            self.redis.execute_command("LOCK.RELEASE", self.name, expected_token)
        except rex.ResponseError as e:
            code = c.error_code(e)
            if code in ("NOTOWNER", "WRONGTYPE"):
                raise self._err(rex.LockNotOwnedError, "Cannot release a lock that's no longer owned") from None
            raise

    def _renew(self, ms, what):
        try:
            self.redis.execute_command("LOCK.RENEW", self.name, self.local.token, "PX", ms)
        except rex.ResponseError as e:
            if c.error_code(e) in ("NOTOWNER", "WRONGTYPE"):
                raise self._err(rex.LockNotOwnedError, f"Cannot {what} a lock that's no longer owned") from None
            raise
        return True

    def do_extend(self, additional_time, replace_ttl):
        ms = int(additional_time * 1000)
        if not replace_ttl:
            pttl = self.redis.pttl(self.name)
            if pttl is None or pttl < 0:
                raise self._err(rex.LockNotOwnedError, "Cannot extend a lock that's no longer owned")
            ms += pttl
        return self._renew(max(1, ms), "extend")

    def do_reacquire(self):
        return self._renew(max(1, int(self.timeout * 1000)), "reacquire")
