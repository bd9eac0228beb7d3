"""The threaded core's holds: :class:`Hold` (a lock's, what an acquire
returns) and :class:`Permit` (a semaphore's), their state shared with the
asyncio face (``_books``).  Each is an entry of its session's books: it
releases, renews and hears of its loss through the session that made it."""

from __future__ import annotations

import threading
from typing import Any, Optional

from ._books import HoldState, PermitState

__all__ = ["Hold", "Permit"]

#: guards the making of a hold's ``lost`` event (asked for on any thread)
_event_lock = threading.Lock()


class Hold(HoldState):
    """One owner's hold of a lock: what ``acquire`` returns.

    ``token`` is the fencing token (``tokens`` per key for a multi-lock),
    ``lost`` a :class:`threading.Event` set when the hold is lost, with
    ``lost_reason`` saying why (``forced``, ``gone``, ``maxhold``, ``moved``,
    ``notowner`` (re-attach refused), ``session-down``).  Re-entries by the
    same thread return the same Hold with ``count`` raised; each
    ``release()`` drops one.  A context manager: leaving it releases once.
    """

    _lost: Optional[threading.Event]

    @property
    def lost(self) -> threading.Event:
        """A :class:`threading.Event`, set when the hold is lost."""
        ev = self._lost
        if ev is None:
            with _event_lock:
                if self._lost is None:
                    self._lost = threading.Event()
                    if self.lost_reason is not None:
                        self._lost.set()
                ev = self._lost
        return ev

    def _signal_lost(self) -> None:
        self.lost.set()  # (made here if nobody asked for it yet)

    def release(self) -> None:
        self.session._release(self)

    def extend(self, lease_ms: Optional[int] = None) -> int:
        """Set a new lease from now (``LOCK.RENEW ... SESSION``); the server
        keeps renewing it while the session lives.  Returns the lease in ms."""
        lease: int = self.session._renew(self, lease_ms)
        return lease

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.count > 0:
            self.release()


class Permit(PermitState, Hold):
    """Permits of a semaphore held by one owner: what
    :meth:`Semaphore.acquire` returns.

    ``permits`` is how many it holds, ``owner`` its owner id (fresh for every
    acquisition), ``lost`` a :class:`threading.Event` set when the permits are
    lost (``lost_reason`` as a :class:`Hold`'s: ``forced``, ``gone``,
    ``maxhold``, ``moved``, ``notowner``, ``session-down``).  The permits are
    bound to the session, kept alive while it lives and re-attached
    (``SEM.RENEW ... SESSION``) when its connection is re-made.  A context
    manager: leaving it releases every permit.  Not re-entrant: each
    :meth:`Semaphore.acquire` takes permits of its own.
    """

    def release(self, permits: Optional[int] = None) -> None:
        """Give back ``permits`` of the permits (default: all).  A lost
        permit releases quietly; ``NOTOWNER``/``EXPIRED`` from the server
        raise :class:`NotOwnerError` / :class:`ExpiredError` and mark it lost."""
        if self._gives_back_some(permits):
            self.session._sem_release_some(self, permits)
            return
        self.session._release(self)

    def extend(self, lease_ms: Optional[int] = None) -> int:
        """A new lease from now (``SEM.RENEW ... SESSION``), still kept alive
        by the session.  Returns the lease in ms."""
        lease: int = self.session._renew(self, lease_ms)
        return lease
