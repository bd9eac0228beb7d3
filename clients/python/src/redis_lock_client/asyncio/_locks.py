"""The asyncio locks: a lock, a multi-lock or one side of a read-write lock
is an :class:`Acquirable` (re-entry per task), :class:`RWLock` hands out
its sides.  The session's core takes and keeps the holds."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional, Tuple

from ._core import SessionCore
from ._hold import Hold

__all__ = ["Acquirable", "RWLock"]


class Acquirable:
    """What ``session.lock``, ``multilock`` and a read-write lock's sides
    return: ``await acquire()`` -> :class:`Hold`, or ``async with``."""

    def __init__(self, session: SessionCore, kind: str, keys: Tuple[Any, ...]) -> None:
        self.session = session
        self.kind = kind
        self.keys = keys
        self._held: Dict[Optional[asyncio.Task[Any]], List[Hold]] = {}  # each task's holds taken by ``async with``

    async def acquire(self, timeout: Optional[float] = None, owner: Any = None) -> Hold:
        """``timeout=None`` waits forever, ``0`` tries once, ``seconds`` then BusyError.
        ``owner``: as the threaded ``acquire`` (the owner of another of this
        session's holds; a wait closing a cycle raises ``DeadlockError``)."""
        return await self.session._acquire(self.kind, self.keys, timeout, owner)

    async def __aenter__(self) -> Hold:
        h = await self.acquire()
        self._held.setdefault(asyncio.current_task(), []).append(h)
        return h

    async def __aexit__(self, *exc: Any) -> None:
        task = asyncio.current_task()
        stack = self._held[task]
        h = stack.pop()
        if not stack:
            del self._held[task]
        await h.release()


class RWLock:
    """A read-write lock: ``read_lock()`` shared, ``write_lock()`` exclusive."""

    def __init__(self, session: Any, name: Any) -> None:
        self.session = session
        self.name = name

    def read_lock(self) -> Acquirable:
        return Acquirable(self.session, "r", (self.name,))

    def write_lock(self) -> Acquirable:
        return Acquirable(self.session, "w", (self.name,))
