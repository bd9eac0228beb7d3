"""The threaded :class:`Semaphore`: fair counting permits bound to a session
(``SEM.*``).  The session's core takes and keeps the
:class:`~redis_lock_client._hold.Permit`; given a client instead of a session,
the client's implicit session (``_implicit``) is used."""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional

from . import _common as c
from . import _implicit
from ._core import SessionCore
from ._hold import Permit

__all__ = ["Semaphore"]


class Semaphore:
    """A counting semaphore (``SEM.*``), fair (FIFO), with permits bound to
    a session: they are kept alive while the session lives and come back
    within one lease when the process dies.

    ``Semaphore(session, name, permits=None)`` (or ``session.semaphore(name,
    permits)``).  Given a redis client instead of a session, the client's
    :func:`~redis_lock_client.default_session` is used.  ``permits``: the
    total, set once (``SEM.INIT``, before this object's first command) if
    the semaphore does not exist yet; without it, acquires wait until
    someone sets it.  The lease is the session's ``lease_ms``.
    """

    def __init__(self, session: Any, name: Any, permits: Optional[int] = None) -> None:
        c.check_initial_permits(permits)
        self._session = session if isinstance(session, SessionCore) else None
        self._client = None if self._session is not None else session
        self.name = name
        self.initial_permits = permits
        self._init_done = permits is None
        self._stacks = threading.local()  # each thread's permits taken by ``with``

    @property
    def session(self) -> SessionCore:
        """The session the permits are bound to (a client's default session
        is made, or made anew after it was closed, when first needed)."""
        if self._session is None or (self._session._closed and self._client is not None):
            self._session = _implicit.default_session(self._client)
        return self._session

    def _execute(self, *args: Any) -> Any:
        return self.session._execute(*args)

    def _ensure_init(self) -> None:
        if not self._init_done:
            self._execute("SEM.INIT", self.name, self.initial_permits)
            self._init_done = True

    def init(self, permits: Optional[int]) -> bool:
        """``SEM.INIT``: set the total to ``permits`` if the semaphore does not
        exist (after this object's own ``permits``, if given).  True if set,
        False if it existed (nothing changed)."""
        self._ensure_init()
        return bool(self._execute("SEM.INIT", self.name, permits))

    def acquire(self, permits: int = 1, blocking: bool = True, timeout: Optional[float] = None) -> Permit:
        """Take ``permits`` permits -> :class:`Permit`.  ``timeout=None`` waits
        forever, ``0`` (or ``blocking=False``) tries once, ``seconds`` waits that
        long; then :class:`BusyError`.  Waiters are served first come first
        served: one asking for 3 is never overtaken by later ones asking for 1,
        and a try does not overtake anyone queued."""
        c.check_permits(permits)
        if not blocking:
            if timeout not in (None, 0):
                raise ValueError("can't specify a timeout for a non-blocking acquire")
            timeout = 0
        self._ensure_init()
        return self.session._sem_acquire(self.name, permits, timeout)

    def info(self) -> Optional[Dict[str, Any]]:
        """``SEM.INFO`` as a dict (``permits``, ``available``, ``holders``: a
        list of dicts with ``owner``, ``permits``, ``ttl``, ``keepalive_client``,
        ``waiters``), or None if the semaphore does not exist."""
        self._ensure_init()
        return c.sem_info(self._execute("SEM.INFO", self.name))

    def available(self) -> int:
        """Permits available now (0 for a missing semaphore)."""
        info = self.info()
        return 0 if info is None else int(info["available"])

    def add(self, delta: int) -> int:
        """``SEM.ADD``: add (or with a negative ``delta`` take away) permits
        from the total.  Returns the permits available now."""
        self._ensure_init()
        return int(self._execute("SEM.ADD", self.name, delta))

    def __enter__(self) -> Permit:
        p = self.acquire()
        self._stacks.__dict__.setdefault("permits", []).append(p)
        return p

    def __exit__(self, *exc: Any) -> None:
        self._stacks.permits.pop().release()
