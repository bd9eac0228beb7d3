"""The threaded leader election (``ELECT.*``): :class:`Election`,
:class:`Leadership`, :class:`Observer` (and :data:`Leader`, who leads).  A
campaign waits through the core's wait (``_wait``) and its leadership is
kept by the session's core; given a client instead of a session, the
client's implicit session (``_implicit``) keeps it."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable, List, Literal, Optional

import redis.exceptions as rex

from . import _common as c
from . import _implicit
from ._core import SessionCore
from ._election_base import Campaign, ElectionBase, Leader, LeadershipState, campaign_args, leader_of
from ._wait import blocking_call, get_conn, pool_of
from .errors import BusyError, LostError, NotOwnerError, UnavailableError

__all__ = ["Election", "Leadership", "Leader", "Observer"]


class Leadership(LeadershipState):
    """This process leads ``name``: what :meth:`Election.campaign` returns.

    ``term`` is the leadership's fencing token (terms only grow, also across
    failovers): pass it to what the leader writes to.  ``lost`` is a
    :class:`threading.Event`, set when the leadership is lost, with
    ``lost_reason`` saying why: ``forced`` (``LOCK.FORCERELEASE``), ``gone``
    (the lock was deleted, overwritten or expired), ``idle`` (the server heard
    nothing from the session connection for a lease), ``maxhold``, ``moved``,
    ``demoted`` (the server became a replica), ``connection`` (the session
    connection dropped), ``deadline`` (no PING answered within half a lease:
    the server may hand over from then on), ``notowner`` (a ``proclaim`` was
    refused).  A lost leadership is resigned in the background, so that the
    next candidate leads at once.  A context manager: leaving it resigns.
    """

    _event_type = threading.Event

    def proclaim(self, value: Any) -> int:
        """Set the leader's value (``ELECT.PROCLAIM``); observers see it.
        Returns the term.  :class:`NotOwnerError` (and the leadership marked
        lost) if this candidate no longer leads."""
        self.check()
        try:
            term = self.session._execute("ELECT.PROCLAIM", self.name, self.candidate, value)
        except NotOwnerError:
            self._mark_lost("notowner")
            raise
        return self._proclaimed(value, term)

    def resign(self) -> bool:
        """Leave the election (``ELECT.RESIGN``): the next candidate leads at
        once.  True if this candidate still led, False if not (lost before, or
        resigned already)."""
        if not self._resigning():
            return False
        args = ["ELECT.RESIGN", self.name, self.candidate]
        try:
            led = bool(self.session._execute(*args))
        except UnavailableError:
            self.session._pending_add(args)  # retried at the session's PINGs
            raise
        return led and self.lost_reason is None

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        try:
            self.resign()
        except UnavailableError:
            pass  # resigned in the background as a lost one would be
        return False


class Election(ElectionBase):
    """The election of a leader for ``name`` (``ELECT.*``).

    ``Election(client, name, value=None, lease_ms=5000, on_lost=None)``:
    ``client`` is a redis-py client (its :func:`~redis_lock_client.
    default_session` keeps the leaderships) or a :class:`Session`.
    ``value`` is what the leader publishes (an address, say), ``lease_ms``
    the leadership's lease: the server renews it while the session
    connection is heard from; the session PINGs every lease/4 while this
    election campaigns or leads, and a leader believes it leads until the
    send time of its last answered PING plus half a lease.  ``on_lost(
    leadership)`` is called (on the session's thread) when a leadership of
    this election is lost.
    """

    _session_class = SessionCore

    @property
    def session(self) -> SessionCore:
        if self._session is None or (self._session._closed and self._client is not None):
            self._session = _implicit.default_session(self._client)
        session: SessionCore = self._session
        return session

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else self._session.client

    def campaign(
        self, timeout: Optional[float] = None, value: Any = None, on_lost: Optional[Callable[..., Any]] = None
    ) -> Leadership:
        """Wait to lead (FIFO, behind earlier candidates and lock waiters):
        ``timeout=None`` waits as long as it takes, ``0`` tries once,
        ``seconds`` waits that long; then :class:`BusyError`.  Cancelled
        (Ctrl-C, an exception) it leaves nothing queued or held
        (``LOCK.CANCEL``, then ``ELECT.RESIGN``).  Returns a
        :class:`Leadership` of a fresh candidate id; ``value`` overrides the
        election's, ``on_lost(leadership)`` is called if it is lost."""
        session = self.session
        if session._closed:
            raise UnavailableError("session is closed")
        block = c.block_ms(timeout)
        lease_s = self.lease_ms / 1000
        value = self.value if value is None else value
        with session._lock:
            candidate = f"{session.token}:{next(session._owner_ids)}"
        node = session._node_of(self.name)
        sc = session._session_conn(node)
        c.check_lease(self.lease_ms, session.min_lease_ms)
        pending = Campaign(self.name, candidate, node)
        session._elections_add(pending, lease_s)  # PINGs every lease/4 from now
        try:
            epoch = session._epoch
            sent = time.monotonic()
            args = self._campaign_args(candidate, value, block)
            try:
                reply = self._blocking(args, block, candidate)
            except c.NoSession:
                session._wait_session(self.name)
                epoch = session._epoch
                sent = time.monotonic()
                try:
                    reply = self._blocking(args, block, candidate)
                except c.NoSession as e:
                    raise UnavailableError(f"session not registered on the server: {e}") from None
            if reply is None:
                if timeout == 0:
                    raise BusyError(f"election {self.name!r}: another candidate leads")
                raise BusyError(f"election {self.name!r}: not leading within {timeout} s")
            if session._epoch != epoch or pending.lost_reason == "connection":
                # the session connection was replaced while we waited: bind the
                # leadership to the new one (the same candidate re-attaches)
                sc.up.wait(lease_s / 2)
                sent = time.monotonic()
                reply = session._execute(*self._campaign_args(candidate, value, None))
                if reply is None:
                    raise LostError(f"election {self.name!r}: leadership lost before it could be kept")
                pending.lost_reason = None
            term = int(reply)
        except BaseException:
            session._elections.remove(pending)
            raise
        ping = sc.last_ok_ping_sent
        deadline = max(sent, ping if ping is not None else sent) + lease_s / 2
        leadership = Leadership(self, session, candidate, term, value, node, lease_s, deadline, on_lost)
        # (in this order: a loss message finds the pending campaign or the leadership)
        session._elections_add(leadership, lease_s)  # also wakes the session thread for its deadline
        session._elections.remove(pending)
        if pending.lost_reason is not None:
            leadership._mark_lost(pending.lost_reason)
        return leadership

    def _campaign_args(self, candidate: Any, value: Any, block: Optional[int]) -> List[Any]:
        return campaign_args(self.name, candidate, value, self.lease_ms, self.session.token, block)

    def _blocking(self, args: List[Any], block: Optional[int], candidate: Any) -> Any:
        s = self.session
        return blocking_call(s.client, s.cluster, args, block, ["ELECT.RESIGN", self.name, candidate], s._pending_add)

    def leader(self) -> Optional["Leader"]:
        """Who leads now (``ELECT.LEADER``): a :class:`Leader`, or None."""
        return leader_of(self.session._execute("ELECT.LEADER", self.name))

    def observe(self) -> "Observer":
        """An iterator of the leadership's changes (``ELECT.OBSERVE key TERM t
        BLOCK 0``): the current leader first once someone leads, then every
        change in order (a new term, a proclaimed value, or None when nobody
        leads; a change followed by another before the next step is seen as
        the later one).  Each step waits on a pooled connection; stop with
        ``break`` or, from another thread, :meth:`Observer.close`."""
        return Observer(self)


class Observer:
    """What :meth:`Election.observe` returns: iterate it; ``close()`` (from
    any thread) ends it, also while a step waits.  A context manager."""

    def __init__(self, election: Any) -> None:
        self.election = election
        self.term = 0
        self._closed = False
        self._conn = None
        self._mu = threading.Lock()

    def __iter__(self) -> "Observer":
        return self

    def __next__(self) -> Optional["Leader"]:
        if self._closed:
            raise StopIteration
        client = self.election.client
        name = self.election.name
        pool = pool_of(client, c.is_cluster(client), name)
        try:
            conn = get_conn(pool)
        except Exception as e:
            raise c.map_error(e, "ELECT.OBSERVE") from e
        with self._mu:
            if self._closed:
                pool.release(conn)
                raise StopIteration
            self._conn = conn
        sock = None
        try:
            conn.send_command("ELECT.OBSERVE", name, "TERM", self.term, "BLOCK", 0)
            sock = conn._sock
            if sock is not None:
                sock.settimeout(None)
            reply = conn.read_response()
        except rex.ResponseError as e:
            self._done(pool, conn, sock)
            raise c.map_error(e, "ELECT.OBSERVE") from e
        except BaseException as e:
            conn.disconnect()  # a wait cut short: the connection is not reused
            self._done(pool, conn, None)
            if self._closed and isinstance(e, Exception):
                raise StopIteration from None
            err = c.map_error(e, "ELECT.OBSERVE") if isinstance(e, Exception) else e
            if err is e:
                raise
            raise err from e
        self._done(pool, conn, sock)
        leader = leader_of(reply)
        self.term = 0 if leader is None else leader.term
        return leader

    def _done(self, pool: Any, conn: Any, sock: Any) -> None:
        with self._mu:
            self._conn = None
        if sock is not None and conn._sock is sock:
            sock.settimeout(conn.socket_timeout)
        pool.release(conn)

    def close(self) -> None:
        """End the iteration; a step waiting now ends (StopIteration)."""
        with self._mu:
            self._closed = True
            conn = self._conn
        sock = getattr(conn, "_sock", None) if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        self.close()
        return False
