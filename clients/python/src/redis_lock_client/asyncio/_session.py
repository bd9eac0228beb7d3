"""The asyncio public :class:`Session`: the core session (``_core``) and the
factories of every object on it, the threaded ``_session``'s twin.  It
stands above the objects, which know only the core; it hands itself to
``_implicit`` so that implicit sessions have the factories too."""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from .. import _common as c
from . import _implicit
from ._core import SessionCore
from ._election import Election
from ._latch import Latch
from ._locks import Acquirable, RWLock
from ._semaphore import Semaphore

__all__ = ["Session"]


class Session(SessionCore):
    """The asyncio Session: ``async with Session(r) as s`` or ``s = await Session(r).start()``."""

    def lock(self, name: Any) -> Acquirable:
        return Acquirable(self, "x", (name,))

    def rwlock(self, name: Any) -> RWLock:
        return RWLock(self, name)

    def multilock(self, keys: Tuple[Any, ...]) -> Acquirable:
        return Acquirable(self, "m", c.multilock_keys(keys))

    def semaphore(self, name: Any, permits: Optional[int] = None) -> Semaphore:
        """A semaphore whose permits are bound to this session (see :class:`Semaphore`)."""
        return Semaphore(self, name, permits)

    def election(
        self,
        name: Any,
        value: Any = None,
        lease_ms: int = 5000,
        on_lost: Optional[Callable[..., Any]] = None,
    ) -> Election:
        """The election of a leader for ``name`` (see :class:`Election`)."""
        return Election(self, name, value=value, lease_ms=lease_ms, on_lost=on_lost)

    def latch(self, name: Any) -> Latch:
        """A count-down latch on this session's client (see :class:`Latch`)."""
        return Latch(self.client, name)


_implicit.session_class = Session
