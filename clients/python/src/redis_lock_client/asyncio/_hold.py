"""The asyncio core's holds: :class:`Hold` and :class:`Permit`, the
threaded ones' twins (their state is shared, ``_books``) with an
:class:`asyncio.Event` for ``lost`` and coroutines for ``release`` and
``extend``."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from .._books import HoldState, PermitState

__all__ = ["Hold", "Permit"]


class Hold(HoldState):
    """One owner's hold (see the sync ``Hold``); ``lost`` is an asyncio.Event."""

    _lost: Optional[asyncio.Event]

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._task: Optional[asyncio.Task[Any]] = None  # the task that took it (re-entry is per task)

    @property
    def lost(self) -> asyncio.Event:
        """An :class:`asyncio.Event`, set when the hold is lost."""
        if self._lost is None:
            self._lost = asyncio.Event()
            if self.lost_reason is not None:
                self._lost.set()
        return self._lost

    def _signal_lost(self) -> None:
        if self._lost is not None:
            self._lost.set()  # (made already set if asked for later)

    async def release(self) -> None:
        await self.session._release(self)

    async def extend(self, lease_ms: Optional[int] = None) -> int:
        lease: int = await self.session._renew(self, lease_ms)
        return lease

    async def __aenter__(self) -> "Hold":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.count > 0:
            await self.release()


class Permit(PermitState, Hold):
    """Permits of a semaphore held by one owner (see the sync ``Permit``);
    ``lost`` is an :class:`asyncio.Event`."""

    async def release(self, permits: Optional[int] = None) -> None:
        """Give back ``permits`` of the permits (default: all)."""
        if self._gives_back_some(permits):
            await self.session._sem_release_some(self, permits)
            return
        await self.session._release(self)
