"""``ModuleLock`` for ``redis.asyncio``: ``r.lock(name, timeout=10, lock_class=ModuleLock)``.

Same mapping as the sync drop-in (see ``redis_lock_client.dropin``): the
implicit session of ``timeout=None`` locks is one per connection pool (per
cluster client), ended when the pool is disconnected (``await
client.aclose()`` of a client that made its pool) or garbage-collected.
"""

from __future__ import annotations

from typing import Any, Callable, List, Literal, Optional, Union, cast

import redis.asyncio.lock
import redis.exceptions as rex

from .. import _common as c
from ..dropin import _ModuleLockBase, lease_ms_of, owner_from_info
from ..errors import CommandError
from . import _implicit
from ._session import Session
from ._wait import blocking_call, cancel_requests

__all__ = ["ModuleLock", "default_session", "close_default_session"]


async def default_session(client: Any, lease_ms: int = 30000) -> Session:
    """The implicit session of ``client``'s connection pool (see the module's doc)."""
    # (made of the public Session, which handed itself to _implicit)
    return cast(Session, await _implicit.default_session(client, lease_ms))


close_default_session = _implicit.close_default_session


class ModuleLock(_ModuleLockBase, redis.asyncio.lock.Lock):
    """The asyncio drop-in ``lock_class`` (see the sync ``ModuleLock``);
    ``on_lost`` may also be a coroutine function."""

    async def acquire(
        self,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[float] = None,
        token: Optional[Union[str, bytes]] = None,
        *,
        sleep: Optional[float] = None,  # (accepted and ignored: no polling)
    ) -> bool:
        cancels = cancel_requests()
        owner, new_owner = self._owner(token)
        block = self._block(blocking, blocking_timeout)
        session = None
        if not self.timeout:
            session = await default_session(self.redis)
            await session._session_conn(session._node_of(self.name))
        args = self._acquire_args(owner, block, session)
        cleanup = ["LOCK.RELEASE", self.name, owner]
        on_fail: Callable[[List[Any]], None] = session._pending.append if session else (lambda a: None)
        cluster = c.is_cluster(self.redis)
        try:
            try:
                reply = await blocking_call(self.redis, cluster, args, block, cleanup, on_fail, cancels, new_owner)
            except c.NoSession:
                assert session is not None
                await session._wait_session(self.name)
                reply = await blocking_call(self.redis, cluster, args, block, cleanup, on_fail, cancels, new_owner)
        except CommandError as e:
            if c.error_code(e) != "WRONGTYPE":
                raise
            return self._wrong_type(block)
        return self._acquired(args, reply, session)

    async def do_acquire(self, token: Union[str, bytes]) -> bool:
        return await self.acquire(blocking=False, token=token)

    async def locked(self) -> bool:
        return bool(await self.redis.exists(self.name))

    async def _info_owner(self) -> Optional[bytes]:
        try:
            reply = await self.redis.execute_command("LOCK.INFO", self.name)
        except rex.ResponseError:
            return None  # not a lock (overwritten)
        return owner_from_info(reply, self.redis.get_encoder())

    async def owned(self) -> bool:
        if self.local.token is None:
            return False
        return bool(await self._info_owner() == self.local.token)

    async def release(self) -> None:
        expected = self.local.token
        if expected is None:
            raise self._err(rex.LockError, "Cannot release a lock that's not owned or is already unlocked.")
        try:
            await self.do_release(expected)
        except rex.LockNotOwnedError:
            if self.local.token == expected:
                self.local.token = None
            raise
        if self.local.token == expected:
            self.local.token = None

    async def do_release(self, expected_token: bytes) -> None:
        try:
            await self.redis.execute_command("LOCK.RELEASE", self.name, expected_token)
        except rex.ResponseError as e:
            if c.error_code(e) in ("NOTOWNER", "WRONGTYPE"):
                self._untrack(expected_token)
                raise self._err(rex.LockNotOwnedError, "Cannot release a lock that's no longer owned") from None
            raise
        self._untrack(expected_token)

    async def _renew(self, ms: int, what: str) -> Literal[True]:
        try:
            await self.redis.execute_command("LOCK.RENEW", self.name, self.local.token, "PX", ms)
        except rex.ResponseError as e:
            if c.error_code(e) in ("NOTOWNER", "WRONGTYPE"):
                raise self._not_owned(what) from None
            raise
        return True

    async def _check_owned(self, what: str) -> Literal[True]:
        if await self._info_owner() != self.local.token:
            raise self._not_owned(what)
        return True

    async def do_extend(self, additional_time: float, replace_ttl: bool) -> Literal[True]:
        if not self.timeout:  # timeout=0: no expiry in redis-py, nothing to extend
            raise self._not_owned("extend")
        ms = int(additional_time * 1000)
        if not replace_ttl:
            pttl = await self.redis.pttl(self.name)
            if pttl is None or pttl < 0:
                raise self._not_owned("extend")
            ms += pttl
        if ms <= 0:  # as redis-py: the expiry is left as it is
            return await self._check_owned("extend")
        return await self._renew(ms, "extend")

    async def do_reacquire(self) -> Literal[True]:
        assert self.timeout is not None
        if not self.timeout:  # timeout=0: as redis-py, nothing to reset
            return await self._check_owned("reacquire")
        return await self._renew(lease_ms_of(self.timeout), "reacquire")
