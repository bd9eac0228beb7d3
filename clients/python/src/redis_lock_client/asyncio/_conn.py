"""The asyncio core's session connection: the threaded ``_conn``'s twin,
served by a task instead of a thread.  What it reports goes to its session
through :class:`SessionBooks`, the part of the session it needs."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Optional, Protocol

import redis.exceptions as rex

from .. import _common as c
from .._conn_state import SessionConnState, SessionLink

__all__ = ["SessionConn", "SessionBooks"]

log = logging.getLogger("redis_lock_client")


class SessionBooks(SessionLink, Protocol):
    """What an asyncio session connection reads and tells its session."""

    async def _retry_pending(self) -> None: ...
    async def _retry_unattached(self) -> None: ...
    async def _rehome(self, sc: Any) -> bool: ...
    async def _reattach(self, sc: Any) -> None: ...


class SessionConn(SessionConnState):
    """The session connection to one server (one per cluster node), served by a task."""

    def __init__(self, session: SessionBooks, node: Optional[str], factory: Callable[[], Any]) -> None:
        super().__init__(session, node, factory)
        self.session: SessionBooks = session
        self.up = asyncio.Event()
        self.task: Optional[asyncio.Task[None]] = None

    async def open(self) -> None:
        conn = self.factory()
        try:
            await conn.connect()
            if self.task is None:  # first open: the lease must be one this server keeps alive
                await conn.send_command("INFO", "lock")
                self.session.min_lease_ms = c.parse_min_lease(await conn.read_response())
                c.check_lease(self.session.lease_ms, self.session.min_lease_ms)
            await conn.send_command("LOCK.SESSION", self.session.token)
            await conn.read_response()
            await conn.send_command("CLIENT", "ID")
            self.id = int(await conn.read_response())
            await conn.send_command("SUBSCRIBE", c.CHANNEL_PREFIX + self.session.token)
            await conn.read_response()
        except BaseException as e:
            await conn.disconnect(nowait=True)
            raise c.map_error(e, "session") from e
        self._opened(conn)

    async def start(self) -> None:
        await self.open()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        self.closing = True
        if self.task:
            self.task.cancel()
            try:
                await self.task
            except BaseException:  # noqa: BLE001
                pass
        if self.conn:
            await self.conn.disconnect(nowait=True)

    async def _run(self) -> None:
        while not self.closing:
            try:
                await self._serve(self.conn)
            except asyncio.CancelledError:
                raise
            except BaseException as e:  # noqa: BLE001
                log.info("session connection dropped: %s", e)
            self.up.clear()
            if not self.closing:
                # a leadership is not re-attached: it is lost with its connection
                self.session._elections.down(self.node, "demoted" if self.demoted else "connection")
            try:
                await self.conn.disconnect(nowait=True)
            except Exception:  # noqa: BLE001
                pass
            if self.closing:
                return
            await self._reconnect()

    async def _serve(self, conn: Any) -> None:
        session = self.session
        while not self.closing:
            # every second, every lease/4 while an election campaigns or leads
            next_ping = self.last_ping_at + session._elections.ping_interval()
            wait = min(next_ping, session._elections.next_deadline()) - time.monotonic()
            if wait > 0:
                reply = await conn.read_response(timeout=wait)
                if reply is not None:
                    self.last_alive = time.monotonic()
                    self._handle(reply)
                continue
            now = time.monotonic()
            session._elections.check_deadlines(now)
            if now < next_ping:
                continue
            if now - self.last_alive > c.DEAD_AFTER:
                raise rex.ConnectionError("session connection silent")
            await self.ping(conn)
            await session._retry_pending()
            if session._unattached:
                await session._retry_unattached()

    async def ping(self, conn: Any = None) -> None:
        """A PING now (also from a campaign that needs PINGs sooner: the
        reader's wait then ends with its answer)."""
        conn = conn or self.conn
        if conn is None or not self.up.is_set():
            return
        now = time.monotonic()
        self.pings.append(now)
        self.last_ping_at = now
        await conn.send_command("PING")

    async def _reconnect(self) -> None:
        delay = 0.05
        while not self.closing:
            self.session._lost_if_down_too_long(self)
            try:
                await self.open()
            except Exception as e:  # noqa: BLE001
                log.debug("session reconnect failed: %s", e)
                if self.session.cluster and await self.session._rehome(self):
                    return  # a node gone for good, its holds moved to other nodes
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            self.session._epoch += 1
            await self.session._reattach(self)
            return
