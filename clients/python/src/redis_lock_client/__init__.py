"""Python client of the ``lock`` Redis module.

    import redis
    from redis_lock_client import Session
    r = redis.Redis()
    with Session(r) as session, session.lock("invoice:7").acquire(timeout=5) as hold:
        print(hold.token)
"""

from ._sync import Hold, Latch, Lock, MultiLock, Permit, RWLock, Semaphore, Session
from ._election import Election, Leader, Leadership, Observer
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
