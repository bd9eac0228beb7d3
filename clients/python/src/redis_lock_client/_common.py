"""What the sync and asyncio flavours share: commands, replies, errors."""

import math
import secrets

import redis.exceptions as rex

from .errors import (
    BusyError,
    CommandError,
    DeadlockError,
    LockError,
    ModuleNotLoadedError,
    NotOwnerError,
    UnavailableError,
)

CHANNEL_PREFIX = "__lock__:session:"
#: The server's shortest KEEPALIVE lease at hz 10 (``lock_keepalive_min_lease_ms``).
MIN_LEASE_MS = 704
PING_INTERVAL = 1.0
#: How long the session connection may stay silent (no PONG) before the
#: library thinks it dead and reconnects.
DEAD_AFTER = 5.0
#: Extra seconds a client-side socket waits past a server-side BLOCK time.
BLOCK_SLACK = 5.0


class NoSession(Exception):
    """NOSESSION from a server: the session is not named there (yet)."""


def new_token():
    return secrets.token_hex(16)


def s(value):
    return value.decode() if isinstance(value, (bytes, bytearray)) else value


def block_ms(timeout):
    """``timeout`` in seconds (None = forever) -> the BLOCK argument, or None
    for a single try."""
    if timeout is None:
        return 0
    if timeout < 0:
        raise ValueError("timeout must be None or >= 0 seconds")
    if timeout == 0:
        return None
    return max(1, math.ceil(timeout * 1000))


def acquire_args(cmd, keys, owner, lease_ms, session_token, block):
    if cmd == "LOCK.MACQUIRE":
        args = [cmd, len(keys), *keys, owner]
    else:
        args = [cmd, keys[0], owner]
    args += ["PX", lease_ms, "FENCE", "SESSION", session_token]
    if block is not None:
        args += ["BLOCK", block]
    return args


def error_code(err):
    msg = str(err)
    return msg.split(" ", 1)[0] if msg else ""


def is_module_missing(err):
    # redis-py drops the leading "ERR " of error replies
    msg = str(err).lower()
    return msg.startswith("unknown command") or msg.startswith("err unknown command")


def map_error(err, what=""):
    """A redis-py exception -> this library's typed error (or NoSession)."""
    if isinstance(err, LockError):
        return err
    if isinstance(err, (rex.ConnectionError, rex.TimeoutError)):
        e = UnavailableError(f"{what}: server unavailable: {err}" if what else f"server unavailable: {err}")
        e.__cause__ = err
        return e
    if isinstance(err, rex.ResponseError):
        code = error_code(err)
        if code == "NOSESSION":
            return NoSession(str(err))
        if code == "NOTOWNER":
            return NotOwnerError(str(err))
        if code == "DEADLOCK":
            return DeadlockError(str(err))
        if is_module_missing(err) and "lock.session" in str(err).lower():
            return ModuleNotLoadedError(
                f"the lock module on this server is too old for sessions ({err}): load a build "
                "with LOCK.SESSION (--loadmodule /path/to/liblock.so)"
            )
        if is_module_missing(err):
            return ModuleNotLoadedError(
                f"the server does not know the LOCK.* commands ({err}): start it with "
                "--loadmodule /path/to/liblock.so"
            )
        if code == "CROSSSLOT":
            return CommandError(
                f"{err} (a multi-lock's keys must share one {{hash tag}} on a cluster)"
            )
        return CommandError(str(err))
    return err


def parse_loss(data):
    """A loss message -> (reason, owner, key); ``("demoted", None, None)``."""
    text = data if isinstance(data, bytes) else str(data).encode()
    if text == b"demoted":
        return "demoted", None, None
    reason, rest = text.split(b" ", 1)
    length, rest = rest.split(b" ", 1)
    n = int(length)
    owner = rest[:n]
    key = rest[n + 1 :]
    return reason.decode(), owner.decode("utf-8", "replace"), key.decode("utf-8", "replace")


def busy(keys, timeout):
    name = keys[0] if len(keys) == 1 else keys
    if timeout == 0:
        return BusyError(f"lock {name!r} is held by another owner")
    return BusyError(f"lock {name!r} not acquired within {timeout} s")


def cluster_slot_keys_error(keys):
    return CommandError(
        f"a multi-lock's keys must hash to one slot on a cluster: give them one {{hash tag}} "
        f"(got {list(keys)!r})"
    )


def resp2(kwargs):
    """Session connections read pub/sub as RESP2 arrays."""
    kwargs["protocol"] = 2  # redis-py 8 speaks RESP3 unless told
    for k in ("maint_notifications_pool_handler", "maint_notifications_config"):
        kwargs.pop(k, None)


def cancel_args(acquire_args):
    """``LOCK.CANCEL key owner`` for an acquire's arguments: it ends the
    owner's wait in the server, after which no grant can reach it (a
    multi-lock waiter leaves every key's queue through its first key)."""
    if acquire_args[0] == "LOCK.MACQUIRE":
        n = int(acquire_args[1])
        return ["LOCK.CANCEL", acquire_args[2], acquire_args[2 + n]]
    return ["LOCK.CANCEL", acquire_args[1], acquire_args[2]]

