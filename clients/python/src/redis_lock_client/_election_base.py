"""What the sync and asyncio elections share, without I/O: :data:`Leader`
and the parsing of the replies that name it, a campaign's arguments, the
pending campaign, the leadership's state and checks, and the election's
fields.  Each face's ``_election`` adds its I/O."""

from __future__ import annotations

import logging
import threading
import time
from collections import namedtuple
from typing import Any, Callable, List, Optional

from . import _common as c
from .errors import LostError

__all__ = ["Leader", "leader_of", "campaign_args", "Campaign", "LeadershipState", "ElectionBase"]

log = logging.getLogger("redis_lock_client")

#: Who leads: ``candidate`` (str), ``term`` (int, the leadership's fencing
#: token), ``value`` (str or None), ``ttl_ms`` (ms left of the current lease,
#: -1 for none).
Leader = namedtuple("Leader", "candidate term value ttl_ms")


def leader_of(reply: Any) -> Optional["Leader"]:
    """ELECT.LEADER / ELECT.OBSERVE's map -> a Leader, or None when nobody leads."""
    m = c.as_map(reply)
    if m is None or m.get("candidate") is None or not int(m.get("term") or 0):
        return None
    value = m.get("value")
    return Leader(
        c._text(m["candidate"]),
        int(m["term"]),
        None if value is None else c._text(value),
        int(m.get("ttl", -1)),
    )


class Campaign:
    """A candidate whose ELECT.CAMPAIGN is on its way: a loss message or a
    connection drop meanwhile is remembered for the leadership it may become."""

    leads = False

    def __init__(self, key: Any, candidate: Any, node: Optional[str]) -> None:
        self.key = key
        self.candidate = candidate
        self.node = node
        self.lost_reason: Optional[str] = None

    def _mark_lost(self, reason: str) -> None:
        if self.lost_reason is None:
            self.lost_reason = reason


class LeadershipState:
    """What the sync and asyncio leaderships share: the handle's fields, the
    local deadline and the checks made on it."""

    leads = True
    #: the type of ``lost`` (each face's Event)
    _event_type: Callable[[], Any]

    def __init__(
        self,
        election: Any,
        session: Any,
        candidate: Any,
        term: Optional[int],
        value: Any,
        node: Optional[str],
        lease_s: float,
        deadline: float,
        on_lost: Optional[Callable[..., Any]],
    ) -> None:
        self.election = election
        self.session = session
        self.name = election.name
        self.candidate = candidate
        self.term = term
        self.value = value
        self.node = node
        self.lease = lease_s
        #: monotonic time until which this process may believe it leads
        self.deadline = deadline
        self.lost = self._event_type()
        self.lost_reason: Optional[str] = None
        self.resigned = False
        self._on_lost = on_lost
        # guards lost_reason and resigned: a sync leadership is lost on the
        # session's thread and resigned on its caller's (never contended in asyncio)
        self._mu = threading.Lock()

    @property
    def key(self) -> Any:
        return self.name

    @property
    def is_leader(self) -> bool:
        """True while the leadership is neither lost nor resigned, and its
        local deadline has not passed (checked now: look before acting)."""
        if self.lost_reason is None and not self.resigned and time.monotonic() >= self.deadline:
            self._mark_lost("deadline")
        return self.lost_reason is None and not self.resigned

    def check(self) -> None:
        """Raise :class:`LostError` unless :attr:`is_leader`."""
        if not self.is_leader:
            raise LostError(
                f"leadership of {self.name!r} (term {self.term}) ended: {self.lost_reason or 'resigned'}"
            )

    def _extend_belief(self, sent: float) -> None:
        d = sent + self.lease / 2
        if d > self.deadline:
            self.deadline = d

    def _proclaimed(self, value: Any, term: Any) -> int:
        self.value = value if isinstance(value, str) else c._text(value)
        return int(term)

    def _mark_lost(self, reason: str) -> None:
        with self._mu:
            if self.lost_reason is not None or self.resigned:
                return
            self.lost_reason = reason
        self._lost_now()

    def _resigning(self) -> bool:
        """Mark the leadership resigned and out of the session's books; False
        if it was already."""
        with self._mu:
            if self.resigned:
                return False
            self.resigned = True
        self.session._elections.remove(self)
        return True

    def _lost_now(self) -> None:
        """After ``lost_reason`` is set: the event, the session's books, what
        is left of it on the server (a leadership no longer renewed, or bound
        to a connection that is gone) resigned now rather than at its lease's
        end, and the callbacks."""
        self.lost.set()
        self.session._elections.remove(self)
        self.session._resign_soon(self.name, self.candidate, self.lease)
        for cb in (self._on_lost, self.election._on_lost):
            if cb is None:
                continue
            try:
                self._run_callback(cb)
            except Exception:  # noqa: BLE001
                log.exception("on_lost callback failed")

    def _run_callback(self, cb: Any) -> None:
        cb(self)

    def __repr__(self) -> str:
        state = "leads" if self.lost_reason is None and not self.resigned else (self.lost_reason or "resigned")
        return f"<Leadership {self.name!r} candidate={self.candidate} term={self.term} {state}>"


def campaign_args(
    name: Any, candidate: Any, value: Any, lease_ms: Optional[int], token: Any, block: Optional[int]
) -> List[Any]:
    """``ELECT.CAMPAIGN name candidate [VALUE v] PX lease SESSION token [BLOCK ms]``."""
    args = ["ELECT.CAMPAIGN", name, candidate]
    if value is not None:
        args += ["VALUE", value]
    args += ["PX", lease_ms, "SESSION", token]
    if block is not None:
        args += ["BLOCK", block]
    return args


class ElectionBase:
    """What the sync and asyncio elections share: the name, value and
    lease, and the session given or the client to take one from
    (``_session_class`` is each one's ``Session``)."""

    _session_class: Any = None

    def __init__(
        self,
        client: Any,
        name: Any,
        value: Any = None,
        lease_ms: int = 5000,
        on_lost: Optional[Callable[..., Any]] = None,
    ) -> None:
        self._session: Any
        self._client: Any
        if isinstance(client, self._session_class):
            self._session, self._client = client, None
        else:
            self._session, self._client = None, client
        self.name = name
        self.value = value
        self.lease_ms = int(lease_ms)
        c.check_lease(self.lease_ms)  # (the server's floor: when it campaigns, from its session)
        self._on_lost = on_lost
