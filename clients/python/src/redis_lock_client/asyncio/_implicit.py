"""The asyncio core's implicit sessions, the threaded ``_implicit``'s twin:
one per connection pool (per cluster client), made at first need by the
drop-in's ``timeout=None`` locks and by the objects given a client instead
of a session, ended when the pool is disconnected (``await client.aclose()``
of a client that made its pool) or garbage-collected."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

import redis.asyncio

from .. import _common as c
from ._core import SessionCore

__all__ = ["default_session", "close_default_session", "session_class"]

#: What an implicit session is made of: the public asyncio ``Session`` (the
#: core and its factories), which its module hands over as it is defined;
#: the core alone until then.
session_class: Callable[..., SessionCore] = SessionCore


class _Slot:
    """The implicit session of one connection pool (cluster client); see the
    sync drop-in's."""

    def __init__(self) -> None:
        self.session: Optional[SessionCore] = None

    async def end(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            await session.close()

    def abandon(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session._abandon()


#: A connection pool (a cluster client) -> the slot of its clients' implicit session.
_slots: "weakref.WeakKeyDictionary[Any, _Slot]" = weakref.WeakKeyDictionary()


def _slot_key(client: Any) -> Any:
    return client if c.is_cluster(client) else client.connection_pool


def _weak_client(client: Any) -> Any:
    if c.is_cluster(client):
        return weakref.proxy(client)
    pool: Any = weakref.proxy(client.connection_pool)  # (a proxy stands for the pool)
    return redis.asyncio.Redis(connection_pool=pool)


def _end_with(owner: Any, method: str, slot: _Slot) -> None:
    """End ``slot``'s session before ``owner.method()`` (a pool's
    ``disconnect``, a cluster client's ``aclose``) runs; abandon it when
    ``owner`` is garbage-collected.  Neither hook refers to ``owner`` strongly."""
    original = getattr(type(owner), method)
    owner_ref = weakref.ref(owner)

    async def ending(*args: Any, **kwargs: Any) -> Any:
        await slot.end()
        target = owner_ref()
        if target is None:  # (called while it is being collected)
            return None
        return await original(target, *args, **kwargs)

    setattr(owner, method, ending)
    weakref.finalize(owner, slot.abandon)


async def default_session(client: Any, lease_ms: int = 30000) -> SessionCore:
    """The implicit session of ``client``'s connection pool (see the module's doc)."""
    key = _slot_key(client)
    slot = _slots.get(key)
    if slot is None:
        slot = _slots[key] = _Slot()
        _end_with(key, "aclose" if c.is_cluster(client) else "disconnect", slot)
    session = slot.session
    if session is None or session._closed:
        # (in the slot before it opens: a concurrent acquire waits for the same opening)
        session = slot.session = session_class(_weak_client(client), lease_ms=lease_ms, name="dropin")
        try:
            await session.start()
        except BaseException:
            if slot.session is session:
                slot.session = None
            raise
    return session


async def close_default_session(client: Any) -> None:
    """Close the implicit session of ``client``'s pool (its holds are released)."""
    slot = _slots.get(_slot_key(client))
    if slot is not None:
        await slot.end()
