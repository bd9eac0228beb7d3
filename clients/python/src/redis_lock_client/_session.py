"""The threaded public :class:`Session`: the core session (``_core``) and the
factories of every object on it.  It stands above the objects, which know
only the core; it hands itself to ``_implicit`` so that implicit sessions
have the factories too."""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from . import _implicit
from ._core import SessionCore
from ._election import Election
from ._latch import Latch
from ._locks import Lock, MultiLock, RWLock
from ._semaphore import Semaphore

__all__ = ["Session"]


class Session(SessionCore):
    """One session: a dedicated connection that keeps every hold taken through
    it alive (``SESSION token``) and hears of losses.

    ``client`` is a ``redis.Redis`` (also one from ``redis.sentinel.Sentinel.
    master_for``) or a ``redis.cluster.RedisCluster``.  ``lease_ms`` is every
    hold's lease: the server renews it at half while the session connection
    lives; a hold outlives a dead session by at most one lease.
    """

    def lock(self, name: Any) -> Lock:
        """An exclusive lock (reentrant per thread)."""
        return Lock(self, name)

    def rwlock(self, name: Any) -> RWLock:
        """A read-write lock: ``.read_lock()``, ``.write_lock()``."""
        return RWLock(self, name)

    def multilock(self, keys: Tuple[Any, ...]) -> MultiLock:
        """All of ``keys`` or none (``LOCK.MACQUIRE``); on a cluster the keys
        must share one ``{hash tag}``."""
        return MultiLock(self, keys)

    def semaphore(self, name: Any, permits: Optional[int] = None) -> Semaphore:
        """A counting semaphore whose permits are bound to this session
        (``SEM.*``); ``permits``: set the total once (``SEM.INIT``) if the
        semaphore does not exist yet."""
        return Semaphore(self, name, permits)

    def election(
        self,
        name: Any,
        value: Any = None,
        lease_ms: int = 5000,
        on_lost: Optional[Callable[..., Any]] = None,
    ) -> Election:
        """The election of a leader for ``name`` (``ELECT.*``), its
        leaderships kept by this session: see :class:`Election`."""
        return Election(self, name, value=value, lease_ms=lease_ms, on_lost=on_lost)

    def latch(self, name: Any) -> Latch:
        """A count-down latch (``LATCH.*``) on this session's client (a latch
        needs no session: ``Latch(client, name)`` is the same)."""
        return Latch(self.client, name)


_implicit.session_class = Session
