"""Typed errors of redis_lock_client.

Every error the library raises is a :class:`LockError` (itself a
``redis.exceptions.RedisError``).  Server error replies are told apart by
their leading code word (``NOTOWNER``, ``DEADLOCK``, ``NOSESSION`` ...),
never by one server's wording.
"""

import redis.exceptions


class LockError(redis.exceptions.RedisError):
    """Base of every error of this library."""


class BusyError(LockError):
    """The lock is held by another owner: a try (``timeout=0``) failed or the
    wait ran out (``timeout=seconds``)."""


class NotOwnerError(LockError):
    """The server says this owner holds no hold on the lock (``NOTOWNER``)."""


class ExpiredError(NotOwnerError):
    """A semaphore's permits ended with their lease before this release or
    renewal (``EXPIRED``): they are back in the available count."""


class LatchGone(LockError):
    """A latch waited for ended without reaching zero (``GONE``): it was
    deleted, overwritten or flushed, or its expiry passed."""


class DeadlockError(LockError):
    """The server refused a wait that could never end (``DEADLOCK``): it would
    close a cycle of waits (the message names each step: owner, key, next
    owner), or a read-write lock's upgrade would wait for its own read holds.
    The caller was not queued and keeps what it held: release, then take the
    locks again in one fixed order."""


class LostError(LockError):
    """The hold was lost (force-released, its lease ran out, the session was
    down for longer than the lease)."""


class UnavailableError(LockError):
    """The server cannot be reached (connection refused, closed, timed out)."""


class AuthenticationError(LockError, redis.exceptions.AuthenticationError):
    """The server refused this client's credentials or permissions: a wrong
    password (``WRONGPASS``), none given (``NOAUTH``), or an ACL that does not
    allow a command (``NOPERM``).  Never retried (trying again cannot help),
    never reported as :class:`UnavailableError`."""


class LeaseTooShortError(LockError, ValueError):
    """A lease the server cannot keep alive: below its
    ``keepalive_min_lease_ms`` (``INFO lock``; about 700 ms at the server's
    default ``hz 10``), or not positive.  Raised when the session (or the
    drop-in's lock) is made, before anything is held."""


class ModuleNotLoadedError(LockError):
    """The server does not know the module's commands: start it with
    ``--loadmodule /path/to/liblock.so``."""


class CommandError(LockError):
    """Any other error reply of a ``LOCK.*`` command (``WRONGTYPE``,
    ``CROSSSLOT``, ``NOPERM``, ``ERR ...``): the server's message is kept."""
