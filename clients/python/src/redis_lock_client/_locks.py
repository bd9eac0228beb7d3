"""The threaded locks: :class:`Lock` (exclusive, reentrant per thread),
:class:`RWLock` (its read and write sides) and :class:`MultiLock` (several
keys at once, or none).  Each names what to take; the session's core takes
it and keeps the :class:`~redis_lock_client._hold.Hold`."""

from __future__ import annotations

import threading
from typing import Any, Optional, Tuple

from . import _common as c
from ._core import SessionCore
from ._hold import Hold

__all__ = ["Lock", "RWLock", "MultiLock"]


class _Acquirable:
    kind = "x"

    def __init__(self, session: SessionCore, keys: Tuple[Any, ...]) -> None:
        self.session = session
        self.keys = keys
        self._stacks = threading.local()  # each thread's holds taken by ``with``

    def acquire(self, timeout: Optional[float] = None, owner: Any = None) -> Hold:
        """Take the lock: ``timeout=None`` waits forever, ``0`` tries once,
        ``seconds`` waits that long (then :class:`BusyError`).

        ``owner``: wait and hold as the owner of another of this session's
        holds (``hold.owner``) instead of a fresh one, so that the server
        sees one owner holding one lock while it waits for this one: a wait
        that would close a cycle of waits is then refused at once with
        :class:`DeadlockError`, and the owner keeps what it holds."""
        return self.session._acquire(self.kind, self.keys, timeout, owner)

    def __enter__(self) -> Hold:
        h = self.acquire()
        self._stacks.__dict__.setdefault("holds", []).append(h)
        return h

    def __exit__(self, *exc: Any) -> None:
        self._stacks.holds.pop().release()


class Lock(_Acquirable):
    """An exclusive lock, reentrant per thread."""

    def __init__(self, session: Any, name: Any) -> None:
        super().__init__(session, (name,))
        self.name = name


class _RWSide(_Acquirable):
    def __init__(self, session: Any, name: Any, kind: str) -> None:
        super().__init__(session, (name,))
        self.kind = kind
        self.name = name


class RWLock:
    """A read-write lock: ``read_lock()`` shared, ``write_lock()`` exclusive."""

    def __init__(self, session: Any, name: Any) -> None:
        self.session = session
        self.name = name

    def read_lock(self) -> "_RWSide":
        return _RWSide(self.session, self.name, "r")

    def write_lock(self) -> "_RWSide":
        return _RWSide(self.session, self.name, "w")


class MultiLock(_Acquirable):
    """All of several exclusive locks at once, or none."""

    kind = "m"

    def __init__(self, session: Any, keys: Tuple[Any, ...]) -> None:
        super().__init__(session, c.multilock_keys(keys))
