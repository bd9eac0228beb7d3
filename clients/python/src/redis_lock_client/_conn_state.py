"""What both faces' session connections share, without I/O: the part of
the session a connection reads and tells (:class:`SessionLink`), and the
connection's state with the handling of what the server sends on it, a
PONG or a loss message (:class:`SessionConnState`).  Each face's ``_conn``
adds the I/O: opening, the reader (a thread, a task), PINGs, reconnects."""

from __future__ import annotations

import collections
import time
from typing import Any, Callable, Dict, Optional, Protocol, Tuple

import redis.exceptions as rex

from . import _common as c
from ._books import Elections

__all__ = ["SessionLink", "SessionConnState"]


class SessionLink(Protocol):
    """What a session connection reads and tells its session, either face's
    (each face's core is one; each ``_conn`` adds the calls it awaits or
    not): named here so that a connection needs nothing above it."""

    token: str
    lease_ms: int
    min_lease_ms: Optional[int]
    cluster: bool
    _epoch: int
    _unattached: Dict[Any, Tuple[Tuple[Any, ...], float]]
    _elections: Elections

    def _loss_message(self, owner: Any, key: Any, reason: str) -> None: ...
    def _lost_if_down_too_long(self, sc: Any) -> None: ...


class SessionConnState:
    """The session connection to one server (one per cluster node): its
    fields and what it does with a reply (each face adds ``up``, its event,
    and its reader)."""

    up: Any  # the face's event: set while the connection is open

    def __init__(self, session: Any, node: Optional[str], factory: Callable[[], Any]) -> None:
        self.session = session
        self.node = node
        self.factory = factory
        self.conn: Any = None
        self.closing = False
        self.last_alive = time.monotonic()
        self.id: Optional[int] = None  # CLIENT ID
        # Elections: send times of the PINGs not answered yet (in order), the
        # send time of the last one answered
        self.pings: collections.deque[float] = collections.deque()
        self.last_ok_ping_sent: Optional[float] = None
        self.last_ping_at = time.monotonic()
        self.demoted = False
        self.rehomed_at = 0.0  # (cluster) when the slot map was last re-read for it

    def _opened(self, conn: Any) -> None:
        """``conn`` is named, subscribed and ready: it is the session connection now."""
        self.pings.clear()
        self.last_ok_ping_sent = None
        self.demoted = False
        self.conn = conn
        self.last_alive = self.last_ping_at = time.monotonic()
        self.up.set()

    def _handle(self, reply: Any) -> None:
        """A reply on the session connection: a PONG, or a loss message (a
        ``demoted`` one drops the connection: the server became a replica)."""
        if isinstance(reply, list) and reply and c.s(reply[0]) in ("pong", "PONG"):
            self._pong()
        elif reply in (b"PONG", "PONG"):
            self._pong()
        elif isinstance(reply, list) and len(reply) == 3 and c.s(reply[0]) == "message":
            reason, owner, key = c.parse_loss(reply[2])
            if reason == "demoted":
                self.demoted = True
                raise rex.ConnectionError("server demoted to replica")
            self.session._loss_message(owner, key, reason)

    def _pong(self) -> None:
        if not self.pings:
            return
        sent = self.pings.popleft()
        self.last_ok_ping_sent = sent
        self.session._elections.pong(self.node, sent)
