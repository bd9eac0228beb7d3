"""``ModuleLock`` for ``redis.asyncio``: ``r.lock(name, timeout=10, lock_class=ModuleLock)``.

Same mapping as the sync drop-in (see ``redis_lock_client.dropin``).
"""

import asyncio
import threading
import uuid
import weakref
from types import SimpleNamespace

import redis.asyncio.lock
import redis.exceptions as rex

from .. import _common as c
from ..dropin import lock_error

_sessions = weakref.WeakKeyDictionary()


async def default_session(client, lease_ms=30000):
    from . import Session

    s = _sessions.get(client)
    if s is None or s._closed:
        s = Session(client, lease_ms=lease_ms, name="dropin")
        _sessions[client] = s
        await s.start()
    return s


async def close_default_session(client):
    s = _sessions.pop(client, None)
    if s is not None:
        await s.close()


class ModuleLock(redis.asyncio.lock.Lock):
    def __init__(self, redis, name, timeout=None, sleep=0.1, blocking=True,
                 blocking_timeout=None, thread_local=True, raise_on_release_error=True, **_ignored):
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
        self._holds = {}

    def register_scripts(self):
        pass

    def _err(self, cls, message):
        return lock_error(cls, message, self.name)

    async def acquire(self, blocking=None, blocking_timeout=None, token=None):
        from . import _cancel_requests, _is_cluster, blocking_call

        cancels = _cancel_requests()

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
            block = int(blocking_timeout * 1000) or None
        args = ["LOCK.ACQUIRE", self.name, token]
        session = None
        if self.timeout:
            args += ["PX", max(1, int(self.timeout * 1000))]
        else:
            session = await default_session(self.redis)
            await session._session_conn(session._node_of(self.name))
            args += ["PX", session.lease_ms, "SESSION", session.token]
        args.append("FENCE")
        if block is not None:
            args += ["BLOCK", block]
        cleanup = ["LOCK.RELEASE", self.name, token]
        on_fail = session._pending.append if session else (lambda a: None)
        cluster = _is_cluster(self.redis)
        try:
            reply = await blocking_call(self.redis, cluster, args, block, cleanup, on_fail, cancels)
        except c.NoSession:
            await session._wait_session(self.name)
            reply = await blocking_call(self.redis, cluster, args, block, cleanup, on_fail, cancels)
        if reply is None:
            return False
        if session is not None:
            self._holds[token] = session._track("x", (self.name,), token.decode(), [int(reply)])
        self.local.token = token
        self.fencing_token = int(reply)
        return True

    async def do_acquire(self, token):
        return await self.acquire(blocking=False, token=token)

    async def locked(self):
        return bool(await self.redis.exists(self.name))

    async def owned(self):
        if self.local.token is None:
            return False
        try:
            info = await self.redis.execute_command("LOCK.INFO", self.name)
        except rex.ResponseError:
            return False
        if not info:
            return False
        if isinstance(info, dict):
            owner = info.get(b"owner", info.get("owner"))
        else:
            fields = dict(zip(info[::2], info[1::2]))
            owner = fields.get(b"owner", fields.get("owner"))
        if owner is not None and not isinstance(owner, bytes):
            owner = self.redis.get_encoder().encode(owner)
        return owner == self.local.token

    async def release(self):
        expected = self.local.token
        if expected is None:
            raise self._err(rex.LockError, "Cannot release a lock that's not owned or is already unlocked.")
        self.local.token = None
        await self.do_release(expected)

    async def do_release(self, expected_token):
        h = self._holds.pop(expected_token, None)
        if h is not None:
            h.count = 0
            h.session._forget(h)
        try:
            await self.redis.execute_command("LOCK.RELEASE", self.name, expected_token)
        except rex.ResponseError as e:
            if c.error_code(e) in ("NOTOWNER", "WRONGTYPE"):
                raise self._err(rex.LockNotOwnedError, "Cannot release a lock that's no longer owned") from None
            raise

    async def _renew(self, ms, what):
        try:
            await self.redis.execute_command("LOCK.RENEW", self.name, self.local.token, "PX", ms)
        except rex.ResponseError as e:
            if c.error_code(e) in ("NOTOWNER", "WRONGTYPE"):
                raise self._err(rex.LockNotOwnedError, f"Cannot {what} a lock that's no longer owned") from None
            raise
        return True

    async def do_extend(self, additional_time, replace_ttl):
        ms = int(additional_time * 1000)
        if not replace_ttl:
            pttl = await self.redis.pttl(self.name)
            if pttl is None or pttl < 0:
                raise self._err(rex.LockNotOwnedError, "Cannot extend a lock that's no longer owned")
            ms += pttl
        return await self._renew(max(1, ms), "extend")

    async def do_reacquire(self):
        return await self._renew(max(1, int(self.timeout * 1000)), "reacquire")
