"""What the sync and asyncio flavours share: commands, replies, errors."""

import math
import secrets

import redis.exceptions as rex

from .errors import (
    BusyError,
    CommandError,
    DeadlockError,
    ExpiredError,
    LatchGone,
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


#: Error codes a command may meet while a failover or a restart is under way.
TRANSIENT_CODES = frozenset({"READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"})


def is_transient(err):
    """An error reply met while a failover or a restart is under way (redis-py
    strips the code word of READONLY and LOADING into their classes)."""
    return isinstance(err, (rex.ReadOnlyError, rex.BusyLoadingError)) or error_code(err) in TRANSIENT_CODES


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
        if code == "EXPIRED":
            return ExpiredError(str(err))
        if code == "GONE":
            return LatchGone(str(err))
        if code == "NOTOWNER":
            return NotOwnerError(str(err))
        if code == "DEADLOCK":
            return DeadlockError(str(err))
        if is_module_missing(err) and "lock.session" in str(err).lower():
            return ModuleNotLoadedError(
                f"the lock module on this server is too old for sessions ({err}): load a build "
                "with LOCK.SESSION (--loadmodule /path/to/liblock.so)"
            )
        if is_module_missing(err) and ("'sem." in str(err).lower() or "'latch." in str(err).lower()):
            return ModuleNotLoadedError(
                f"the server does not know the SEM.*/LATCH.* commands ({err}): load a build of the "
                "lock module that has them (--loadmodule /path/to/liblock.so)"
            )
        if is_module_missing(err) and "'elect." in str(err).lower():
            return ModuleNotLoadedError(
                f"the server does not know the ELECT.* commands ({err}): load a build of the "
                "lock module that has them (1.2.0 or later)"
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


def sem_acquire_args(key, owner, permits, lease_ms, session_token, block):
    args = ["SEM.ACQUIRE", key, owner, "PERMITS", permits, "PX", lease_ms, "SESSION", session_token]
    if block is not None:
        args += ["BLOCK", block]
    return args


def check_permits(permits, what="permits"):
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise TypeError(f"{what} must be an int")
    if permits < 1:
        raise ValueError(f"{what} must be at least 1")
    return permits


def sem_busy(key, permits, timeout):
    if timeout == 0:
        return BusyError(f"semaphore {key!r}: {permits} permit(s) not available now (or others wait first)")
    return BusyError(f"semaphore {key!r}: {permits} permit(s) not acquired within {timeout} s")


def _text(v):
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else v


def as_map(reply):
    """A map reply (a dict in RESP3, a flat array in RESP2) -> a dict with str keys."""
    if reply is None:
        return None
    if isinstance(reply, dict):
        items = reply.items()
    else:
        items = zip(reply[::2], reply[1::2])
    return {_text(k): v for k, v in items}


def sem_info(reply):
    """``SEM.INFO``'s reply -> a dict (None for a missing semaphore); holders'
    owners as str."""
    info = as_map(reply)
    if info is None:
        return None
    holders = []
    for h in info.get("holders") or []:
        h = as_map(h)
        h["owner"] = _text(h["owner"])
        holders.append(h)
    info["holders"] = holders
    return info


def latch_ttl_args(ttl):
    """``ttl`` in seconds (None: no expiry) -> ``PX ms``."""
    if ttl is None:
        return []
    if ttl <= 0:
        raise ValueError("ttl must be None or > 0 seconds")
    return ["PX", max(1, math.ceil(ttl * 1000))]


def cancel_args(acquire_args):
    """``LOCK.CANCEL key owner`` for an acquire's arguments: it ends the
    owner's wait in the server, after which no grant can reach it (a
    multi-lock waiter leaves every key's queue through its first key)."""
    if acquire_args[0] == "LOCK.MACQUIRE":
        n = int(acquire_args[1])
        return ["LOCK.CANCEL", acquire_args[2], acquire_args[2 + n]]
    return ["LOCK.CANCEL", acquire_args[1], acquire_args[2]]

