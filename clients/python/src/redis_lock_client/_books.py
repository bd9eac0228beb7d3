"""What both faces' sessions keep, without I/O: the session's books of
holds and their loss dispatch (:class:`SessionState`), the state of a hold
(:class:`HoldState`) and of a semaphore's permits (:class:`PermitState`),
and the register of the elections a session keeps (:class:`Elections`).
Each face's core adds the I/O: its connections, acquires, releases and
renewals, its ``lost`` events, the way it runs a loss callback."""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from typing import Any, Callable, ContextManager, Dict, Generic, List, Optional, Tuple, Type, TypeVar

from . import _common as c
from .errors import LostError

__all__ = ["SessionState", "HoldState", "PermitState", "Elections"]

log = logging.getLogger("redis_lock_client")


class HoldState:
    """A hold's fields and the checks made on them (each face's ``Hold``
    adds ``lost``, ``release``, ``extend`` and its context manager)."""

    def __init__(
        self, session: Any, kind: str, keys: Tuple[Any, ...], owner: Any, tokens: List[int], node: Optional[str]
    ) -> None:
        #: the session that keeps it (its core calls: ``_release``, ``_renew``,
        #: ``_sem_release_some``; typed loosely, the session's module stands above this one)
        self.session = session
        self.kind = kind
        self.keys = keys
        self.owner = owner
        self.tokens = tokens
        self.node = node
        self.count = 1
        #: the face's event, made when first asked for (most holds never are)
        self._lost: Any = None
        self.lost_reason: Optional[str] = None
        self._reg: Optional[Tuple[str, Tuple[Any, ...], int]] = None
        self._lost_callback: Optional[Callable[[str], Any]] = None  # the drop-in's on_lost(reason)

    @property
    def key(self) -> Any:
        return self.keys[0]

    @property
    def token(self) -> Any:
        return self.tokens[0] if len(self.tokens) == 1 else self.tokens

    @property
    def held(self) -> bool:
        return self.count > 0 and self.lost_reason is None

    def check(self) -> None:
        """Raise :class:`LostError` if the hold was lost."""
        if self.lost_reason is not None:
            raise LostError(f"lock {self.key!r} was lost: {self.lost_reason}")

    def _signal_lost(self) -> None:
        """Set the face's ``lost`` event (``lost_reason`` is set)."""
        raise NotImplementedError

    def _state(self) -> str:
        return "lost" if self.lost_reason is not None else ("held" if self.count else "released")

    def __repr__(self) -> str:
        return f"<Hold {self.keys!r} owner={self.owner} token={self.token} {self._state()}>"


class PermitState(HoldState):
    """A semaphore's permits held by one owner: a hold of kind ``s`` with a
    count of ``permits`` and no fencing token."""

    def __init__(self, session: Any, key: Any, owner: Any, permits: int, node: Optional[str]) -> None:
        super().__init__(session, "s", (key,), owner, [], node)
        self.permits = permits

    @property
    def token(self) -> None:
        return None  # no fencing token for permits

    def check(self) -> None:
        """Raise :class:`LostError` if the permits were lost."""
        if self.lost_reason is not None:
            raise LostError(f"permits of semaphore {self.key!r} were lost: {self.lost_reason}")

    def _gives_back_some(self, permits: Optional[int]) -> bool:
        """Whether a release of ``permits`` (None: all) gives back only some
        of those held (``SEM.RELEASE ... PERMITS n``), else all of them;
        refuses more than are held."""
        if permits is None:
            return False
        c.check_permits(permits)
        if self.count > 0 and self.lost_reason is None:
            if permits > self.permits:
                raise ValueError(f"release of {permits} permits: {self.permits} held")
            return permits < self.permits
        return False

    def __repr__(self) -> str:
        return f"<Permit {self.key!r} owner={self.owner} permits={self.permits} {self._state()}>"


class Elections:
    """The campaigns on their way and the leaderships a session keeps, by
    ``(key, candidate)``: their leases set the session's PING interval
    (lease/4), the leaderships' deadlines when they are believed lost, and a
    loss message or a dropped connection finds them here.  ``lock``: the
    threaded session's (its reader thread and its callers share the books);
    none in asyncio."""

    def __init__(self, lock: Optional[ContextManager[Any]] = None) -> None:
        self._lock: ContextManager[Any] = lock or contextlib.nullcontext()
        self._entries: Dict[Tuple[Any, Any], Any] = {}
        self._leases: Dict[int, float] = {}  # id(campaign or leadership) -> lease in s

    def __bool__(self) -> bool:
        return bool(self._entries)

    def get(self, key: Any, candidate: Any) -> Any:
        return self._entries.get((key, candidate))

    def add(self, e: Any, lease_s: float) -> None:
        with self._lock:
            self._leases[id(e)] = lease_s
            self._entries[(e.key, e.candidate)] = e

    def remove(self, e: Any) -> None:
        with self._lock:
            self._leases.pop(id(e), None)
            key = (e.key, e.candidate)
            if self._entries.get(key) is e:
                del self._entries[key]

    def ping_interval(self) -> float:
        """Every second, every lease/4 while an election campaigns or leads."""
        leases = self._leases
        if not leases:
            return c.PING_INTERVAL
        try:
            return float(min(c.PING_INTERVAL, min(leases.values()) / 4))
        except ValueError:  # emptied meanwhile (by another thread)
            return c.PING_INTERVAL

    def leaderships(self, node: Optional[str] = None) -> List[Any]:
        """The leaderships (not the campaigns), of ``node``'s connection if given."""
        with self._lock:
            return [e for e in self._entries.values() if e.leads and (node is None or e.node == node)]

    def next_deadline(self) -> float:
        if not self._entries:
            return float("inf")
        return min((e.deadline for e in self.leaderships()), default=float("inf"))

    def check_deadlines(self, now: float) -> None:
        """Mark lost the leaderships whose deadline passed (no PING answered in time)."""
        if not self._entries:
            return
        for e in self.leaderships():
            if now >= e.deadline:
                e._mark_lost("deadline")

    def pong(self, node: Optional[str], sent: float) -> None:
        """A PING sent at ``sent`` on ``node``'s connection was answered: its
        leaderships are believed for half a lease from then."""
        if not self._entries:
            return
        for e in self.leaderships(node):
            e._extend_belief(sent)

    def down(self, node: Optional[str], reason: str) -> None:
        """``node``'s connection dropped: its campaigns and leaderships are lost
        (a leadership is not re-attached)."""
        if not self._entries:
            return
        with self._lock:
            es = [e for e in self._entries.values() if e.node == node]
        for e in es:
            e._mark_lost(reason)


_H = TypeVar("_H", bound=HoldState)  # the face's Hold


class SessionState(Generic[_H]):
    """A session's books, either face's: its settings, the holds it keeps
    (by owner, and by who re-enters them), the releases to retry, the
    re-attaches to retry, the elections; and what it does without I/O when
    a hold is lost.  ``lock``: the threaded session's (its reader thread and
    its callers share the books); none in asyncio."""

    #: the face's Hold
    _hold_type: Type[_H]

    def __init__(
        self, client: Any, lease_ms: int, name: Optional[str], lock: Optional[ContextManager[Any]] = None
    ) -> None:
        self.client = client
        self.lease_ms = int(lease_ms)
        c.check_lease(self.lease_ms)  # the server's floor is checked when the session opens
        #: the server's shortest lease kept alive (``keepalive_min_lease_ms``), read when it opens
        self.min_lease_ms: Optional[int] = None
        self.token = f"{name}-{c.new_token()}" if name else c.new_token()
        self.cluster = c.is_cluster(client)
        self._lock: ContextManager[Any] = lock or contextlib.nullcontext()
        self._owner_ids = itertools.count(1)
        self._by_owner: Dict[Any, List[_H]] = {}  # owner -> [Hold]
        # (kind, keys, thread or id(task)) -> Hold: what a thread (task) re-enters
        self._mine: Dict[Tuple[str, Tuple[Any, ...], int], _H] = {}
        # (key, thread or id(task)) -> its read-write lock's owner (asyncio: with the task)
        self._rw_owner: Dict[Tuple[Any, int], Any] = {}
        self._conns: Dict[Optional[str], Any] = {}  # node -> the face's session connection
        self._callbacks: List[Callable[[_H], Any]] = []
        self._pending: List[List[Any]] = []  # release commands to retry
        # owner -> (keys, first failure): re-attach to retry
        self._unattached: Dict[Any, Tuple[Tuple[Any, ...], float]] = {}
        self._epoch = 0  # counts the session connection's reconnects
        self._closed = False
        self._elections = Elections(lock)  # campaigns on their way, leaderships

    def _node_of(self, key: Any) -> Optional[str]:
        """The cluster node that serves ``key`` (None: not a cluster)."""
        if not self.cluster:
            return None
        name: str = self.client.get_node_from_key(key).name
        return name

    def on_lost(self, callback: Callable[..., Any]) -> Callable[..., Any]:
        """``callback(hold)`` is called when a hold is lost: on the session's
        thread (threaded), or on its loop, where a coroutine function's
        coroutine runs as a task of its own (asyncio)."""
        self._callbacks.append(callback)
        return callback

    def holds(self) -> List[_H]:
        with self._lock:
            return [h for hs in self._by_owner.values() for h in hs]

    def _new_owner(self) -> str:
        with self._lock:
            return f"{self.token}:{next(self._owner_ids)}"

    def _track(self, kind: str, keys: Tuple[Any, ...], owner: Any, tokens: List[int]) -> _H:
        """Adopt a hold taken outside ``acquire`` (the drop-in's) for re-attach
        and loss signals."""
        h = self._hold_type(self, kind, tuple(keys), owner, tokens, self._node_of(keys[0]))
        with self._lock:
            self._by_owner.setdefault(owner, []).append(h)
        return h

    def _forget(self, h: _H) -> None:
        """Out of the books: a hold released."""
        with self._lock:
            if h._reg is not None and self._mine.get(h._reg) is h:
                del self._mine[h._reg]
            hs = self._by_owner.get(h.owner)
            if hs and h in hs:
                hs.remove(h)
                if not hs:
                    del self._by_owner[h.owner]
                    if h._reg is not None:
                        self._rw_owner.pop((h.key, h._reg[2]), None)

    def _mark_lost(self, h: _H, reason: str) -> None:
        """A hold lost: its ``lost`` event, out of the re-attach books (it
        stays its thread's or task's until released, so that it is seen
        lost), then the callbacks (the session's, the drop-in's)."""
        with self._lock:
            if h.lost_reason is not None:
                return
            h.lost_reason = reason
            h._signal_lost()
            hs = self._by_owner.get(h.owner)
            if hs and h in hs:
                hs.remove(h)
                if not hs:
                    del self._by_owner[h.owner]
        callbacks = list(self._callbacks)
        lost_callback = h._lost_callback
        if lost_callback is not None:
            callbacks.append(lambda h: lost_callback(reason))
        for cb in callbacks:
            try:
                self._call_back(cb, h)
            except Exception:  # noqa: BLE001
                log.exception("on_lost callback failed")

    def _call_back(self, cb: Callable[[Any], Any], h: Any) -> None:
        """Run a loss callback (the asyncio face also runs what it returns)."""
        cb(h)

    def _loss_message(self, owner: Any, key: Any, reason: str) -> None:
        """The server said on the session's channel that ``owner`` lost ``key``."""
        with self._lock:
            hs = [h for h in self._by_owner.get(owner, ()) if key in h.keys]
            e = self._elections.get(key, owner)
        for h in hs:
            self._mark_lost(h, reason)
        if e is not None:
            e._mark_lost(reason)

    def _lost_if_down_too_long(self, sc: Any) -> None:
        """The session connection ``sc`` has been down for longer than a
        lease: its holds may have ended, and the library cannot tell."""
        if time.monotonic() - sc.last_alive <= self.lease_ms / 1000:
            return
        with self._lock:
            hs = [h for h in self.holds() if h.node == sc.node]
        for h in hs:
            self._mark_lost(h, "session-down")
