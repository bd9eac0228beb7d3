"""The asyncio :class:`Semaphore`, the threaded one's twin.  The session's
core takes and keeps the :class:`~redis_lock_client.asyncio._hold.Permit`;
given a client instead of a session, the client's implicit session
(``_implicit``) is used."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional

from .. import _common as c
from . import _implicit
from ._core import SessionCore
from ._hold import Permit
from ._wait import cancel_requests

__all__ = ["Semaphore"]


class Semaphore:
    """The asyncio ``Semaphore`` (see the sync one): ``Semaphore(session,
    name, permits=None)`` or ``session.semaphore(name, permits)``; given a
    ``redis.asyncio`` client instead of a session, its ``default_session``
    is used (opened at the first command).  ``await sem.acquire(...)`` ->
    :class:`Permit`; ``async with sem as permit:`` takes one permit."""

    def __init__(self, session: Any, name: Any, permits: Optional[int] = None) -> None:
        c.check_initial_permits(permits)
        self._session = session if isinstance(session, SessionCore) else None
        self._client = None if self._session is not None else session
        self.name = name
        self.initial_permits = permits
        self._init_done = permits is None
        self._held: Dict[Optional[asyncio.Task[Any]], List[Permit]] = {}  # each task's ``async with`` permits

    async def _get_session(self) -> SessionCore:
        if self._session is None or (self._session._closed and self._client is not None):
            self._session = await _implicit.default_session(self._client)
        return self._session

    @property
    def session(self) -> Optional[SessionCore]:
        return self._session

    async def _execute(self, *args: Any) -> Any:
        return await (await self._get_session())._execute(*args)

    async def _ensure_init(self) -> None:
        if not self._init_done:
            await self._execute("SEM.INIT", self.name, self.initial_permits)
            self._init_done = True

    async def init(self, permits: Optional[int]) -> bool:
        """``SEM.INIT`` (after this object's own ``permits``, if given): True
        if set, False if the semaphore existed."""
        await self._ensure_init()
        return bool(await self._execute("SEM.INIT", self.name, permits))

    async def acquire(
        self, permits: int = 1, blocking: bool = True, timeout: Optional[float] = None
    ) -> Permit:
        """Take ``permits`` permits -> :class:`Permit` (``timeout`` as the sync
        ``Semaphore.acquire``; then :class:`BusyError`)."""
        c.check_permits(permits)
        if not blocking:
            if timeout not in (None, 0):
                raise ValueError("can't specify a timeout for a non-blocking acquire")
            timeout = 0
        cancels = cancel_requests()
        await self._ensure_init()
        return await (await self._get_session())._sem_acquire(self.name, permits, timeout, cancels)

    async def info(self) -> Optional[Dict[str, Any]]:
        """``SEM.INFO`` as a dict, or None if the semaphore does not exist."""
        await self._ensure_init()
        return c.sem_info(await self._execute("SEM.INFO", self.name))

    async def available(self) -> int:
        info = await self.info()
        return 0 if info is None else int(info["available"])

    async def add(self, delta: int) -> int:
        await self._ensure_init()
        return int(await self._execute("SEM.ADD", self.name, delta))

    async def __aenter__(self) -> Permit:
        p = await self.acquire()
        self._held.setdefault(asyncio.current_task(), []).append(p)
        return p

    async def __aexit__(self, *exc: Any) -> None:
        task = asyncio.current_task()
        stack = self._held[task]
        p = stack.pop()
        if not stack:
            del self._held[task]
        await p.release()
