"""What the sync and asyncio faces share, without I/O: the commands' arguments,
the replies' parsing, the errors' mapping, the owner checks and the re-queue
decision of a wait (:class:`Wait`).  Both faces' core and objects import it;
it imports nothing of the package but ``errors``."""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import redis.exceptions as rex

from .errors import (
    AuthenticationError,
    BusyError,
    CommandError,
    DeadlockError,
    ExpiredError,
    LatchGone,
    LeaseTooShortError,
    LockError,
    ModuleNotLoadedError,
    NotOwnerError,
    UnavailableError,
)

log = logging.getLogger("redis_lock_client")

CHANNEL_PREFIX = "__lock__:session:"
PING_INTERVAL = 1.0
#: How long the session connection may stay silent (no PONG) before the
#: library thinks it dead and reconnects.
DEAD_AFTER = 5.0
#: Extra seconds a client-side socket waits past a server-side BLOCK time.
BLOCK_SLACK = 5.0


#: Error codes a command may meet while a failover or a restart is under way.
TRANSIENT_CODES = frozenset({"READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"})


def is_transient(err: BaseException) -> bool:
    """An error reply met while a failover or a restart is under way (redis-py
    strips the code word of READONLY and LOADING into their classes)."""
    return isinstance(err, (rex.ReadOnlyError, rex.BusyLoadingError)) or error_code(err) in TRANSIENT_CODES


class NoSession(Exception):
    """NOSESSION from a server: the session is not named there (yet)."""


#: The acquire command of each kind of lock hold (``s``, a semaphore's, is ``SEM.ACQUIRE``).
ACQUIRE_CMD = {"x": "LOCK.ACQUIRE", "r": "LOCK.RACQUIRE", "w": "LOCK.WACQUIRE", "m": "LOCK.MACQUIRE"}


def is_cluster(client: Any) -> bool:
    """A ``RedisCluster`` (either face's): keys live on several nodes."""
    return hasattr(client, "get_node_from_key") and hasattr(client, "nodes_manager")


def new_token() -> str:
    return secrets.token_hex(16)


def s(value: Any) -> Any:
    return value.decode() if isinstance(value, (bytes, bytearray)) else value


def block_ms(timeout: Optional[float]) -> Optional[int]:
    """``timeout`` in seconds (None = forever) -> the BLOCK argument, or None
    for a single try."""
    if timeout is None:
        return 0
    if timeout < 0:
        raise ValueError("timeout must be None or >= 0 seconds")
    if timeout == 0:
        return None
    return max(1, math.ceil(timeout * 1000))


def acquire_args(
    cmd: str, keys: Sequence[Any], owner: Any, lease_ms: int, session_token: str, block: Optional[int]
) -> List[Any]:
    if cmd == "LOCK.MACQUIRE":
        args = [cmd, len(keys), *keys, owner]
    else:
        args = [cmd, keys[0], owner]
    args += ["PX", lease_ms, "FENCE", "SESSION", session_token]
    if block is not None:
        args += ["BLOCK", block]
    return args


def release_args(kind: str, keys: Tuple[Any, ...], owner: Any) -> List[Any]:
    """The release of a hold of ``kind`` (``x``, ``r``, ``w``, ``m``, ``s``)."""
    if kind == "s":
        return ["SEM.RELEASE", keys[0], owner]
    if kind == "m":
        return ["LOCK.MRELEASE", len(keys), *keys, owner]
    args = ["LOCK.RELEASE", keys[0], owner]
    if kind == "r":
        args.append("READ")
    elif kind == "w":
        args.append("WRITE")
    return args


def check_owner(by_owner: Dict[Any, List[Any]], owner: Any, keys: Tuple[Any, ...]) -> None:
    """An explicit owner must be one of the session's live holds' (a lock's,
    not a semaphore's), holding none of ``keys`` yet (that is a re-entry; and
    a cancelled wait's cleanup, a release as the owner, must not drop a hold
    it already has)."""
    hs = by_owner.get(owner)
    if not hs:
        raise LockError(f"owner {owner!r} holds nothing in this session: pass the owner of a live hold")
    if any(h.kind == "s" for h in hs):
        raise LockError(f"owner {owner!r} holds semaphore permits: pass the owner of a lock's hold")
    if any(k in h.keys for h in hs for k in keys):
        raise LockError(f"owner {owner!r} already holds one of {list(keys)!r}: re-enter instead")


def multilock_keys(keys: Iterable[Any]) -> Tuple[Any, ...]:
    """A multi-lock's keys, refused if there are none."""
    keys = tuple(keys)
    if not keys:
        raise ValueError("a multi-lock needs at least one key")
    return keys


def error_code(err: BaseException) -> str:
    msg = str(err)
    return msg.split(" ", 1)[0] if msg else ""


def is_module_missing(err: BaseException) -> bool:
    # redis-py drops the leading "ERR " of error replies
    msg = str(err).lower()
    return msg.startswith("unknown command") or msg.startswith("err unknown command")


def _missing_module(err: BaseException) -> ModuleNotLoadedError:
    return ModuleNotLoadedError(
        f"the server does not know the lock module's commands ({err}): the module is not "
        "loaded: start the server with --loadmodule /path/to/liblock.so"
    )


#: Error codes of a refused login or an ACL refusal (redis-py strips some of
#: them into ``AuthenticationError`` / ``NoPermissionError``).
AUTH_CODES = frozenset({"WRONGPASS", "NOAUTH", "NOPERM"})


def is_auth_error(err: BaseException) -> bool:
    return isinstance(err, (rex.AuthenticationError, rex.NoPermissionError)) or (
        isinstance(err, rex.ResponseError) and error_code(err) in AUTH_CODES
    )


def map_error(err: BaseException, what: str = "") -> BaseException:
    """A redis-py exception -> this library's typed error (or NoSession)."""
    if isinstance(err, LockError):
        return err
    if is_auth_error(err):
        auth = AuthenticationError(f"{what}: {err}" if what else str(err))
        auth.__cause__ = err
        return auth
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
        if is_module_missing(err):
            return _missing_module(err)
        if code == "CROSSSLOT":
            return CommandError(
                f"{err} (a multi-lock's keys must share one {{hash tag}} on a cluster)"
            )
        return CommandError(str(err))
    return err


def parse_min_lease(info: Any) -> Optional[int]:
    """``INFO lock``'s reply (a dict, or the raw text) -> the server's
    ``keepalive_min_lease_ms``, or None if it does not say (an older module)."""
    if isinstance(info, dict):
        for k in ("lock_keepalive_min_lease_ms", "keepalive_min_lease_ms"):
            if k in info:
                return int(info[k])
        return None
    text = info.decode() if isinstance(info, (bytes, bytearray)) else str(info)
    for line in text.splitlines():
        name, _, value = line.strip().partition(":")
        if name in ("lock_keepalive_min_lease_ms", "keepalive_min_lease_ms"):
            return int(value)
    return None


def check_lease(lease_ms: int, min_lease_ms: Optional[int] = None) -> None:
    """Refuse a lease that is not positive or below the server's floor."""
    if lease_ms <= 0:
        raise LeaseTooShortError(f"lease {lease_ms} ms is not positive")
    if min_lease_ms is not None and lease_ms < min_lease_ms:
        raise LeaseTooShortError(
            f"lease {lease_ms} ms is below this server's minimum of {min_lease_ms} ms "
            "(keepalive_min_lease_ms; raise the lease or the server's hz)"
        )


def parse_loss(data: Any) -> Tuple[str, Optional[str], Optional[str]]:
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


def busy(keys: Sequence[Any], timeout: Optional[float]) -> BusyError:
    name = keys[0] if len(keys) == 1 else keys
    if timeout == 0:
        return BusyError(f"lock {name!r} is held by another owner")
    return BusyError(f"lock {name!r} not acquired within {timeout} s")


def cluster_slot_keys_error(keys: Sequence[Any]) -> CommandError:
    return CommandError(
        f"a multi-lock's keys must hash to one slot on a cluster: give them one {{hash tag}} "
        f"(got {list(keys)!r})"
    )


def resp2(kwargs: Dict[str, Any]) -> None:
    """Session connections read pub/sub as RESP2 arrays."""
    kwargs["protocol"] = 2  # redis-py 8 speaks RESP3 unless told
    for k in ("maint_notifications_pool_handler", "maint_notifications_config"):
        kwargs.pop(k, None)


def sem_acquire_args(
    key: Any, owner: str, permits: int, lease_ms: int, session_token: str, block: Optional[int]
) -> List[Any]:
    args = ["SEM.ACQUIRE", key, owner, "PERMITS", permits, "PX", lease_ms, "SESSION", session_token]
    if block is not None:
        args += ["BLOCK", block]
    return args


def check_permits(permits: Any, what: str = "permits") -> int:
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise TypeError(f"{what} must be an int")
    if permits < 1:
        raise ValueError(f"{what} must be at least 1")
    return permits


def check_initial_permits(permits: Optional[int]) -> None:
    """A semaphore's total given when it is made: None (set by someone else) or an int >= 0."""
    if permits is not None and (isinstance(permits, bool) or not isinstance(permits, int) or permits < 0):
        raise ValueError("permits must be None or an int >= 0")


def sem_busy(key: Any, permits: int, timeout: Optional[float]) -> BusyError:
    if timeout == 0:
        return BusyError(f"semaphore {key!r}: {permits} permit(s) not available now (or others wait first)")
    return BusyError(f"semaphore {key!r}: {permits} permit(s) not acquired within {timeout} s")


def _text(v: Any) -> Any:
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else v


def as_map(reply: Any) -> Optional[Dict[str, Any]]:
    """A map reply (a dict in RESP3, a flat array in RESP2) -> a dict with str keys."""
    if reply is None:
        return None
    items: Iterable[Tuple[Any, Any]]
    if isinstance(reply, dict):
        items = reply.items()
    else:
        items = zip(reply[::2], reply[1::2])
    return {_text(k): v for k, v in items}


def sem_info(reply: Any) -> Optional[Dict[str, Any]]:
    """``SEM.INFO``'s reply -> a dict (None for a missing semaphore); holders'
    owners as str."""
    info = as_map(reply)
    if info is None:
        return None
    holders = []
    for reply_holder in info.get("holders") or []:
        h = as_map(reply_holder) or {}
        h["owner"] = _text(h["owner"])
        holders.append(h)
    info["holders"] = holders
    return info


def latch_ttl_args(ttl: Optional[float]) -> List[Any]:
    """``ttl`` in seconds (None: no expiry) -> ``PX ms``."""
    if ttl is None:
        return []
    if ttl <= 0:
        raise ValueError("ttl must be None or > 0 seconds")
    return ["PX", max(1, math.ceil(ttl * 1000))]


def latch_await_args(name: Any, block: Optional[int]) -> List[Any]:
    """``LATCH.AWAIT name [BLOCK ms]`` (``block`` as :func:`block_ms`'s)."""
    args = ["LATCH.AWAIT", name]
    if block is not None:
        args += ["BLOCK", block]
    return args


def wait_key(args: Sequence[Any]) -> Any:
    """The (first) key of a waiting command's arguments."""
    return args[2] if args[0] == "LOCK.MACQUIRE" else args[1]


def owner_of(args: Sequence[Any]) -> Any:
    """The owner (candidate) of a waiting command's arguments."""
    return args[2 + int(args[1])] if args[0] == "LOCK.MACQUIRE" else args[2]


def set_owner(args: List[Any], cleanup_args: List[Any], owner: Any) -> None:
    """Replace the owner of a waiting command and of its cleanup, in place
    (``LOCK.MRELEASE`` names it last, every other command third)."""
    if args[0] == "LOCK.MACQUIRE":
        args[2 + int(args[1])] = owner
    else:
        args[2] = owner
    if cleanup_args[0] == "LOCK.MRELEASE":
        cleanup_args[-1] = owner
    else:
        cleanup_args[2] = owner


def set_block(args: List[Any], block: int) -> None:
    """Replace the ``BLOCK ms`` of a waiting command, in place."""
    for i in range(len(args) - 2, -1, -1):  # (from the end: a key or an owner may read BLOCK)
        if isinstance(args[i], str) and args[i] == "BLOCK":
            args[i + 1] = block
            return


def is_broken_connection(err: BaseException) -> bool:
    """The connection a command waited on broke (closed by the server, reset,
    refused on the way) - not a login refusal, not a read that timed out."""
    return isinstance(err, rex.ConnectionError) and not is_auth_error(err) and not isinstance(
        err, rex.BusyLoadingError
    )


def cancel_args(acquire_args: Sequence[Any]) -> List[Any]:
    """``LOCK.CANCEL key owner`` for an acquire's arguments: it ends the
    owner's wait in the server, after which no grant can reach it (a
    multi-lock waiter leaves every key's queue through its first key)."""
    if acquire_args[0] == "LOCK.MACQUIRE":
        n = int(acquire_args[1])
        return ["LOCK.CANCEL", acquire_args[2], acquire_args[2 + n]]
    return ["LOCK.CANCEL", acquire_args[1], acquire_args[2]]



class WaitBroken(Exception):
    """The connection a wait was blocked on broke while the server can still
    be reached; the wait was cleaned up there (cancelled, a crossed grant
    released) and can be sent again."""


@dataclasses.dataclass
class Wait:
    """One blocking command of ``blocking_call`` (either face's), all of it
    but the connection it is sent on: ``args``, changed in place when it is sent
    again (read the owner back with :func:`owner_of`); ``block``, its BLOCK
    (0 forever, None a single try); ``cleanup_args``, the release of a grant
    that crossed a cancel (None: a wait that grants nothing, as
    ``LATCH.AWAIT``); ``on_cleanup_failed``, given them when the server
    cannot be reached; ``new_owner``, the maker of the owner a wait sent
    again takes (None: the same owner)."""

    args: List[Any]
    block: Optional[int]
    cleanup_args: Optional[List[Any]]
    on_cleanup_failed: Optional[Callable[[List[Any]], None]]
    new_owner: Optional[Callable[[], Any]] = None
    #: when its BLOCK ends (``time.monotonic()``), None if never (a try, or forever)
    deadline: Optional[float] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.block / 1000 if self.block else None

    @property
    def key(self) -> Any:
        return wait_key(self.args)

    def failure(self, err: BaseException, reachable: bool) -> BaseException:
        """What the wait raises when ``err`` cut it short: :class:`WaitBroken`
        (send it again) if its connection broke while the server can still be
        ``reachable``, else this library's error for ``err`` (``err`` itself if
        it has none, as a cancel)."""
        if reachable and is_broken_connection(err):
            broken = WaitBroken()
            broken.__cause__ = err
            return broken
        mapped = map_error(err, self.args[0]) if isinstance(err, Exception) else err
        if mapped is not err:
            mapped.__cause__ = err
        return mapped

    def again(self) -> bool:
        """Ready the wait to be sent again after :class:`WaitBroken`, for what
        is left of its BLOCK (its place in line is lost), as a fresh owner
        when ``new_owner`` is given.  False: its time ran out meanwhile."""
        log.info("the connection of a wait for %r broke: waiting again", self.key)
        if self.deadline is not None:
            left = math.ceil((self.deadline - time.monotonic()) * 1000)
            if left <= 0:
                return False
            self.block = left
            set_block(self.args, left)
        if self.new_owner is not None and self.cleanup_args is not None:
            set_owner(self.args, self.cleanup_args, self.new_owner())
        return True
