"""The asyncio flavour, on ``redis.asyncio``: the same API with ``await``.

    async with Session(r) as session:
        async with await session.lock("invoice:7").acquire(timeout=5) as hold:
            print(hold.token)

``hold.lost`` is an :class:`asyncio.Event`; re-entry is per task; a
cancelled ``acquire`` (``task.cancel()``, ``asyncio.timeout``) closes its
waiting connection and releases a grant that raced the cancel.
``Semaphore``/``Permit``/``Latch`` are the sync ones' twins.

The same three layers as the threaded face, each importing only those
below it: the core (``_wait``, ``_hold``, ``_conn``, ``_core``,
``_implicit``, on the modules both faces share without I/O:
``redis_lock_client.errors``, ``_common``, ``_books``, ``_conn_state``,
``_election_base``), the objects on it (``_locks``, ``_semaphore``,
``_latch``, ``_election``), and on top the public ``Session`` with its
factories (``_session``), the drop-in (``dropin``) and this module.
"""

from ._election import Election, Leader, Leadership, Observer
from ._hold import Hold, Permit
from ._latch import Latch
from ._locks import RWLock  # (not in __all__, as before: the type rwlock() returns)
from ._semaphore import Semaphore
from ._session import Session
from .dropin import ModuleLock, close_default_session, default_session

__all__ = [
    "Session",
    "Hold",
    "Semaphore",
    "Permit",
    "Latch",
    "Election",
    "Leadership",
    "Leader",
    "Observer",
    "ModuleLock",
    "default_session",
    "close_default_session",
]
