"""Python client of the ``lock`` Redis module.

    import redis
    from redis_lock_client import Session
    r = redis.Redis()
    with Session(r) as session, session.lock("invoice:7").acquire(timeout=5) as hold:
        print(hold.token)

Each face is three layers, each importing only those below it:

- the core: what both faces share without I/O (``errors``, ``_common``,
  ``_books``, ``_conn_state``, ``_election_base``), then the threaded I/O
  (``_wait``, ``_hold``, ``_conn``, ``_core``, ``_implicit``);
- the objects on the core, none importing another: ``_locks``,
  ``_semaphore``, ``_latch``, ``_election``;
- on top: the public ``Session``, the core with the objects' factories
  (``_session``), the drop-in (``dropin``) and this module.

``redis_lock_client.asyncio`` is the same three layers with ``await``, on
the same shared modules.
"""

from ._election import Election, Leader, Leadership, Observer
from ._hold import Hold, Permit
from ._latch import Latch
from ._locks import Lock, MultiLock, RWLock
from ._semaphore import Semaphore
from ._session import Session
from .dropin import ModuleLock, close_default_session, default_session
from .errors import (
    AuthenticationError,
    BusyError,
    CommandError,
    DeadlockError,
    ExpiredError,
    LatchGone,
    LeaseTooShortError,
    LockError,
    LostError,
    ModuleNotLoadedError,
    NotOwnerError,
    UnavailableError,
)

__all__ = [
    "Session",
    "Lock",
    "RWLock",
    "MultiLock",
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
    "LockError",
    "BusyError",
    "NotOwnerError",
    "ExpiredError",
    "LatchGone",
    "DeadlockError",
    "LostError",
    "UnavailableError",
    "AuthenticationError",
    "LeaseTooShortError",
    "ModuleNotLoadedError",
    "CommandError",
]
