"""The asyncio flavour, on ``redis.asyncio``: the same API with ``await``.

    async with Session(r) as session:
        async with await session.lock("invoice:7").acquire(timeout=5) as hold:
            print(hold.token)

``hold.lost`` is an :class:`asyncio.Event`; re-entry is per task; a
cancelled ``acquire`` (``task.cancel()``, ``asyncio.timeout``) closes its
waiting connection and releases a grant that raced the cancel.
``Semaphore``/``Permit``/``Latch`` are the sync ones' twins.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Optional, Tuple

import redis.exceptions as rex
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .. import _common as c
from .._sync import _check_owner, _is_cluster, release_args
from ..errors import LockError, LostError, NotOwnerError, UnavailableError
from .dropin import ModuleLock, close_default_session, default_session

__all__ = [
    "Session",
    "Hold",
    "Semaphore",
    "Permit",
    "Latch",
    "Election",
    "Leadership",
    "Leader",
    "Observer",
    "ModuleLock",
    "default_session",
    "close_default_session",
]

log = logging.getLogger("redis_lock_client")
_CMD = {"x": "LOCK.ACQUIRE", "r": "LOCK.RACQUIRE", "w": "LOCK.WACQUIRE", "m": "LOCK.MACQUIRE"}
_FOREVER = 10.0**9  # seconds: a read with no client-side limit (redis-py >= 5)


async def _get_conn(pool: Any) -> Any:
    try:
        return await pool.get_connection()
    except TypeError:
        return await pool.get_connection("LOCK.ACQUIRE")


def _pool_of(client: Any, cluster: bool, key: Any) -> Any:
    if not cluster:
        return client.connection_pool
    return None


def _cancel_requests() -> int:
    """The cancel requests pending on the current task (``Task.cancelling()``,
    Python >= 3.11; 0 before).

    redis-py writes a command through ``asyncio.wait_for`` when the connection
    has a ``socket_timeout`` (redis-py 8's default is 5 s), and so does its
    connect (HELLO).  Before Python 3.12 ``wait_for`` *returns* instead of
    raising when the cancel lands after the write finished but before the
    waiting task resumed (CPython gh-86296): the cancel is lost, and a
    blocking command then waits for its reply as if never cancelled.  Such a
    cancel still counts here (nothing uncancelled it), so a count grown since
    an operation began is a cancel to honour: see :func:`_honour_lost_cancel`.
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


def _honour_lost_cancel(before: int) -> None:
    """Raise the CancelledError a cancel request made since ``before`` (a
    :func:`_cancel_requests` count) should have raised."""
    if _cancel_requests() > before:
        raise asyncio.CancelledError()


async def blocking_call(
    client: Any,
    cluster: bool,
    args: List[Any],
    block: Optional[int],
    cleanup_args: Optional[List[Any]],
    on_cleanup_failed: Optional[Callable[[List[Any]], None]],
    cancels: Optional[int] = None,
    new_owner: Optional[Callable[[], Any]] = None,
) -> Any:
    """The asyncio twin of ``redis_lock_client._sync.blocking_call`` (a wait
    whose connection breaks is cleaned up and sent again, as a fresh owner
    ``new_owner()`` when given).  ``cancels``: the :func:`_cancel_requests`
    count when the caller's operation began (default: now); one made since,
    and lost, ends the call with CancelledError before its wait (see
    :func:`_cancel_requests`)."""
    if cancels is None:
        cancels = _cancel_requests()
    wait = c.Wait(args, block, cleanup_args, on_cleanup_failed, new_owner)
    while True:
        try:
            return await _blocking_once(client, cluster, wait, cancels)
        except c.WaitBroken:
            if not wait.again():
                return None


async def _blocking_once(client: Any, cluster: bool, wait: c.Wait, cancels: int) -> Any:
    args, block = wait.args, wait.block
    if cluster:
        node = client.get_node_from_key(wait.key)
        conn = node.acquire_connection()
        if hasattr(node, "release"):
            release = lambda: node.release(conn)  # noqa: E731
        else:  # redis-py 5.0: the node's queue of free connections
            release = lambda: node._free.append(conn)  # noqa: E731
    else:
        pool = client.connection_pool
        try:
            conn = await _get_conn(pool)
        except Exception as e:
            raise c.map_error(e, args[0]) from e
        release = lambda: pool.release(conn)  # noqa: E731
    sent = False
    limit = None
    try:
        if cluster:
            await conn.connect()
        _honour_lost_cancel(cancels)  # (lost in the pool's connect or before)
        sent = True  # (from the first byte: a write that fails half-way may have reached the server)
        await conn.send_command(*args)
        _honour_lost_cancel(cancels)  # (lost in the write): cancelled and cleaned up below
        if block is None or (block == 0 and getattr(conn, "socket_timeout", False) is None):
            # a try, or a wait with no limit on a connection with none: a plain read (no
            # timer set and cancelled per acquisition)
            reply = await conn.read_response()
        else:
            limit = _FOREVER if block == 0 else block / 1000 + c.BLOCK_SLACK
            t0 = time.monotonic()
            reply = await conn.read_response(timeout=limit)
            if reply is None and time.monotonic() - t0 >= limit - 0.01:
                raise rex.TimeoutError("no answer within the BLOCK time")
    except rex.ResponseError as e:
        await _release_conn(release)
        raise c.map_error(e, args[0]) from e
    except BaseException as e:
        await conn.disconnect(nowait=True)
        await _release_conn(release)
        if wait.cleanup_args is not None:
            reachable = sent and await _clean_up(client, wait)
        else:  # (nothing to clean up: a PING says whether a broken wait can be sent again)
            reachable = c.is_broken_connection(e) and await _reachable(client, cluster, wait.key)
        raise wait.failure(e, reachable)
    await _release_conn(release)  # (a coroutine in recent redis-py)
    return reply


async def _clean_up(client: Any, wait: c.Wait) -> bool:
    """The asyncio twin of ``redis_lock_client._sync._clean_up``: LOCK.CANCEL,
    then the release of a crossed grant; whether the server could be reached."""
    assert wait.cleanup_args is not None
    try:
        await client.execute_command(*c.cancel_args(wait.args))
    except BaseException:  # noqa: BLE001 - refused: nothing to cancel; unreachable: the release says so
        pass
    try:
        await client.execute_command(*wait.cleanup_args)
    except rex.ResponseError:
        return True  # NOTOWNER: it was never granted
    except BaseException:
        if wait.on_cleanup_failed is not None:
            wait.on_cleanup_failed(wait.cleanup_args)
        return False
    return True


async def _reachable(client: Any, cluster: bool, key: Any) -> bool:
    """Whether the server of ``key`` answers (a PING on another connection)."""
    try:
        if cluster:
            await client.execute_command("PING", target_nodes=client.get_node_from_key(key))
        else:
            await client.ping()
        return True
    except rex.ResponseError:
        return True
    except Exception:  # noqa: BLE001 - unreachable
        return False


async def _release_conn(release: Callable[[], Any]) -> None:
    r = release()
    if r is not None and inspect.isawaitable(r):
        await r


class Hold:
    """One owner's hold (see the sync ``Hold``); ``lost`` is an asyncio.Event."""

    def __init__(
        self,
        session: Any,
        kind: str,
        keys: Tuple[Any, ...],
        owner: Any,
        tokens: List[int],
        node: Optional[str],
    ) -> None:
        self.session = session
        self.kind = kind
        self.keys = keys
        self.owner = owner
        self.tokens = tokens
        self.node = node
        self.count = 1
        self._lost: Optional[asyncio.Event] = None  # made when first asked for (most holds never are)
        self.lost_reason: Optional[str] = None
        self._reg: Optional[Tuple[str, Tuple[Any, ...], int]] = None
        self._task: Optional[asyncio.Task[Any]] = None
        self._lost_callback: Optional[Callable[[str], Any]] = None  # the drop-in's on_lost(reason)

    @property
    def lost(self) -> asyncio.Event:
        """An :class:`asyncio.Event`, set when the hold is lost."""
        if self._lost is None:
            self._lost = asyncio.Event()
            if self.lost_reason is not None:
                self._lost.set()
        return self._lost

    key = property(lambda self: self.keys[0])
    token = property(lambda self: self.tokens[0] if len(self.tokens) == 1 else self.tokens)

    def check(self) -> None:
        if self.lost_reason is not None:
            raise LostError(f"lock {self.key!r} was lost: {self.lost_reason}")

    async def release(self) -> None:
        await self.session._release(self)

    async def extend(self, lease_ms: Optional[int] = None) -> int:
        lease: int = await self.session._renew(self, lease_ms)
        return lease

    async def __aenter__(self) -> "Hold":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.count > 0:
            await self.release()


class _SessionConn:
    def __init__(self, session: Session, node: Optional[str], factory: Callable[[], Any]) -> None:
        self.session = session
        self.node = node
        self.factory = factory
        self.conn: Any = None
        self.up = asyncio.Event()
        self.closing = False
        self.last_alive = time.monotonic()
        self.id: Optional[int] = None
        self.task: Optional[asyncio.Task[None]] = None
        # elections: send times of the PINGs not answered yet, of the last one answered
        self.pings: collections.deque[float] = collections.deque()
        self.last_ok_ping_sent: Optional[float] = None
        self.rehomed_at = 0.0  # (cluster) when the slot map was last re-read for it
        self.last_ping_at = time.monotonic()
        self.demoted = False

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
        self.pings.clear()
        self.last_ok_ping_sent = None
        self.demoted = False
        self.conn = conn
        self.last_alive = self.last_ping_at = time.monotonic()
        self.up.set()

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
                self.session._elections_down(self, "demoted" if self.demoted else "connection")
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
            next_ping = self.last_ping_at + session._ping_interval()
            wait = min(next_ping, session._next_deadline()) - time.monotonic()
            if wait > 0:
                reply = await conn.read_response(timeout=wait)
                if reply is not None:
                    self.last_alive = time.monotonic()
                    self._handle(reply)
                continue
            now = time.monotonic()
            session._check_deadlines(now)
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


class Session:
    """The asyncio Session: ``async with Session(r) as s`` or ``s = await Session(r).start()``."""

    def __init__(self, client: Any, lease_ms: int = 30000, name: Optional[str] = None) -> None:
        self.client = client
        self.lease_ms = int(lease_ms)
        c.check_lease(self.lease_ms)  # the server's floor is checked when the session opens
        #: the server's shortest lease kept alive (``keepalive_min_lease_ms``), read when it opens
        self.min_lease_ms: Optional[int] = None
        self.token = f"{name}-{c.new_token()}" if name else c.new_token()
        self.cluster = _is_cluster(client)
        self._owner_ids = itertools.count(1)
        self._by_owner: Dict[Any, List[Hold]] = {}
        self._mine: Dict[Tuple[str, Tuple[Any, ...], int], Hold] = {}  # (kind, keys, id(task)) -> Hold
        self._rw_owner: Dict[Tuple[Any, int], Tuple[Any, asyncio.Task[Any]]] = {}  # (key, id(task)) -> owner, task
        self._conns: Dict[Optional[str], _SessionConn] = {}
        self._opening: Dict[Optional[str], asyncio.Future[_SessionConn]] = {}
        self._callbacks: List[Callable[[Hold], Any]] = []
        self._pending: List[List[Any]] = []
        self._unattached: Dict[Any, Tuple[Tuple[Any, ...], float]] = {}
        self._epoch = 0
        self._closed = False
        self._bg: set[asyncio.Task[None]] = set()  # background resigns, kept until done
        # elections: (key, candidate) -> Leadership, or a campaign on its way
        self._elections: Dict[Tuple[Any, Any], Any] = {}
        self._election_leases: Dict[int, float] = {}  # id(entry) -> lease in s

    async def start(self) -> "Session":
        try:
            if self.cluster:
                await self.client.initialize()  # the slot map, for get_node_from_key
            else:
                await self._session_conn(None)
        except Exception as e:
            raise c.map_error(e, "session") from e
        return self

    async def __aenter__(self) -> "Session":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _factory(self, pool_or_node: Any) -> Callable[[], Any]:
        # (the pool's settings, not the pool: a default session must not keep its pool alive)
        kwargs = dict(pool_or_node.connection_kwargs)
        c.resp2(kwargs)
        kwargs["retry"] = Retry(NoBackoff(), 0)  # the session retries on its own
        connection_class = pool_or_node.connection_class

        def make() -> Any:
            return connection_class(**kwargs)

        return make

    async def _session_conn(self, node: Optional[str]) -> _SessionConn:
        sc = self._conns.get(node)
        if sc is not None:
            return sc
        if self._closed:
            raise LockError("session is closed")
        fut = self._opening.get(node)
        if fut is not None:
            return await asyncio.shield(fut)
        fut = self._opening[node] = asyncio.get_running_loop().create_future()
        try:
            src = self.client.connection_pool if node is None else self.client.get_node(node_name=node)
            sc = _SessionConn(self, node, self._factory(src))
            await sc.start()
            self._conns[node] = sc
            fut.set_result(sc)
            return sc
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # consumed
            raise
        finally:
            del self._opening[node]

    def _node_of(self, key: Any) -> Optional[str]:
        return self.client.get_node_from_key(key).name if self.cluster else None

    async def _execute(self, *args: Any) -> Any:
        try:
            return await self.client.execute_command(*args)
        except Exception as e:
            raise c.map_error(e, str(args[0])) from e

    def lock(self, name: Any) -> "_Acquirable":
        return _Acquirable(self, "x", (name,))

    def rwlock(self, name: Any) -> "RWLock":
        return RWLock(self, name)

    def multilock(self, keys: Tuple[Any, ...]) -> "_Acquirable":
        keys = tuple(keys)
        if not keys:
            raise ValueError("a multi-lock needs at least one key")
        return _Acquirable(self, "m", keys)

    def semaphore(self, name: Any, permits: Optional[int] = None) -> "Semaphore":
        """A semaphore whose permits are bound to this session (see :class:`Semaphore`)."""
        return Semaphore(self, name, permits)

    def election(
        self,
        name: Any,
        value: Any = None,
        lease_ms: int = 5000,
        on_lost: Optional[Callable[..., Any]] = None,
    ) -> "Election":
        """The election of a leader for ``name`` (see :class:`Election`)."""
        return Election(self, name, value=value, lease_ms=lease_ms, on_lost=on_lost)

    def latch(self, name: Any) -> "Latch":
        """A count-down latch on this session's client (see :class:`Latch`)."""
        return Latch(self.client, name)

    def on_lost(self, callback: Callable[..., Any]) -> Callable[..., Any]:
        """``callback(hold)``, a function or a coroutine function."""
        self._callbacks.append(callback)
        return callback

    def holds(self) -> List[Hold]:
        return [h for hs in self._by_owner.values() for h in hs]

    async def session_client_id(self, key: Any = None) -> Optional[int]:
        return (await self._session_conn(self._node_of(key) if key else None)).id

    async def close(self) -> None:
        if self._closed:
            return
        for e in self._leaderships():
            try:
                await e.resign()
            except LockError:
                pass
        for h in self.holds():
            while h.count > 0:
                try:
                    await h.release()
                except LockError:
                    break
        await self._retry_pending()
        self._closed = True
        for sc in list(self._conns.values()):
            await sc.close()

    def _abandon(self) -> None:
        """Stop the session connection(s) without a word to the server (its
        client is gone, no await possible): the holds left end within one lease."""
        self._closed = True
        for sc in list(self._conns.values()):
            sc.closing = True
            task = sc.task
            if task is not None and not task.done() and not task.get_loop().is_closed():
                task.cancel()
            writer = getattr(sc.conn, "_writer", None)
            if writer is not None:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001 - its loop is gone already
                    pass

    async def _acquire(
        self, kind: str, keys: Tuple[Any, ...], timeout: Optional[float], owner: Any = None
    ) -> Hold:
        cancels = _cancel_requests()
        if self._closed:
            raise LockError("session is closed")
        block = c.block_ms(timeout)
        task = asyncio.current_task()
        assert task is not None  # (called from a coroutine)
        reg = (kind, keys, id(task))
        if owner is not None:
            _check_owner(self._by_owner, owner, keys)
        h = self._mine.get(reg)
        if (h is not None and h._task is task and h.count > 0 and h.lost_reason is None
                and owner in (None, h.owner)):
            h.count += 1
            return h
        if owner is None and kind in "rw":
            entry = self._rw_owner.get((keys[0], id(task)))
            if entry and entry[1] is task and entry[0] in self._by_owner:
                owner = entry[0]
        fresh = owner is None
        if fresh:
            owner = self._new_owner()
        if self.cluster and kind == "m" and len({self.client.keyslot(k) for k in keys}) > 1:
            raise c.cluster_slot_keys_error(keys)
        await self._session_conn(self._node_of(keys[0]))
        epoch = self._epoch
        args = c.acquire_args(_CMD[kind], keys, owner, self.lease_ms, self.token, block)
        cleanup = release_args(kind, keys, owner)
        new_owner = self._new_owner if fresh else None  # (an owner holding other locks stays itself)
        try:
            reply = await blocking_call(
                self.client, self.cluster, args, block, cleanup, self._pending.append, cancels, new_owner)
        except c.NoSession:
            await self._wait_session(keys[0])
            try:
                reply = await blocking_call(
                    self.client, self.cluster, args, block, cleanup, self._pending.append, cancels, new_owner)
            except c.NoSession as e:
                raise UnavailableError(f"session not registered on the server: {e}") from None
        if reply is None:
            raise c.busy(keys, timeout)
        owner = c.owner_of(args)  # (a fresh one if the wait's connection broke)
        tokens = [int(t) for t in reply] if isinstance(reply, list) else [int(reply)]
        h = Hold(self, kind, keys, owner, tokens, self._node_of(keys[0]))
        h._reg, h._task = reg, task
        self._mine[reg] = h
        self._by_owner.setdefault(owner, []).append(h)
        if kind in "rw":
            self._rw_owner[(keys[0], id(task))] = (owner, task)
        if self._epoch != epoch:
            await self._reattach_owner(owner, keys)
        return h

    async def _sem_acquire(
        self, key: Any, permits: int, timeout: Optional[float], cancels: Optional[int] = None
    ) -> "Permit":
        if cancels is None:
            cancels = _cancel_requests()
        if self._closed:
            raise LockError("session is closed")
        block = c.block_ms(timeout)
        owner = self._new_owner()  # fresh: never re-entered
        node = self._node_of(key)
        await self._session_conn(node)
        epoch = self._epoch
        args = c.sem_acquire_args(key, owner, permits, self.lease_ms, self.token, block)
        cleanup = release_args("s", (key,), owner)
        try:
            reply = await blocking_call(
                self.client, self.cluster, args, block, cleanup, self._pending.append, cancels, self._new_owner)
        except c.NoSession:
            await self._wait_session(key)
            try:
                reply = await blocking_call(
                    self.client, self.cluster, args, block, cleanup, self._pending.append, cancels,
                    self._new_owner)
            except c.NoSession as e:
                raise UnavailableError(f"session not registered on the server: {e}") from None
        if reply is None:
            raise c.sem_busy(key, permits, timeout)
        owner = c.owner_of(args)
        p = Permit(self, key, owner, int(reply), node)
        self._by_owner.setdefault(owner, []).append(p)
        if self._epoch != epoch:
            await self._reattach_owner(owner, (key,))
        return p

    async def _sem_release_some(self, p: Any, n: int) -> None:
        try:
            left = await self.client.execute_command("SEM.RELEASE", p.key, p.owner, "PERMITS", n)
        except Exception as e:
            err = c.map_error(e, "release")
            if isinstance(err, NotOwnerError):
                self._mark_lost(p, "gone")
            raise err from e
        p.permits = int(left)

    def _new_owner(self) -> str:
        return f"{self.token}:{next(self._owner_ids)}"

    def _track(self, kind: str, keys: Tuple[Any, ...], owner: Any, tokens: List[int]) -> Hold:
        h = Hold(self, kind, tuple(keys), owner, tokens, self._node_of(keys[0]))
        self._by_owner.setdefault(owner, []).append(h)
        return h

    async def _wait_session(self, key: Any) -> None:
        sc = await self._session_conn(self._node_of(key))
        try:
            await asyncio.wait_for(sc.up.wait(), max(1.0, self.lease_ms / 1000))
        except asyncio.TimeoutError:
            raise UnavailableError("the session connection is down") from None

    async def _retry_pending(self) -> None:
        pending, self._pending = self._pending, []
        for args in pending:
            try:
                await self.client.execute_command(*args)
            except rex.ResponseError:
                pass
            except Exception:  # noqa: BLE001
                self._pending.append(args)

    def _forget(self, h: Hold) -> None:
        if h._reg is not None and self._mine.get(h._reg) is h:
            del self._mine[h._reg]
        hs = self._by_owner.get(h.owner)
        if hs and h in hs:
            hs.remove(h)
            if not hs:
                del self._by_owner[h.owner]
                if h._reg is not None:
                    self._rw_owner.pop((h.key, h._reg[2]), None)

    async def _release(self, h: Hold) -> None:
        if h.count <= 0:
            raise LockError(f"lock {h.key!r}: release of a hold already released")
        h.count -= 1
        if h.count > 0:
            return
        self._forget(h)
        args = release_args(h.kind, h.keys, h.owner)
        try:
            await self.client.execute_command(*args)
        except rex.ResponseError as e:
            if h.lost_reason is not None:
                return
            err = c.map_error(e, "release")
            if isinstance(err, NotOwnerError):
                self._mark_lost(h, "gone")
            raise err from e
        except Exception as e:
            self._pending.append(args)
            if h.lost_reason is not None:
                return
            raise UnavailableError(f"release of {h.key!r}: {e} (retried in the background)") from e

    async def _renew(self, h: Hold, lease_ms: Optional[int]) -> int:
        h.check()
        lease = int(lease_ms or self.lease_ms)
        cmd = "SEM.RENEW" if h.kind == "s" else "LOCK.RENEW"
        try:
            for k in h.keys:
                await self._renew_key(k, h.owner, lease, cmd)
        except NotOwnerError:  # also EXPIRED (ExpiredError)
            self._mark_lost(h, "gone")
            raise
        return lease

    async def _renew_key(self, key: Any, owner: Any, lease: int, cmd: str = "LOCK.RENEW") -> Any:
        args = [cmd, key, owner, "PX", lease, "SESSION", self.token]
        try:
            return await self._execute(*args)
        except c.NoSession:
            await self._wait_session(key)
            return await self._execute(*args)

    def _mark_lost(self, h: Hold, reason: str) -> None:
        if h.lost_reason is not None:
            return
        h.lost_reason = reason
        if h._lost is not None:
            h._lost.set()  # (made already set if asked for later)
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
                res = cb(h)
                if inspect.isawaitable(res):
                    asyncio.ensure_future(res)
            except Exception:  # noqa: BLE001
                log.exception("on_lost callback failed")

    def _loss_message(self, owner: Any, key: Any, reason: str) -> None:
        for h in [h for h in self._by_owner.get(owner, ()) if key in h.keys]:
            self._mark_lost(h, reason)
        e = self._elections.get((key, owner))
        if e is not None:
            e._mark_lost(reason)

    # elections (as the sync Session's)
    def _ping_interval(self) -> float:
        if not self._election_leases:
            return c.PING_INTERVAL
        return min(c.PING_INTERVAL, min(self._election_leases.values()) / 4)

    async def _elections_add(self, e: Any, lease_s: float, ping: bool = False) -> None:
        self._election_leases[id(e)] = lease_s
        self._elections[(e.key, e.candidate)] = e
        sc = self._conns.get(e.node)
        if ping and sc is not None:
            # a campaign begins: a PING now, whose answer ends the reader's
            # wait (up to a second), which then waits lease/4 at most
            try:
                await sc.ping()
            except Exception:  # noqa: BLE001 - the reader sees the connection broken
                pass

    def _elections_remove(self, e: Any) -> None:
        self._election_leases.pop(id(e), None)
        key = (e.key, e.candidate)
        if self._elections.get(key) is e:
            del self._elections[key]

    def _leaderships(self, node: Optional[str] = None) -> List[Any]:
        return [e for e in self._elections.values() if e.leads and (node is None or e.node == node)]

    def _next_deadline(self) -> float:
        if not self._elections:
            return float("inf")
        return min((e.deadline for e in self._leaderships()), default=float("inf"))

    def _check_deadlines(self, now: float) -> None:
        for e in self._leaderships():
            if now >= e.deadline:
                e._mark_lost("deadline")

    def _elections_pong(self, sc: Any, sent: float) -> None:
        for e in self._leaderships(sc.node):
            e._extend_belief(sent)

    def _elections_down(self, sc: Any, reason: str) -> None:
        for e in [e for e in self._elections.values() if e.node == sc.node]:
            e._mark_lost(reason)

    def _resign_soon(self, key: Any, candidate: Any, lease_s: float) -> None:
        """As the sync Session's: ``ELECT.RESIGN`` in a task of its own, tried
        again for two leases while the server is unreachable or a replica."""
        args = ["ELECT.RESIGN", key, candidate]

        async def run() -> None:
            until = time.monotonic() + 2 * lease_s
            delay = 0.05
            while not self._closed:
                try:
                    await self.client.execute_command(*args)
                    return
                except rex.ResponseError as e:
                    if not c.is_transient(e):
                        return
                except Exception:  # noqa: BLE001 - unreachable
                    pass
                if time.monotonic() + delay > until:
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

        task = asyncio.get_running_loop().create_task(run())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _lost_if_down_too_long(self, sc: Any) -> None:
        if time.monotonic() - sc.last_alive > self.lease_ms / 1000:
            for h in [h for h in self.holds() if h.node == sc.node]:
                self._mark_lost(h, "session-down")

    async def _rehome(self, sc: Any) -> bool:
        """Cluster: see the sync ``Session._rehome``."""
        now = time.monotonic()
        if now - getattr(sc, "rehomed_at", 0) >= 1.0:
            sc.rehomed_at = now
            try:
                await self.client.nodes_manager.initialize()
            except Exception as e:  # noqa: BLE001
                log.debug("cluster slot map refresh failed: %s", e)
            moved: Dict[Tuple[Any, Optional[str]], List[Hold]] = {}
            for h in [h for h in self.holds() if h.node == sc.node]:
                try:
                    node = self._node_of(h.key)
                except Exception:  # noqa: BLE001
                    continue
                if node != sc.node:
                    moved.setdefault((h.owner, node), []).append(h)
            for (owner, node), hs in moved.items():
                try:
                    await self._session_conn(node)
                except Exception as e:  # noqa: BLE001
                    log.debug("session on %s: %s", node, e)
                    continue
                for h in hs:
                    h.node = node
                await self._reattach_owner(owner, tuple(sorted({k for h in hs for k in h.keys})))
        idle = not any(h.node == sc.node for h in self.holds())
        if idle and now - sc.last_alive > self.lease_ms / 1000:
            node = sc.node
            if self._conns.get(node) is sc:
                del self._conns[node]
            sc.closing = True
            return True
        return False

    async def _reattach(self, sc: Any) -> None:
        owners: Dict[Any, set[Any]] = {}
        for h in self.holds():
            if h.node == sc.node:
                owners.setdefault(h.owner, set()).update(h.keys)
        for owner, keys in owners.items():
            await self._reattach_owner(owner, tuple(sorted(keys)))

    async def _reattach_owner(self, owner: Any, keys: Tuple[Any, ...]) -> None:
        hs = self._by_owner.get(owner)
        cmd = "SEM.RENEW" if hs and hs[0].kind == "s" else "LOCK.RENEW"
        for key in keys:
            if not any(key in h.keys for h in self._by_owner.get(owner, ())):
                continue  # lost meanwhile (an owner's holds of other keys live on)
            try:
                await self._renew_key(key, owner, self.lease_ms, cmd)
            except NotOwnerError:  # also a semaphore's EXPIRED
                for h in [h for h in self._by_owner.get(owner, ()) if key in h.keys]:
                    self._mark_lost(h, "notowner")
                continue
            except Exception as e:  # noqa: BLE001 - tried again at every PING
                log.info("re-attach of %r failed: %s", key, e)
                self._unattached.setdefault(owner, (keys, time.monotonic()))
                return
        self._unattached.pop(owner, None)

    async def _retry_unattached(self) -> None:
        for owner, (keys, since) in list(self._unattached.items()):
            if owner not in self._by_owner:
                self._unattached.pop(owner, None)
            elif time.monotonic() - since > self.lease_ms / 1000:
                self._unattached.pop(owner, None)
                for h in list(self._by_owner.get(owner, ())):
                    self._mark_lost(h, "session-down")
            else:
                await self._reattach_owner(owner, keys)


class _Acquirable:
    def __init__(self, session: Session, kind: str, keys: Tuple[Any, ...]) -> None:
        self.session = session
        self.kind = kind
        self.keys = keys
        self._held: Dict[Optional[asyncio.Task[Any]], List[Hold]] = {}  # each task's holds taken by ``async with``

    async def acquire(self, timeout: Optional[float] = None, owner: Any = None) -> Hold:
        """``timeout=None`` waits forever, ``0`` tries once, ``seconds`` then BusyError.
        ``owner``: as the threaded ``acquire`` (the owner of another of this
        session's holds; a wait closing a cycle raises ``DeadlockError``)."""
        return await self.session._acquire(self.kind, self.keys, timeout, owner)

    async def __aenter__(self) -> Hold:
        h = await self.acquire()
        self._held.setdefault(asyncio.current_task(), []).append(h)
        return h

    async def __aexit__(self, *exc: Any) -> None:
        task = asyncio.current_task()
        stack = self._held[task]
        h = stack.pop()
        if not stack:
            del self._held[task]
        await h.release()


class RWLock:
    def __init__(self, session: Any, name: Any) -> None:
        self.session = session
        self.name = name

    def read_lock(self) -> _Acquirable:
        return _Acquirable(self.session, "r", (self.name,))

    def write_lock(self) -> _Acquirable:
        return _Acquirable(self.session, "w", (self.name,))


class Permit(Hold):
    """Permits of a semaphore held by one owner (see the sync ``Permit``);
    ``lost`` is an :class:`asyncio.Event`."""

    def __init__(
        self, session: Session, key: Any, owner: Any, permits: int, node: Optional[str]
    ) -> None:
        super().__init__(session, "s", (key,), owner, [], node)
        self.permits = permits

    token = property(lambda self: None)  # no fencing token for permits

    def check(self) -> None:
        if self.lost_reason is not None:
            raise LostError(f"permits of semaphore {self.key!r} were lost: {self.lost_reason}")

    async def release(self, permits: Optional[int] = None) -> None:
        """Give back ``permits`` of the permits (default: all)."""
        if permits is not None:
            c.check_permits(permits)
            if self.count > 0 and self.lost_reason is None:
                if permits > self.permits:
                    raise ValueError(f"release of {permits} permits: {self.permits} held")
                if permits < self.permits:
                    await self.session._sem_release_some(self, permits)
                    return
        await self.session._release(self)

    def __repr__(self) -> str:
        state = "lost" if self.lost_reason is not None else ("held" if self.count else "released")
        return f"<Permit {self.key!r} owner={self.owner} permits={self.permits} {state}>"


class Semaphore:
    """The asyncio ``Semaphore`` (see the sync one): ``Semaphore(session,
    name, permits=None)`` or ``session.semaphore(name, permits)``; given a
    ``redis.asyncio`` client instead of a session, its ``default_session``
    is used (opened at the first command).  ``await sem.acquire(...)`` ->
    :class:`Permit`; ``async with sem as permit:`` takes one permit."""

    def __init__(self, session: Any, name: Any, permits: Optional[int] = None) -> None:
        if permits is not None and (isinstance(permits, bool) or not isinstance(permits, int) or permits < 0):
            raise ValueError("permits must be None or an int >= 0")
        self._session = session if isinstance(session, Session) else None
        self._client = None if self._session is not None else session
        self.name = name
        self.initial_permits = permits
        self._init_done = permits is None
        self._held: Dict[Optional[asyncio.Task[Any]], List[Permit]] = {}  # each task's ``async with`` permits

    async def _get_session(self) -> Session:
        if self._session is None or (self._session._closed and self._client is not None):
            self._session = await default_session(self._client)
        return self._session

    @property
    def session(self) -> Optional[Session]:
        return self._session

    async def _execute(self, *args: Any) -> Any:
        return await (await self._get_session())._execute(*args)

    async def _ensure_init(self) -> None:
        if not self._init_done:
            await self._execute("SEM.INIT", self.name, self.initial_permits)
            self._init_done = True

    async def init(self, permits: Optional[int]) -> bool:
        """``SEM.INIT`` (after this object's own ``permits``, if given): True
        if set, False if the semaphore existed."""
        await self._ensure_init()
        return bool(await self._execute("SEM.INIT", self.name, permits))

    async def acquire(
        self, permits: int = 1, blocking: bool = True, timeout: Optional[float] = None
    ) -> Permit:
        """Take ``permits`` permits -> :class:`Permit` (``timeout`` as the sync
        ``Semaphore.acquire``; then :class:`BusyError`)."""
        c.check_permits(permits)
        if not blocking:
            if timeout not in (None, 0):
                raise ValueError("can't specify a timeout for a non-blocking acquire")
            timeout = 0
        cancels = _cancel_requests()
        await self._ensure_init()
        return await (await self._get_session())._sem_acquire(self.name, permits, timeout, cancels)

    async def info(self) -> Optional[Dict[str, Any]]:
        """``SEM.INFO`` as a dict, or None if the semaphore does not exist."""
        await self._ensure_init()
        return c.sem_info(await self._execute("SEM.INFO", self.name))

    async def available(self) -> int:
        info = await self.info()
        return 0 if info is None else int(info["available"])

    async def add(self, delta: int) -> int:
        await self._ensure_init()
        return int(await self._execute("SEM.ADD", self.name, delta))

    async def __aenter__(self) -> Permit:
        p = await self.acquire()
        self._held.setdefault(asyncio.current_task(), []).append(p)
        return p

    async def __aexit__(self, *exc: Any) -> None:
        task = asyncio.current_task()
        stack = self._held[task]
        p = stack.pop()
        if not stack:
            del self._held[task]
        await p.release()


class Latch:
    """The asyncio count-down latch (see the sync ``Latch``)."""

    def __init__(self, client: Any, name: Any) -> None:
        if isinstance(client, Session):
            client = client.client
        self.client = client
        self.name = name
        self.cluster = _is_cluster(client)

    async def _execute(self, *args: Any) -> Any:
        try:
            return await self.client.execute_command(*args)
        except Exception as e:
            raise c.map_error(e, str(args[0])) from e

    async def init(self, count: int, ttl: Optional[float] = None) -> bool:
        """``LATCH.INIT``; ``ttl`` in seconds.  True if set, False if it existed."""
        return bool(await self._execute("LATCH.INIT", self.name, count, *c.latch_ttl_args(ttl)))

    async def count_down(self, n: int = 1) -> int:
        return int(await self._execute("LATCH.COUNTDOWN", self.name, n))

    async def count(self) -> int:
        info = await self.info()
        return 0 if info is None else int(info["count"])

    async def info(self) -> Optional[Dict[str, Any]]:
        return c.as_map(await self._execute("LATCH.INFO", self.name))

    async def wait(self, timeout: Optional[float] = None) -> bool:
        """True when the latch is open, False when ``timeout`` ran out;
        :class:`LatchGone` if it ended without reaching zero."""
        block = c.block_ms(timeout)
        args = ["LATCH.AWAIT", self.name]
        if block is not None:
            args += ["BLOCK", block]
        return await blocking_call(self.client, self.cluster, args, block, None, None) is not None


from ._election import Election, Leader, Leadership, Observer  # noqa: E402 (it uses the names above)
