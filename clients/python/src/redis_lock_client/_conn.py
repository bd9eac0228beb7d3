"""The threaded core's session connection: one dedicated connection per
server (per cluster node), named with ``LOCK.SESSION`` and subscribed to the
session's loss channel, served by a reader thread that PINGs, hears losses
and reconnects.  What it reports goes to its session through
:class:`SessionBooks`, the part of the session it needs."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from typing import Any, Callable, Optional, Protocol

import redis.exceptions as rex

from . import _common as c
from ._conn_state import SessionConnState, SessionLink

__all__ = ["SessionConn", "SessionBooks"]

log = logging.getLogger("redis_lock_client")


class SessionBooks(SessionLink, Protocol):
    """What a threaded session connection reads and tells its session."""

    def _retry_pending(self) -> None: ...
    def _retry_unattached(self) -> None: ...
    def _rehome(self, sc: "SessionConn") -> bool: ...
    def _reattach(self, sc: "SessionConn") -> None: ...


class SessionConn(SessionConnState):
    """The session connection to one server (one per cluster node)."""

    def __init__(self, session: SessionBooks, node: Optional[str], factory: Callable[[], Any]) -> None:
        super().__init__(session, node, factory)
        self.session: SessionBooks = session
        self.up = threading.Event()
        self.thread: Optional[threading.Thread] = None
        # a pipe that wakes the reader thread when the PING interval or a
        # deadline changes (an election began, a leadership was won)
        self._wake_r, self._wake_w = socket.socketpair()  # (a pipe is no socket on Windows)
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    def open(self) -> None:
        conn = self.factory()
        try:
            conn.connect()
            if self.thread is None:  # first open: the lease must be one this server keeps alive
                conn.send_command("INFO", "lock")
                self.session.min_lease_ms = c.parse_min_lease(conn.read_response())
                c.check_lease(self.session.lease_ms, self.session.min_lease_ms)
            conn.send_command("LOCK.SESSION", self.session.token)
            conn.read_response()
            conn.send_command("CLIENT", "ID")
            self.id = int(conn.read_response())
            conn.send_command("SUBSCRIBE", c.CHANNEL_PREFIX + self.session.token)
            conn.read_response()
        except BaseException as e:
            conn.disconnect()
            raise c.map_error(e, "session") from e
        self._opened(conn)

    def start(self) -> None:
        self.open()
        thread = self.thread = threading.Thread(
            target=self._run, name=f"lock-session-{self.session.token[:8]}", daemon=True
        )
        thread.start()

    def close(self) -> None:
        self.closing = True
        conn = self.conn
        sock = getattr(conn, "_sock", None) if conn else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.wake()
        if self.thread and self.thread is not threading.current_thread():
            self.thread.join(5)
        if conn:
            conn.disconnect()
        if self.thread is None or not self.thread.is_alive():
            self._wake_r.close()
            self._wake_w.close()

    def wake(self) -> None:
        """Makes the reader thread look again at its PING interval and the
        elections' deadlines (a campaign began, a leadership was won)."""
        try:
            self._wake_w.send(b"w")
        except OSError:  # full (it wakes anyway) or closed
            pass

    # the reader thread
    def _run(self) -> None:
        while not self.closing:
            try:
                self._serve(self.conn)
            except BaseException as e:  # noqa: BLE001 - any end of the connection
                if not self.closing:
                    log.info("session connection to %s dropped: %s", self.node or "server", e)
            self.up.clear()
            if not self.closing:
                # a leadership is not re-attached: it is lost with its connection
                self.session._elections.down(self.node, "demoted" if self.demoted else "connection")
            try:
                self.conn.disconnect()
            except Exception:
                pass
            if self.closing:
                return
            self._reconnect()

    def _serve(self, conn: Any) -> None:
        session = self.session
        while not self.closing:
            now = time.monotonic()
            # every second, every lease/4 while an election of this session
            # campaigns or leads (looked at again when woken)
            next_ping = self.last_ping_at + session._elections.ping_interval()
            wait = min(next_ping, session._elections.next_deadline()) - now
            if wait > 0 and self._readable(conn, wait):
                reply = conn.read_response()
                self.last_alive = time.monotonic()
                self._handle(reply)
                continue
            now = time.monotonic()
            session._elections.check_deadlines(now)
            if now >= next_ping:
                if now - self.last_alive > c.DEAD_AFTER:
                    raise rex.ConnectionError("session connection silent")
                self.pings.append(now)
                conn.send_command("PING")
                self.last_ping_at = now
                session._retry_pending()
                if session._unattached:
                    session._retry_unattached()

    def _readable(self, conn: Any, wait: float) -> bool:
        """Waits up to ``wait`` s for a reply on ``conn`` or a wake-up; True
        when a reply can be read."""
        if conn.can_read(timeout=0):
            return True
        sock = conn._sock
        if sock is None:
            raise rex.ConnectionError("session connection closed")
        if hasattr(select, "poll"):  # no FD_SETSIZE limit
            p = select.poll()
            p.register(sock, select.POLLIN)
            p.register(self._wake_r, select.POLLIN)
            ready = {fd for fd, _ in p.poll(wait * 1000)}
            woken, readable = self._wake_r.fileno() in ready, sock.fileno() in ready
        else:
            r, _, _ = select.select([sock, self._wake_r], [], [], wait)
            woken, readable = self._wake_r in r, sock in r
        if woken:
            try:
                self._wake_r.recv(4096)
            except OSError:
                pass
            return bool(conn.can_read(timeout=0))
        return readable

    def _reconnect(self) -> None:
        delay = 0.05
        session = self.session
        while not self.closing:
            session._lost_if_down_too_long(self)
            try:
                self.open()
            except Exception as e:  # noqa: BLE001
                log.debug("session reconnect to %s failed: %s", self.node or "server", e)
                if session.cluster and session._rehome(self):
                    return  # a node gone for good, its holds moved to other nodes
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            session._epoch += 1
            session._reattach(self)
            return

