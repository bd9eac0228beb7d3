"""The asyncio leader election, the threaded ``_election``'s twin:
:class:`Election`, :class:`Leadership`, :class:`Observer` (and
:data:`Leader`).  What both faces share without I/O is ``_election_base``'s;
a campaign waits through the core's wait and is kept by the session's
core; given a client instead of a session, its implicit session keeps it."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable, List, Literal, Optional

import redis.exceptions as rex

from .. import _common as c
from .._election_base import Campaign, ElectionBase, Leader, LeadershipState, campaign_args, leader_of
from ..errors import BusyError, LostError, NotOwnerError, UnavailableError
from . import _implicit
from ._core import SessionCore
from ._wait import FOREVER, blocking_call, cancel_requests, get_conn, honour_lost_cancel, release_conn

__all__ = ["Election", "Leadership", "Leader", "Observer"]


class Leadership(LeadershipState):
    """See the sync :class:`redis_lock_client.Leadership`; ``lost`` is an
    :class:`asyncio.Event`, ``proclaim`` and ``resign`` are coroutines, and it
    is an async context manager (leaving it resigns)."""

    _event_type = asyncio.Event

    async def proclaim(self, value: Any) -> int:
        self.check()
        try:
            term = await self.session._execute("ELECT.PROCLAIM", self.name, self.candidate, value)
        except NotOwnerError:
            self._mark_lost("notowner")
            raise
        return self._proclaimed(value, term)

    async def resign(self) -> bool:
        if not self._resigning():
            return False
        args = ["ELECT.RESIGN", self.name, self.candidate]
        try:
            led = bool(await self.session._execute(*args))
        except UnavailableError:
            self.session._pending.append(args)  # retried at the session's PINGs
            raise
        return led and self.lost_reason is None

    def _run_callback(self, cb: Any) -> None:
        r = cb(self)
        if inspect.isawaitable(r):
            asyncio.ensure_future(r)

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(self, *exc: Any) -> Literal[False]:
        try:
            await self.resign()
        except UnavailableError:
            pass
        return False


class Election(ElectionBase):
    """See the sync :class:`redis_lock_client.Election`: ``Election(session
    or client, name, value=None, lease_ms=5000, on_lost=None)`` (a client:
    its asyncio ``default_session``); ``campaign``, ``leader`` are
    coroutines, ``observe()`` an async iterator.  ``on_lost`` may be a
    coroutine function."""

    _session_class = SessionCore

    async def _get_session(self) -> SessionCore:
        if self._session is None or (self._session._closed and self._client is not None):
            self._session = await _implicit.default_session(self._client)
        session: SessionCore = self._session
        return session

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else self._session.client

    async def campaign(
        self, timeout: Optional[float] = None, value: Any = None, on_lost: Optional[Callable[..., Any]] = None
    ) -> Leadership:
        cancels = cancel_requests()
        session = await self._get_session()
        if session._closed:
            raise UnavailableError("session is closed")
        block = c.block_ms(timeout)
        lease_s = self.lease_ms / 1000
        value = self.value if value is None else value
        candidate = f"{session.token}:{next(session._owner_ids)}"
        node = session._node_of(self.name)
        sc = await session._session_conn(node)
        c.check_lease(self.lease_ms, session.min_lease_ms)
        pending = Campaign(self.name, candidate, node)
        await session._elections_add(pending, lease_s, ping=True)  # PINGs every lease/4 from now
        try:
            epoch = session._epoch
            sent = time.monotonic()
            args = self._campaign_args(session, candidate, value, block)
            cleanup = ["ELECT.RESIGN", self.name, candidate]
            try:
                reply = await blocking_call(
                    session.client, session.cluster, args, block, cleanup, session._pending.append, cancels
                )
            except c.NoSession:
                await session._wait_session(self.name)
                epoch = session._epoch
                sent = time.monotonic()
                try:
                    reply = await blocking_call(
                        session.client, session.cluster, args, block, cleanup, session._pending.append, cancels
                    )
                except c.NoSession as e:
                    raise UnavailableError(f"session not registered on the server: {e}") from None
            if reply is None:
                if timeout == 0:
                    raise BusyError(f"election {self.name!r}: another candidate leads")
                raise BusyError(f"election {self.name!r}: not leading within {timeout} s")
            if session._epoch != epoch or pending.lost_reason == "connection":
                try:
                    await asyncio.wait_for(sc.up.wait(), lease_s / 2)
                except asyncio.TimeoutError:
                    pass
                sent = time.monotonic()
                reply = await session._execute(*self._campaign_args(session, candidate, value, None))
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
        await session._elections_add(leadership, lease_s)
        session._elections.remove(pending)
        if pending.lost_reason is not None:
            leadership._mark_lost(pending.lost_reason)
        return leadership

    def _campaign_args(self, session: Any, candidate: Any, value: Any, block: Optional[int]) -> List[Any]:
        return campaign_args(self.name, candidate, value, self.lease_ms, session.token, block)

    async def leader(self) -> Optional[Leader]:
        try:
            return leader_of(await self.client.execute_command("ELECT.LEADER", self.name))
        except Exception as e:
            raise c.map_error(e, "ELECT.LEADER") from e

    def observe(self) -> "Observer":
        """``async for leader in election.observe():`` every change in order
        (see the sync one); ``break``, a task cancel or ``close()`` ends it."""
        return Observer(self)


class Observer:
    """The async iterator :meth:`Election.observe` returns; each step is
    ``ELECT.OBSERVE key TERM t BLOCK 0`` on a pooled connection."""

    def __init__(self, election: Any) -> None:
        self.election = election
        self.term = 0
        self._closed = False
        self._conn = None

    def __aiter__(self) -> "Observer":
        return self

    async def __anext__(self) -> Optional[Leader]:
        cancels = cancel_requests()
        if self._closed:
            raise StopAsyncIteration
        client = self.election.client
        name = self.election.name
        if hasattr(client, "get_node_from_key"):  # a cluster: the node's own connections
            node = client.get_node_from_key(name)
            conn = node.acquire_connection()
            release = (lambda: node.release(conn)) if hasattr(node, "release") else (lambda: node._free.append(conn))
        else:
            pool = client.connection_pool
            try:
                conn = await get_conn(pool)
            except Exception as e:
                raise c.map_error(e, "ELECT.OBSERVE") from e
            release = lambda: pool.release(conn)  # noqa: E731
        self._conn = conn
        try:
            await conn.connect()
            honour_lost_cancel(cancels)  # a cancel redis-py lost (see cancel_requests)
            await conn.send_command("ELECT.OBSERVE", name, "TERM", self.term, "BLOCK", 0)
            honour_lost_cancel(cancels)
            reply = await conn.read_response(timeout=FOREVER)  # (not the socket timeout)
        except rex.ResponseError as e:
            self._conn = None
            await release_conn(release)
            raise c.map_error(e, "ELECT.OBSERVE") from e
        except BaseException as e:
            self._conn = None
            await conn.disconnect(nowait=True)
            await release_conn(release)
            if self._closed and isinstance(e, Exception):
                raise StopAsyncIteration from None
            err = c.map_error(e, "ELECT.OBSERVE") if isinstance(e, Exception) else e
            if err is e:
                raise
            raise err from e
        self._conn = None
        await release_conn(release)
        leader = leader_of(reply)
        self.term = 0 if leader is None else leader.term
        return leader

    async def close(self) -> None:
        """End the iteration; a step waiting now ends (StopAsyncIteration)."""
        self._closed = True
        conn = self._conn
        if conn is not None:
            await conn.disconnect(nowait=True)

    async def __aenter__(self) -> "Observer":
        return self

    async def __aexit__(self, *exc: Any) -> Literal[False]:
        await self.close()
        return False
