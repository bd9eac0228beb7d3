"""The threaded flavour: Session, Lock, RWLock, MultiLock, Hold, Semaphore,
Permit, Latch."""

from __future__ import annotations

import collections
import itertools
import logging
import select
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import _common as c
from .errors import LockError, LostError, NotOwnerError, UnavailableError

if TYPE_CHECKING:
    from ._election import Election

__all__ = ["Session", "Lock", "RWLock", "MultiLock", "Hold", "Semaphore", "Permit", "Latch"]

log = logging.getLogger("redis_lock_client")

_CMD = {"x": "LOCK.ACQUIRE", "r": "LOCK.RACQUIRE", "w": "LOCK.WACQUIRE", "m": "LOCK.MACQUIRE"}
_tl = threading.local()
_thread_ids = itertools.count(1)
_event_lock = threading.Lock()


def _thread_key() -> int:
    tid = getattr(_tl, "id", None)
    if tid is None:
        tid = _tl.id = next(_thread_ids)
    return tid


def _is_cluster(client: Any) -> bool:
    return hasattr(client, "get_node_from_key") and hasattr(client, "nodes_manager")


def _get_conn(pool: Any) -> Any:
    try:
        return pool.get_connection()
    except TypeError:  # redis-py 5.0 needs a command name
        return pool.get_connection("LOCK.ACQUIRE")


def release_args(kind: str, keys: Tuple[Any, ...], owner: Any) -> List[Any]:
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


def _pool_of(client: Any, cluster: bool, key: Any) -> Any:
    if not cluster:
        return client.connection_pool
    return client.get_redis_connection(client.get_node_from_key(key)).connection_pool


def blocking_call(
    client: Any,
    cluster: bool,
    args: List[Any],
    block: Optional[int],
    cleanup_args: Optional[List[Any]],
    on_cleanup_failed: Optional[Callable[[List[Any]], None]],
    new_owner: Optional[Callable[[], Any]] = None,
) -> Any:
    """Send one acquire on a pooled connection and read its answer, waiting
    as long as the server's BLOCK (the socket's timeout is lifted for that
    read).  Cancelled (KeyboardInterrupt, any exception): the connection is
    closed, ``LOCK.CANCEL key owner`` ends the wait in the server (closing
    alone leaves a window: a grant written into the closed socket looks
    delivered), then ``cleanup_args`` (a LOCK.RELEASE of the owner) releases a
    grant that crossed the cancel.  ``cleanup_args=None``: a wait that grants
    nothing (``LATCH.AWAIT``), only the connection is closed.

    A wait whose connection breaks (killed, reaped while idle in the pool, a
    network blip) while the server can still be reached is cleaned up the
    same way, then sent again on another connection for what is left of
    ``block`` (its place in line is lost): as a fresh owner ``new_owner()``
    when given (the owner in ``args`` and ``cleanup_args`` is replaced in
    place: read it back with :func:`~redis_lock_client._common.owner_of`),
    else as the same owner.  A server that cannot be reached any more raises
    :class:`UnavailableError`; a wait whose time ran out meanwhile returns None.
    """
    wait = c.Wait(args, block, cleanup_args, on_cleanup_failed, new_owner)
    moved = False
    while True:
        try:
            return _blocking_once(client, cluster, wait)
        except rex.MovedError:
            if moved:
                raise
            moved = True
            client.nodes_manager.initialize()
        except c.WaitBroken:
            if not wait.again():
                return None


def _blocking_once(client: Any, cluster: bool, wait: c.Wait) -> Any:
    args, block = wait.args, wait.block
    pool = _pool_of(client, cluster, wait.key)
    try:
        conn = _get_conn(pool)
    except Exception as e:
        raise c.map_error(e, args[0]) from e
    sent = False
    try:
        sent = True  # (from the first byte: a write that fails half-way may have reached the server)
        conn.send_command(*args)
        sock = conn._sock
        read_timeout = None if block == 0 else (block / 1000 + c.BLOCK_SLACK if block else conn.socket_timeout)
        if read_timeout == conn.socket_timeout or sock is None:
            sock = None  # nothing to lift
        else:
            sock.settimeout(read_timeout)
        try:
            reply = conn.read_response()
        finally:
            if sock is not None and conn._sock is sock:
                sock.settimeout(conn.socket_timeout)
    except rex.ResponseError as e:
        pool.release(conn)
        if isinstance(e, rex.MovedError) and cluster:
            raise
        raise c.map_error(e, args[0]) from e
    except BaseException as e:
        conn.disconnect()
        pool.release(conn)
        if wait.cleanup_args is not None:
            reachable = sent and _clean_up(client, wait)
        else:  # (nothing to clean up: a PING says whether a broken wait can be sent again)
            reachable = c.is_broken_connection(e) and _reachable(client, cluster, wait.key)
        raise wait.failure(e, reachable)
    pool.release(conn)
    return reply


def _clean_up(client: Any, wait: c.Wait) -> bool:
    """End a wait cut short in the server: ``LOCK.CANCEL`` of its owner,
    then its ``cleanup_args`` (a release of a grant that crossed the cancel).
    Whether the server could be reached (else ``on_cleanup_failed``)."""
    assert wait.cleanup_args is not None
    try:
        client.execute_command(*c.cancel_args(wait.args))
    except BaseException:  # noqa: BLE001 - refused: nothing to cancel; unreachable: the release says so
        pass
    try:
        client.execute_command(*wait.cleanup_args)
    except rex.ResponseError:
        return True  # NOTOWNER: it was never granted
    except BaseException:
        if wait.on_cleanup_failed is not None:
            wait.on_cleanup_failed(wait.cleanup_args)
        return False
    return True


def _reachable(client: Any, cluster: bool, key: Any) -> bool:
    """Whether the server of ``key`` answers (a PING on another connection)."""
    try:
        if cluster:
            client.get_redis_connection(client.get_node_from_key(key)).ping()
        else:
            client.ping()
        return True
    except rex.ResponseError:
        return True  # it answered
    except Exception:  # noqa: BLE001 - unreachable
        return False


def _check_owner(by_owner: Dict[Any, List[Any]], owner: Any, keys: Tuple[Any, ...]) -> None:
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


class Hold:
    """One owner's hold of a lock: what ``acquire`` returns.

    ``token`` is the fencing token (``tokens`` per key for a multi-lock),
    ``lost`` a :class:`threading.Event` set when the hold is lost, with
    ``lost_reason`` saying why (``forced``, ``gone``, ``maxhold``, ``moved``,
    ``notowner`` (re-attach refused), ``session-down``).  Re-entries by the
    same thread return the same Hold with ``count`` raised; each
    ``release()`` drops one.  A context manager: leaving it releases once.
    """

    def __init__(
        self, session: Session, kind: str, keys: Tuple[Any, ...], owner: Any, tokens: List[int], node: Optional[str]
    ) -> None:
        self.session = session
        self.kind = kind
        self.keys = keys
        self.owner = owner
        self.tokens = tokens
        self.node = node
        self.count = 1
        self._lost: Optional[threading.Event] = None  # made when first asked for (most holds never are)
        self.lost_reason: Optional[str] = None
        self._reg: Optional[Tuple[str, Tuple[Any, ...], int]] = None
        self._lost_callback: Optional[Callable[[str], Any]] = None  # the drop-in's on_lost(reason)

    @property
    def key(self) -> Any:
        return self.keys[0]

    @property
    def lost(self) -> threading.Event:
        """A :class:`threading.Event`, set when the hold is lost."""
        ev = self._lost
        if ev is None:
            with _event_lock:
                if self._lost is None:
                    self._lost = threading.Event()
                    if self.lost_reason is not None:
                        self._lost.set()
                ev = self._lost
        return ev

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

    def release(self) -> None:
        self.session._release(self)

    def extend(self, lease_ms: Optional[int] = None) -> int:
        """Set a new lease from now (``LOCK.RENEW ... SESSION``); the server
        keeps renewing it while the session lives.  Returns the lease in ms."""
        return self.session._renew(self, lease_ms)

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.count > 0:
            self.release()

    def __repr__(self) -> str:
        state = "lost" if self.lost_reason is not None else ("held" if self.count else "released")
        return f"<Hold {self.keys!r} owner={self.owner} token={self.token} {state}>"


class _SessionConn:
    """The session connection to one server (one per cluster node)."""

    def __init__(self, session: Session, node: Optional[str], factory: Callable[[], Any]) -> None:
        self.session = session
        self.node = node
        self.factory = factory
        self.conn: Any = None
        self.up = threading.Event()
        self.closing = False
        self.last_alive = time.monotonic()
        self.id: Optional[int] = None
        self.thread: Optional[threading.Thread] = None
        # Elections: send times of the PINGs not answered yet (in order), the
        # send time of the last one answered, and a pipe that wakes the
        # reader thread when the PING interval or a deadline changes.
        self.pings: collections.deque[float] = collections.deque()
        self.last_ok_ping_sent: Optional[float] = None
        self.last_ping_at = time.monotonic()
        self.demoted = False
        self.rehomed_at = 0.0  # (cluster) when the slot map was last re-read for it
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
        self.pings.clear()
        self.last_ok_ping_sent = None
        self.demoted = False
        self.conn = conn
        self.last_alive = self.last_ping_at = time.monotonic()
        self.up.set()

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
                self.session._elections_down(self, "demoted" if self.demoted else "connection")
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
            next_ping = self.last_ping_at + session._ping_interval()
            wait = min(next_ping, session._next_deadline()) - now
            if wait > 0 and self._readable(conn, wait):
                reply = conn.read_response()
                self.last_alive = time.monotonic()
                self._handle(reply)
                continue
            now = time.monotonic()
            session._check_deadlines(now)
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

    def _handle(self, reply: Any) -> None:
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
        self.session._elections_pong(self, sent)

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


class Session:
    """One session: a dedicated connection that keeps every hold taken through
    it alive (``SESSION token``) and hears of losses.

    ``client`` is a ``redis.Redis`` (also one from ``redis.sentinel.Sentinel.
    master_for``) or a ``redis.cluster.RedisCluster``.  ``lease_ms`` is every
    hold's lease: the server renews it at half while the session connection
    lives; a hold outlives a dead session by at most one lease.
    """

    def __init__(self, client: Any, lease_ms: int = 30000, name: Optional[str] = None) -> None:
        self.client = client
        self.lease_ms = int(lease_ms)
        c.check_lease(self.lease_ms)  # the server's floor is checked when the session opens
        #: the server's shortest lease kept alive (``keepalive_min_lease_ms``), read when it opens
        self.min_lease_ms: Optional[int] = None
        self.token = f"{name}-{c.new_token()}" if name else c.new_token()
        self.cluster = _is_cluster(client)
        self._lock = threading.RLock()
        self._owner_ids = itertools.count(1)
        self._by_owner: Dict[Any, List[Hold]] = {}  # owner -> [Hold]
        self._mine: Dict[Tuple[str, Tuple[Any, ...], int], Hold] = {}  # (kind, keys, thread) -> Hold
        self._rw_owner: Dict[Tuple[Any, int], Any] = {}  # (key, thread) -> owner
        self._conns: Dict[Optional[str], _SessionConn] = {}  # node -> _SessionConn
        self._callbacks: List[Callable[[Hold], Any]] = []
        self._pending: List[List[Any]] = []  # release commands to retry
        # owner -> (keys, first failure): re-attach to retry
        self._unattached: Dict[Any, Tuple[Tuple[Any, ...], float]] = {}
        self._epoch = 0
        self._closed = False
        # elections: (key, candidate) -> Leadership, or a _Campaign while its
        # ELECT.CAMPAIGN is on its way; their leases set the PING interval
        self._elections: Dict[Tuple[Any, Any], Any] = {}
        self._election_leases: Dict[int, float] = {}  # id(campaign or leadership) -> lease in s
        if not self.cluster:
            self._session_conn(None)

    # connections
    def _factory(self, pool: Any) -> Callable[[], Any]:
        # (the pool's settings, not the pool: a default session must not keep its pool alive)
        kwargs = dict(pool.connection_kwargs)
        c.resp2(kwargs)  # pub/sub replies as RESP2 arrays on this connection
        kwargs["retry"] = Retry(NoBackoff(), 0)  # the session retries on its own
        connection_class = pool.connection_class

        def make() -> Any:
            return connection_class(**kwargs)

        return make

    def _session_conn(self, node: Optional[str]) -> _SessionConn:
        sc = self._conns.get(node)
        if sc is not None:
            return sc
        with self._lock:
            sc = self._conns.get(node)
            if sc is not None:
                return sc
            if self._closed:
                raise LockError("session is closed")
            if node is None:
                pool = self.client.connection_pool
            else:
                pool = self.client.get_redis_connection(self.client.get_node(node_name=node)).connection_pool
            sc = _SessionConn(self, node, self._factory(pool))
            sc.start()
            self._conns[node] = sc
            return sc

    def _node_of(self, key: Any) -> Optional[str]:
        if not self.cluster:
            return None
        name: str = self.client.get_node_from_key(key).name
        return name

    def _execute(self, *args: Any) -> Any:
        try:
            return self.client.execute_command(*args)
        except Exception as e:
            raise c.map_error(e, str(args[0])) from e

    # public
    def lock(self, name: Any) -> "Lock":
        """An exclusive lock (reentrant per thread)."""
        return Lock(self, name)

    def rwlock(self, name: Any) -> "RWLock":
        """A read-write lock: ``.read_lock()``, ``.write_lock()``."""
        return RWLock(self, name)

    def multilock(self, keys: Tuple[Any, ...]) -> "MultiLock":
        """All of ``keys`` or none (``LOCK.MACQUIRE``); on a cluster the keys
        must share one ``{hash tag}``."""
        return MultiLock(self, keys)

    def semaphore(self, name: Any, permits: Optional[int] = None) -> "Semaphore":
        """A counting semaphore whose permits are bound to this session
        (``SEM.*``); ``permits``: set the total once (``SEM.INIT``) if the
        semaphore does not exist yet."""
        return Semaphore(self, name, permits)

    def election(
        self,
        name: Any,
        value: Any = None,
        lease_ms: int = 5000,
        on_lost: Optional[Callable[..., Any]] = None,
    ) -> "Election":
        """The election of a leader for ``name`` (``ELECT.*``), its
        leaderships kept by this session: see :class:`Election`."""
        from ._election import Election

        return Election(self, name, value=value, lease_ms=lease_ms, on_lost=on_lost)

    def latch(self, name: Any) -> "Latch":
        """A count-down latch (``LATCH.*``) on this session's client (a latch
        needs no session: ``Latch(client, name)`` is the same)."""
        return Latch(self.client, name)

    def on_lost(self, callback: Callable[..., Any]) -> Callable[..., Any]:
        """``callback(hold)`` is called (on the session's thread) when a hold is lost."""
        self._callbacks.append(callback)
        return callback

    def holds(self) -> List[Hold]:
        with self._lock:
            return [h for hs in self._by_owner.values() for h in hs]

    def session_client_id(self, key: Any = None) -> Optional[int]:
        """``CLIENT ID`` of the session connection (of ``key``'s node on a cluster)."""
        return self._session_conn(self._node_of(key) if key else None).id

    def close(self) -> None:
        """Release every hold and close the session connection(s)."""
        with self._lock:
            if self._closed:
                return
            holds = self.holds()
        for e in self._leaderships():
            try:
                e.resign()
            except LockError:
                pass
        for h in holds:
            while h.count > 0:
                try:
                    h.release()
                except LockError:
                    break
        self._retry_pending()
        with self._lock:
            self._closed = True
            conns = list(self._conns.values())
        for sc in conns:
            sc.close()

    def _abandon(self) -> None:
        """Close the session connection(s) without a word to the server (its
        client is gone): the holds left end within one lease."""
        with self._lock:
            self._closed = True
            conns = list(self._conns.values())
        for sc in conns:
            sc.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # acquire / release
    def _acquire(self, kind: str, keys: Tuple[Any, ...], timeout: Optional[float], owner: Any = None) -> Hold:
        if self._closed:
            raise LockError("session is closed")
        block = c.block_ms(timeout)
        tk = _thread_key()
        reg = (kind, keys, tk)
        with self._lock:
            if owner is not None:
                _check_owner(self._by_owner, owner, keys)
            h = self._mine.get(reg)
            if h is not None and h.count > 0 and h.lost_reason is None and owner in (None, h.owner):
                h.count += 1
                return h
            if owner is None:
                owner = self._rw_owner.get((keys[0], tk)) if kind in "rw" else None
                if owner is not None and owner not in self._by_owner:
                    owner = None  # its holds were lost
            fresh = owner is None
            if fresh:
                owner = self._new_owner()
        if self.cluster and kind == "m":
            slots = {self.client.keyslot(k) for k in keys}
            if len(slots) > 1:
                raise c.cluster_slot_keys_error(keys)
        node = self._node_of(keys[0])
        self._session_conn(node)
        epoch = self._epoch
        args = c.acquire_args(_CMD[kind], keys, owner, self.lease_ms, self.token, block)
        try:
            reply = self._blocking(args, kind, keys, owner, block, fresh)
        except c.NoSession:
            self._wait_session(keys[0])
            try:
                reply = self._blocking(args, kind, keys, owner, block, fresh)
            except c.NoSession as e:
                raise UnavailableError(f"session not registered on the server: {e}") from None
        if reply is None:
            raise c.busy(keys, timeout)
        owner = c.owner_of(args)  # (a fresh one if the wait's connection broke)
        tokens = [int(t) for t in reply] if isinstance(reply, list) else [int(reply)]
        h = Hold(self, kind, keys, owner, tokens, self._node_of(keys[0]))
        h._reg = reg
        with self._lock:
            self._mine[reg] = h
            self._by_owner.setdefault(owner, []).append(h)
            if kind in "rw":
                self._rw_owner[(keys[0], tk)] = owner
        if self._epoch != epoch:
            # the session reconnected while we waited: the grant may be bound to nothing
            self._reattach_owner(owner, keys)
        return h

    def _sem_acquire(self, key: Any, permits: int, timeout: Optional[float]) -> "Permit":
        if self._closed:
            raise LockError("session is closed")
        block = c.block_ms(timeout)
        owner = self._new_owner()  # fresh: never re-entered
        node = self._node_of(key)
        self._session_conn(node)
        epoch = self._epoch
        args = c.sem_acquire_args(key, owner, permits, self.lease_ms, self.token, block)
        try:
            reply = self._blocking(args, "s", (key,), owner, block, True)
        except c.NoSession:
            self._wait_session(key)
            try:
                reply = self._blocking(args, "s", (key,), owner, block, True)
            except c.NoSession as e:
                raise UnavailableError(f"session not registered on the server: {e}") from None
        if reply is None:
            raise c.sem_busy(key, permits, timeout)
        owner = c.owner_of(args)
        p = Permit(self, key, owner, int(reply), node)
        with self._lock:
            self._by_owner.setdefault(owner, []).append(p)
        if self._epoch != epoch:
            self._reattach_owner(owner, (key,))
        return p

    def _sem_release_some(self, p: Permit, n: int) -> None:
        """``SEM.RELEASE key owner PERMITS n``: gives back ``n`` of the permits
        (fewer than held), the permit stays held."""
        try:
            left = self.client.execute_command("SEM.RELEASE", p.key, p.owner, "PERMITS", n)
        except Exception as e:
            err = c.map_error(e, "release")
            if isinstance(err, NotOwnerError):
                self._mark_lost(p, "gone")
            raise err from e
        p.permits = int(left)

    def _track(self, kind: str, keys: Tuple[Any, ...], owner: Any, tokens: List[int]) -> Hold:
        """Adopt a hold taken outside ``acquire`` (the drop-in's) for re-attach
        and loss signals."""
        h = Hold(self, kind, tuple(keys), owner, tokens, self._node_of(keys[0]))
        with self._lock:
            self._by_owner.setdefault(owner, []).append(h)
        return h

    def _wait_session(self, key: Any) -> None:
        node = self._node_of(key)
        sc = self._session_conn(node)
        if not sc.up.wait(max(1.0, self.lease_ms / 1000)):
            raise UnavailableError("the session connection is down")
        if not self.cluster:
            # the server forgot the name (a restart): open the session anew
            return

    def _new_owner(self) -> str:
        with self._lock:
            return f"{self.token}:{next(self._owner_ids)}"

    def _blocking(
        self, args: List[Any], kind: str, keys: Tuple[Any, ...], owner: Any, block: Optional[int], fresh: bool
    ) -> Any:
        """The wait of an acquire; ``fresh``: the owner was made for it, and is
        made anew if the wait's connection breaks (an owner that holds other
        locks keeps waiting as itself)."""
        return blocking_call(
            self.client, self.cluster, args, block, release_args(kind, keys, owner), self._pending_add,
            self._new_owner if fresh else None,
        )

    def _pending_add(self, args: List[Any]) -> None:
        with self._lock:
            self._pending.append(args)

    def _retry_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for args in pending:
            try:
                self.client.execute_command(*args)
            except rex.ResponseError:
                pass
            except Exception:
                with self._lock:
                    self._pending.append(args)

    def _forget(self, h: Hold) -> None:
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

    def _release(self, h: Hold) -> None:
        with self._lock:
            if h.count <= 0:
                raise LockError(f"lock {h.key!r}: release of a hold already released")
            h.count -= 1
            if h.count > 0:
                return
            self._forget(h)
        args = release_args(h.kind, h.keys, h.owner)
        try:
            self.client.execute_command(*args)
        except rex.ResponseError as e:
            if h.lost_reason is not None:
                return
            err = c.map_error(e, "release")
            if isinstance(err, NotOwnerError):
                self._mark_lost(h, "gone")
            raise err from e
        except Exception as e:
            with self._lock:
                self._pending.append(args)
            if h.lost_reason is not None:
                return
            raise UnavailableError(
                f"release of {h.key!r}: {e} (retried in the background; the hold ends "
                "with its lease at the latest once the session closes)"
            ) from e

    def _renew(self, h: Hold, lease_ms: Optional[int]) -> int:
        h.check()
        if h.count <= 0:
            raise LockError("hold already released")
        lease = int(lease_ms or self.lease_ms)
        cmd = "SEM.RENEW" if h.kind == "s" else "LOCK.RENEW"
        try:
            for k in h.keys:
                self._renew_key(k, h.owner, lease, cmd)
        except NotOwnerError:  # also EXPIRED (ExpiredError)
            self._mark_lost(h, "gone")
            raise
        return lease

    def _renew_key(self, key: Any, owner: Any, lease: int, cmd: str = "LOCK.RENEW") -> Any:
        args = [cmd, key, owner, "PX", lease, "SESSION", self.token]
        try:
            return self._execute(*args)
        except c.NoSession:
            self._wait_session(key)
            return self._execute(*args)

    # loss and re-attach
    def _mark_lost(self, h: Hold, reason: str) -> None:
        with self._lock:
            if h.lost_reason is not None:
                return
            h.lost_reason = reason
            h.lost.set()  # (made here if nobody asked for it yet)
            self._forget_lost(h)
        callbacks = list(self._callbacks)
        lost_callback = h._lost_callback
        if lost_callback is not None:
            callbacks.append(lambda h: lost_callback(reason))
        for cb in callbacks:
            try:
                cb(h)
            except Exception:  # noqa: BLE001
                log.exception("on_lost callback failed")

    def _forget_lost(self, h: Hold) -> None:
        # a lost hold stays the thread's until released (so the thread sees it
        # lost), but is no longer re-attached
        hs = self._by_owner.get(h.owner)
        if hs and h in hs:
            hs.remove(h)
            if not hs:
                del self._by_owner[h.owner]

    def _loss_message(self, owner: Any, key: Any, reason: str) -> None:
        with self._lock:
            hs = [h for h in self._by_owner.get(owner, ()) if key in h.keys]
            e = self._elections.get((key, owner))
        for h in hs:
            self._mark_lost(h, reason)
        if e is not None:
            e._mark_lost(reason)

    # elections: the PING interval, the leaderships' deadlines, their losses
    def _ping_interval(self) -> float:
        leases = self._election_leases
        if not leases:
            return c.PING_INTERVAL
        try:
            return float(min(c.PING_INTERVAL, min(leases.values()) / 4))
        except ValueError:  # emptied meanwhile
            return c.PING_INTERVAL

    def _elections_add(self, e: Any, lease_s: float) -> None:
        with self._lock:
            self._election_leases[id(e)] = lease_s
            self._elections[(e.key, e.candidate)] = e
            sc = self._conns.get(e.node)
        if sc is not None:
            sc.wake()

    def _elections_remove(self, e: Any) -> None:
        with self._lock:
            self._election_leases.pop(id(e), None)
            key = (e.key, e.candidate)
            if self._elections.get(key) is e:
                del self._elections[key]

    def _leaderships(self, node: Optional[str] = None) -> List[Any]:
        with self._lock:
            return [e for e in self._elections.values() if e.leads and (node is None or e.node == node)]

    def _next_deadline(self) -> float:
        if not self._elections:
            return float("inf")
        return min((e.deadline for e in self._leaderships()), default=float("inf"))

    def _check_deadlines(self, now: float) -> None:
        if not self._elections:
            return
        for e in self._leaderships():
            if now >= e.deadline:
                e._mark_lost("deadline")

    def _elections_pong(self, sc: _SessionConn, sent: float) -> None:
        if not self._elections:
            return
        for e in self._leaderships(sc.node):
            e._extend_belief(sent)

    def _elections_down(self, sc: _SessionConn, reason: str) -> None:
        if not self._elections:
            return
        with self._lock:
            es = [e for e in self._elections.values() if e.node == sc.node]
        for e in es:
            e._mark_lost(reason)

    def _resign_soon(self, key: Any, candidate: Any, lease_s: float) -> None:
        """``ELECT.RESIGN`` for a leadership lost, on a thread of its own (the
        server may not answer now): tried again while the server is
        unreachable or answers as a replica would (``READONLY``, a failover
        under way), for as long as the leadership could last (two leases)."""
        args = ["ELECT.RESIGN", key, candidate]

        def run() -> None:
            until = time.monotonic() + 2 * lease_s
            delay = 0.05
            while not self._closed:
                try:
                    self.client.execute_command(*args)
                    return
                except rex.ResponseError as e:
                    if not c.is_transient(e):
                        return
                except Exception:  # noqa: BLE001 - unreachable
                    pass
                if time.monotonic() + delay > until:
                    return
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

        threading.Thread(target=run, name="lock-resign", daemon=True).start()

    def _lost_if_down_too_long(self, sc: _SessionConn) -> None:
        if time.monotonic() - sc.last_alive <= self.lease_ms / 1000:
            return
        with self._lock:
            hs = [h for h in self.holds() if h.node == sc.node]
        for h in hs:
            self._mark_lost(h, "session-down")

    def _rehome(self, sc: _SessionConn) -> bool:
        """Cluster, session connection to ``sc.node`` down: a failover may have
        given its slots to another node. Re-reads the slot map (at most once a
        second), opens the session where each hold's key is now served and
        re-attaches it there. True once ``sc`` has no hold left and has been
        down for longer than a lease (it is then dropped)."""
        now = time.monotonic()
        if now - getattr(sc, "rehomed_at", 0) >= 1.0:
            sc.rehomed_at = now
            try:
                self.client.nodes_manager.initialize()
            except Exception as e:  # noqa: BLE001
                log.debug("cluster slot map refresh failed: %s", e)
            with self._lock:
                hs = [h for h in self.holds() if h.node == sc.node]
            moved: Dict[Tuple[Any, Optional[str]], List[Hold]] = {}
            for h in hs:
                try:
                    node = self._node_of(h.key)
                except Exception:  # noqa: BLE001 - slot not covered yet
                    continue
                if node != sc.node:
                    moved.setdefault((h.owner, node), []).append(h)
            for (owner, node), hs in moved.items():
                try:
                    self._session_conn(node)
                except Exception as e:  # noqa: BLE001
                    log.debug("session on %s: %s", node, e)
                    continue
                for h in hs:
                    h.node = node
                self._reattach_owner(owner, tuple(sorted({k for h in hs for k in h.keys})))
        with self._lock:
            idle = not any(h.node == sc.node for h in self.holds())
            if idle and now - sc.last_alive > self.lease_ms / 1000:
                node = sc.node
                if self._conns.get(node) is sc:
                    del self._conns[node]
                sc.closing = True
                return True
        return False

    def _reattach(self, sc: _SessionConn) -> None:
        with self._lock:
            owners: Dict[Any, set[Any]] = {}
            for h in self.holds():
                if h.node == sc.node:
                    owners.setdefault(h.owner, set()).update(h.keys)
        for owner, keys in owners.items():
            self._reattach_owner(owner, tuple(sorted(keys)))

    def _renew_cmd(self, owner: Any) -> str:
        with self._lock:
            hs = self._by_owner.get(owner)
            return "SEM.RENEW" if hs and hs[0].kind == "s" else "LOCK.RENEW"

    def _reattach_owner(self, owner: Any, keys: Tuple[Any, ...]) -> None:
        cmd = self._renew_cmd(owner)
        for key in keys:
            with self._lock:
                if not any(key in h.keys for h in self._by_owner.get(owner, ())):
                    continue  # lost meanwhile (an owner's holds of other keys live on)
            try:
                self._renew_key(key, owner, self.lease_ms, cmd)
            except NotOwnerError:  # also a semaphore's EXPIRED
                with self._lock:
                    hs = [h for h in self._by_owner.get(owner, ()) if key in h.keys]
                for h in hs:
                    self._mark_lost(h, "notowner")
                continue
            except Exception as e:  # noqa: BLE001 - tried again at every PING
                log.info("re-attach of %r failed: %s", key, e)
                with self._lock:
                    self._unattached.setdefault(owner, (keys, time.monotonic()))
                return
        with self._lock:
            self._unattached.pop(owner, None)

    def _retry_unattached(self) -> None:
        with self._lock:
            todo = list(self._unattached.items())
        for owner, (keys, since) in todo:
            if owner not in self._by_owner:
                with self._lock:
                    self._unattached.pop(owner, None)
                continue
            if time.monotonic() - since > self.lease_ms / 1000:
                with self._lock:
                    self._unattached.pop(owner, None)
                    hs = list(self._by_owner.get(owner, ()))
                for h in hs:
                    self._mark_lost(h, "session-down")
                continue
            self._reattach_owner(owner, keys)


class _Acquirable:
    kind = "x"

    def __init__(self, session: Session, keys: Tuple[Any, ...]) -> None:
        self.session = session
        self.keys = keys
        self._stacks = threading.local()  # each thread's holds taken by ``with``

    def acquire(self, timeout: Optional[float] = None, owner: Any = None) -> Hold:
        """Take the lock: ``timeout=None`` waits forever, ``0`` tries once,
        ``seconds`` waits that long (then :class:`BusyError`).

        ``owner``: wait and hold as the owner of another of this session's
        holds (``hold.owner``) instead of a fresh one, so that the server
        sees one owner holding one lock while it waits for this one: a wait
        that would close a cycle of waits is then refused at once with
        :class:`DeadlockError`, and the owner keeps what it holds."""
        return self.session._acquire(self.kind, self.keys, timeout, owner)

    def __enter__(self) -> Hold:
        h = self.acquire()
        self._stacks.__dict__.setdefault("holds", []).append(h)
        return h

    def __exit__(self, *exc: Any) -> None:
        self._stacks.holds.pop().release()


class Lock(_Acquirable):
    """An exclusive lock, reentrant per thread."""

    def __init__(self, session: Any, name: Any) -> None:
        super().__init__(session, (name,))
        self.name = name


class _RWSide(_Acquirable):
    def __init__(self, session: Any, name: Any, kind: str) -> None:
        super().__init__(session, (name,))
        self.kind = kind
        self.name = name


class RWLock:
    """A read-write lock: ``read_lock()`` shared, ``write_lock()`` exclusive."""

    def __init__(self, session: Any, name: Any) -> None:
        self.session = session
        self.name = name

    def read_lock(self) -> "_RWSide":
        return _RWSide(self.session, self.name, "r")

    def write_lock(self) -> "_RWSide":
        return _RWSide(self.session, self.name, "w")


class MultiLock(_Acquirable):
    """All of several exclusive locks at once, or none."""

    kind = "m"

    def __init__(self, session: Any, keys: Tuple[Any, ...]) -> None:
        keys = tuple(keys)
        if not keys:
            raise ValueError("a multi-lock needs at least one key")
        super().__init__(session, keys)


class Permit(Hold):
    """Permits of a semaphore held by one owner: what
    :meth:`Semaphore.acquire` returns.

    ``permits`` is how many it holds, ``owner`` its owner id (fresh for every
    acquisition), ``lost`` a :class:`threading.Event` set when the permits are
    lost (``lost_reason`` as a :class:`Hold`'s: ``forced``, ``gone``,
    ``maxhold``, ``moved``, ``notowner``, ``session-down``).  The permits are
    bound to the session, kept alive while it lives and re-attached
    (``SEM.RENEW ... SESSION``) when its connection is re-made.  A context
    manager: leaving it releases every permit.  Not re-entrant: each
    :meth:`Semaphore.acquire` takes permits of its own.
    """

    def __init__(self, session: Session, key: Any, owner: Any, permits: int, node: Optional[str]) -> None:
        super().__init__(session, "s", (key,), owner, [], node)
        self.permits = permits

    @property
    def token(self) -> None:
        return None  # no fencing token for permits

    def check(self) -> None:
        """Raise :class:`LostError` if the permits were lost."""
        if self.lost_reason is not None:
            raise LostError(f"permits of semaphore {self.key!r} were lost: {self.lost_reason}")

    def release(self, permits: Optional[int] = None) -> None:
        """Give back ``permits`` of the permits (default: all).  A lost
        permit releases quietly; ``NOTOWNER``/``EXPIRED`` from the server
        raise :class:`NotOwnerError` / :class:`ExpiredError` and mark it lost."""
        if permits is not None:
            c.check_permits(permits)
            if self.count > 0 and self.lost_reason is None:
                if permits > self.permits:
                    raise ValueError(f"release of {permits} permits: {self.permits} held")
                if permits < self.permits:
                    self.session._sem_release_some(self, permits)
                    return
        self.session._release(self)

    def extend(self, lease_ms: Optional[int] = None) -> int:
        """A new lease from now (``SEM.RENEW ... SESSION``), still kept alive
        by the session.  Returns the lease in ms."""
        return self.session._renew(self, lease_ms)

    def __repr__(self) -> str:
        state = "lost" if self.lost_reason is not None else ("held" if self.count else "released")
        return f"<Permit {self.key!r} owner={self.owner} permits={self.permits} {state}>"


class Semaphore:
    """A counting semaphore (``SEM.*``), fair (FIFO), with permits bound to
    a session: they are kept alive while the session lives and come back
    within one lease when the process dies.

    ``Semaphore(session, name, permits=None)`` (or ``session.semaphore(name,
    permits)``).  Given a redis client instead of a session, the client's
    :func:`~redis_lock_client.default_session` is used.  ``permits``: the
    total, set once (``SEM.INIT``, before this object's first command) if
    the semaphore does not exist yet; without it, acquires wait until
    someone sets it.  The lease is the session's ``lease_ms``.
    """

    def __init__(self, session: Any, name: Any, permits: Optional[int] = None) -> None:
        self._session = session if isinstance(session, Session) else None
        self._client = None if self._session is not None else session
        self.name = name
        self.initial_permits = permits
        if permits is not None and (isinstance(permits, bool) or not isinstance(permits, int) or permits < 0):
            raise ValueError("permits must be None or an int >= 0")
        self._init_done = permits is None
        self._stacks = threading.local()  # each thread's permits taken by ``with``

    @property
    def session(self) -> Session:
        """The session the permits are bound to (a client's default session
        is made, or made anew after it was closed, when first needed)."""
        if self._session is None or (self._session._closed and self._client is not None):
            from .dropin import default_session

            self._session = default_session(self._client)
        return self._session

    def _execute(self, *args: Any) -> Any:
        return self.session._execute(*args)

    def _ensure_init(self) -> None:
        if not self._init_done:
            self._execute("SEM.INIT", self.name, self.initial_permits)
            self._init_done = True

    def init(self, permits: Optional[int]) -> bool:
        """``SEM.INIT``: set the total to ``permits`` if the semaphore does not
        exist (after this object's own ``permits``, if given).  True if set,
        False if it existed (nothing changed)."""
        self._ensure_init()
        return bool(self._execute("SEM.INIT", self.name, permits))

    def acquire(self, permits: int = 1, blocking: bool = True, timeout: Optional[float] = None) -> Permit:
        """Take ``permits`` permits -> :class:`Permit`.  ``timeout=None`` waits
        forever, ``0`` (or ``blocking=False``) tries once, ``seconds`` waits that
        long; then :class:`BusyError`.  Waiters are served first come first
        served: one asking for 3 is never overtaken by later ones asking for 1,
        and a try does not overtake anyone queued."""
        c.check_permits(permits)
        if not blocking:
            if timeout not in (None, 0):
                raise ValueError("can't specify a timeout for a non-blocking acquire")
            timeout = 0
        self._ensure_init()
        return self.session._sem_acquire(self.name, permits, timeout)

    def info(self) -> Optional[Dict[str, Any]]:
        """``SEM.INFO`` as a dict (``permits``, ``available``, ``holders``: a
        list of dicts with ``owner``, ``permits``, ``ttl``, ``keepalive_client``,
        ``waiters``), or None if the semaphore does not exist."""
        self._ensure_init()
        return c.sem_info(self._execute("SEM.INFO", self.name))

    def available(self) -> int:
        """Permits available now (0 for a missing semaphore)."""
        info = self.info()
        return 0 if info is None else int(info["available"])

    def add(self, delta: int) -> int:
        """``SEM.ADD``: add (or with a negative ``delta`` take away) permits
        from the total.  Returns the permits available now."""
        self._ensure_init()
        return int(self._execute("SEM.ADD", self.name, delta))

    def __enter__(self) -> Permit:
        p = self.acquire()
        self._stacks.__dict__.setdefault("permits", []).append(p)
        return p

    def __exit__(self, *exc: Any) -> None:
        self._stacks.permits.pop().release()


class Latch:
    """A count-down latch (``LATCH.*``, Redisson's ``RCountDownLatch``): it
    opens when its count reaches zero.  ``Latch(client, name)`` (a session
    works too: its client is used).  Waiting is ``LATCH.AWAIT ... BLOCK`` on
    a pooled connection, as lock waits."""

    def __init__(self, client: Any, name: Any) -> None:
        if isinstance(client, Session):
            client = client.client
        self.client = client
        self.name = name
        self.cluster = _is_cluster(client)

    def _execute(self, *args: Any) -> Any:
        try:
            return self.client.execute_command(*args)
        except Exception as e:
            raise c.map_error(e, str(args[0])) from e

    def init(self, count: int, ttl: Optional[float] = None) -> bool:
        """Set the count if the latch does not exist (``LATCH.INIT``); ``ttl``
        in seconds (None: no expiry).  True if set, False if it existed."""
        return bool(self._execute("LATCH.INIT", self.name, count, *c.latch_ttl_args(ttl)))

    def count_down(self, n: int = 1) -> int:
        """Count down by ``n``; returns the count left (0: open)."""
        return int(self._execute("LATCH.COUNTDOWN", self.name, n))

    def count(self) -> int:
        """The count now (0: open, also for a missing latch)."""
        info = self.info()
        return 0 if info is None else int(info["count"])

    def info(self) -> Optional[Dict[str, Any]]:
        """``LATCH.INFO`` as a dict (``count``, ``ttl``, ``waiters``) or None."""
        return c.as_map(self._execute("LATCH.INFO", self.name))

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until the latch opens: True when open, False when ``timeout``
        (seconds; ``0``: just look) ran out.  :class:`LatchGone` if the latch
        ended without reaching zero (deleted, expired)."""
        block = c.block_ms(timeout)
        args = ["LATCH.AWAIT", self.name]
        if block is not None:
            args += ["BLOCK", block]
        return blocking_call(self.client, self.cluster, args, block, None, None) is not None
