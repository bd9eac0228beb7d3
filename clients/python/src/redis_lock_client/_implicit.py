"""The threaded core's implicit sessions: one per connection pool (per
cluster client), made at first need by the drop-in's ``timeout=None``
locks and by the objects given a client instead of a session (``Semaphore(r,
...)``, ``Election(r, ...)``), ended with the pool: when it is disconnected
(``client.close()`` of a client that made its pool) or garbage-collected."""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Optional

import redis

from . import _common as c
from ._core import SessionCore

__all__ = ["default_session", "close_default_session", "session_class"]

#: What an implicit session is made of: the public ``Session`` (the core and
#: its factories), which its module hands over as it is defined, so that
#: ``default_session(client).lock(...)`` works; the core alone until then.
session_class: Callable[..., SessionCore] = SessionCore


class _Slot:
    """The implicit session of one connection pool (cluster client), made
    anew after it was closed.  The pool's hooks and finalizer refer to the
    slot, the slot to the session, the session to its pool only weakly."""

    def __init__(self) -> None:
        self.session: Optional[SessionCore] = None

    def end(self) -> None:
        """Close the session (its holds are released): the pool is disconnected."""
        session, self.session = self.session, None
        if session is not None:
            session.close()

    def abandon(self) -> None:
        """The pool is gone: close the session's connection(s), holds end with their lease."""
        session, self.session = self.session, None
        if session is not None:
            session._abandon()


#: A connection pool (a cluster client) -> the slot of its clients' implicit session.
_slots: "weakref.WeakKeyDictionary[Any, _Slot]" = weakref.WeakKeyDictionary()
# (re-entrant: a client collected while it is held, on this thread, disconnects its pool)
_slots_lock = threading.RLock()


def _slot_key(client: Any) -> Any:
    return client if c.is_cluster(client) else client.connection_pool


def _weak_client(client: Any) -> Any:
    """A client for the implicit session that does not keep the pool (the
    cluster client) alive."""
    if c.is_cluster(client):
        return weakref.proxy(client)
    pool: Any = weakref.proxy(client.connection_pool)  # (a proxy stands for the pool)
    return redis.Redis(connection_pool=pool)


def _end_with(owner: Any, method: str, slot: _Slot) -> None:
    """End ``slot``'s session before ``owner.method()`` (a pool's
    ``disconnect``, a cluster client's ``close``) runs, and abandon it when
    ``owner`` is garbage-collected.  Neither hook refers to ``owner`` strongly."""
    original = getattr(type(owner), method)
    owner_ref = weakref.ref(owner)

    def ending(*args: Any, **kwargs: Any) -> Any:
        slot.end()
        target = owner_ref()
        if target is None:  # (called while it is being collected)
            return None
        return original(target, *args, **kwargs)

    setattr(owner, method, ending)
    weakref.finalize(owner, slot.abandon)


def default_session(client: Any, lease_ms: int = 30000) -> SessionCore:
    """The implicit session ``ModuleLock`` uses for ``timeout=None`` locks of
    ``client``: one per connection pool (per cluster client), shared by every
    client on that pool, ended with the pool (see the module's doc)."""
    key = _slot_key(client)
    with _slots_lock:
        slot = _slots.get(key)
        if slot is None:
            slot = _slots[key] = _Slot()
            _end_with(key, "close" if c.is_cluster(client) else "disconnect", slot)
        if slot.session is None or slot.session._closed:
            slot.session = session_class(_weak_client(client), lease_ms=lease_ms, name="dropin")
        return slot.session


def close_default_session(client: Any) -> None:
    """Close the implicit session of ``client``'s pool (its holds are released)."""
    with _slots_lock:
        slot = _slots.get(_slot_key(client))
    if slot is not None:
        slot.end()
