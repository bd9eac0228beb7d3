"""The asyncio flavour, on ``redis.asyncio``: the same API with ``await``.

    async with Session(r) as session:
        async with await session.lock("invoice:7").acquire(timeout=5) as hold:
            print(hold.token)

``hold.lost`` is an :class:`asyncio.Event`; re-entry is per task; a
cancelled ``acquire`` (``task.cancel()``, ``asyncio.timeout``) closes its
waiting connection and releases a grant that raced the cancel.
``Semaphore``/``Permit``/``Latch`` are the sync ones' twins.
"""

import asyncio
import collections
import inspect
import itertools
import logging
import time

import redis.exceptions as rex
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .. import _common as c
from .._sync import _check_owner, release_args
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


def _is_cluster(client):
    return hasattr(client, "get_node_from_key") and hasattr(client, "nodes_manager")


async def _get_conn(pool):
    try:
        return await pool.get_connection()
    except TypeError:
        return await pool.get_connection("LOCK.ACQUIRE")


def _pool_of(client, cluster, key):
    if not cluster:
        return client.connection_pool
    return None


def _cancel_requests():
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


def _honour_lost_cancel(before):
    """Raise the CancelledError a cancel request made since ``before`` (a
    :func:`_cancel_requests` count) should have raised."""
    if _cancel_requests() > before:
        raise asyncio.CancelledError()


async def blocking_call(client, cluster, args, block, cleanup_args, on_cleanup_failed, cancels=None):
    """The asyncio twin of ``redis_lock_client._sync.blocking_call``.
    ``cancels``: the :func:`_cancel_requests` count when the caller's
    operation began (default: now); one made since, and lost, ends the call
    with CancelledError before its wait (see :func:`_cancel_requests`)."""
    if cancels is None:
        cancels = _cancel_requests()
    key = args[2] if args[0] == "LOCK.MACQUIRE" else args[1]
    if cluster:
        node = client.get_node_from_key(key)
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
        await conn.send_command(*args)
        sent = True
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
        if sent and cleanup_args is not None:
            try:
                await client.execute_command(*c.cancel_args(args))
            except rex.ResponseError:
                pass
            except BaseException:
                pass  # unreachable: the release below says so
            try:
                await client.execute_command(*cleanup_args)
            except rex.ResponseError:
                pass
            except BaseException:
                on_cleanup_failed(cleanup_args)
        err = c.map_error(e, args[0]) if isinstance(e, Exception) else e
        if err is e:
            raise
        raise err from e
    r = release()
    if r is not None and inspect.isawaitable(r):  # a coroutine in recent redis-py
        await r
    return reply


async def _release_conn(release):
    r = release()
    if r is not None and inspect.isawaitable(r):
        await r


class Hold:
    """One owner's hold (see the sync ``Hold``); ``lost`` is an asyncio.Event."""

    def __init__(self, session, kind, keys, owner, tokens, node):
        self.session = session
        self.kind = kind
        self.keys = keys
        self.owner = owner
        self.tokens = tokens
        self.node = node
        self.count = 1
        self._lost = None  # the Event, made when first asked for (most holds never are)
        self.lost_reason = None
        self._reg = None
        self._task = None

    @property
    def lost(self):
        """An :class:`asyncio.Event`, set when the hold is lost."""
        if self._lost is None:
            self._lost = asyncio.Event()
            if self.lost_reason is not None:
                self._lost.set()
        return self._lost

    key = property(lambda self: self.keys[0])
    token = property(lambda self: self.tokens[0] if len(self.tokens) == 1 else self.tokens)

    def check(self):
        if self.lost_reason is not None:
            raise LostError(f"lock {self.key!r} was lost: {self.lost_reason}")

    async def release(self):
        await self.session._release(self)

    async def extend(self, lease_ms=None):
        return await self.session._renew(self, lease_ms)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if self.count > 0:
            await self.release()


class _SessionConn:
    def __init__(self, session, node, factory):
        self.session = session
        self.node = node
        self.factory = factory
        self.conn = None
        self.up = asyncio.Event()
        self.closing = False
        self.last_alive = time.monotonic()
        self.id = None
        self.task = None
        # elections: send times of the PINGs not answered yet, of the last one answered
        self.pings = collections.deque()
        self.last_ok_ping_sent = None
        self.last_ping_at = time.monotonic()
        self.demoted = False

    async def open(self):
        conn = self.factory()
        try:
            await conn.connect()
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

    async def start(self):
        await self.open()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def close(self):
        self.closing = True
        if self.task:
            self.task.cancel()
            try:
                await self.task
            except BaseException:  # noqa: BLE001
                pass
        if self.conn:
            await self.conn.disconnect(nowait=True)

    async def _run(self):
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

    async def _serve(self, conn):
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

    async def ping(self, conn=None):
        """A PING now (also from a campaign that needs PINGs sooner: the
        reader's wait then ends with its answer)."""
        conn = conn or self.conn
        if conn is None or not self.up.is_set():
            return
        now = time.monotonic()
        self.pings.append(now)
        self.last_ping_at = now
        await conn.send_command("PING")

    def _handle(self, reply):
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

    def _pong(self):
        if not self.pings:
            return
        sent = self.pings.popleft()
        self.last_ok_ping_sent = sent
        self.session._elections_pong(self, sent)

    async def _reconnect(self):
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

    def __init__(self, client, lease_ms=30000, name=None):
        self.client = client
        self.lease_ms = int(lease_ms)
        self.token = f"{name}-{c.new_token()}" if name else c.new_token()
        self.cluster = _is_cluster(client)
        self._owner_ids = itertools.count(1)
        self._by_owner = {}
        self._mine = {}
        self._rw_owner = {}
        self._conns = {}
        self._opening = {}
        self._callbacks = []
        self._pending = []
        self._unattached = {}
        self._epoch = 0
        self._closed = False
        # elections: (key, candidate) -> Leadership, or a campaign on its way
        self._elections = {}
        self._election_leases = {}  # id(entry) -> lease in s

    async def start(self):
        try:
            if self.cluster:
                await self.client.initialize()  # the slot map, for get_node_from_key
            else:
                await self._session_conn(None)
        except Exception as e:
            raise c.map_error(e, "session") from e
        return self

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()

    def _factory(self, pool_or_node):
        def make():
            kwargs = dict(pool_or_node.connection_kwargs)
            c.resp2(kwargs)
            kwargs["retry"] = Retry(NoBackoff(), 0)  # the session retries on its own
            return pool_or_node.connection_class(**kwargs)

        return make

    async def _session_conn(self, node):
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

    def _node_of(self, key):
        return self.client.get_node_from_key(key).name if self.cluster else None

    async def _execute(self, *args):
        try:
            return await self.client.execute_command(*args)
        except Exception as e:
            raise c.map_error(e, str(args[0])) from e

    def lock(self, name):
        return _Acquirable(self, "x", (name,))

    def rwlock(self, name):
        return RWLock(self, name)

    def multilock(self, keys):
        keys = tuple(keys)
        if not keys:
            raise ValueError("a multi-lock needs at least one key")
        return _Acquirable(self, "m", keys)

    def semaphore(self, name, permits=None):
        """A semaphore whose permits are bound to this session (see :class:`Semaphore`)."""
        return Semaphore(self, name, permits)

    def election(self, name, value=None, lease_ms=5000, on_lost=None):
        """The election of a leader for ``name`` (see :class:`Election`)."""
        return Election(self, name, value=value, lease_ms=lease_ms, on_lost=on_lost)

    def latch(self, name):
        """A count-down latch on this session's client (see :class:`Latch`)."""
        return Latch(self.client, name)

    def on_lost(self, callback):
        """``callback(hold)``, a function or a coroutine function."""
        self._callbacks.append(callback)
        return callback

    def holds(self):
        return [h for hs in self._by_owner.values() for h in hs]

    async def session_client_id(self, key=None):
        return (await self._session_conn(self._node_of(key) if key else None)).id

    async def close(self):
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

    async def _acquire(self, kind, keys, timeout, owner=None):
        cancels = _cancel_requests()
        if self._closed:
            raise LockError("session is closed")
        block = c.block_ms(timeout)
        task = asyncio.current_task()
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
        if owner is None:
            owner = f"{self.token}:{next(self._owner_ids)}"
        if self.cluster and kind == "m" and len({self.client.keyslot(k) for k in keys}) > 1:
            raise c.cluster_slot_keys_error(keys)
        await self._session_conn(self._node_of(keys[0]))
        epoch = self._epoch
        args = c.acquire_args(_CMD[kind], keys, owner, self.lease_ms, self.token, block)
        cleanup = release_args(kind, keys, owner)
        try:
            reply = await blocking_call(
                self.client, self.cluster, args, block, cleanup, self._pending.append, cancels)
        except c.NoSession:
            await self._wait_session(keys[0])
            try:
                reply = await blocking_call(
                    self.client, self.cluster, args, block, cleanup, self._pending.append, cancels)
            except c.NoSession as e:
                raise UnavailableError(f"session not registered on the server: {e}") from None
        if reply is None:
            raise c.busy(keys, timeout)
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

    async def _sem_acquire(self, key, permits, timeout, cancels=None):
        if cancels is None:
            cancels = _cancel_requests()
        if self._closed:
            raise LockError("session is closed")
        block = c.block_ms(timeout)
        owner = f"{self.token}:{next(self._owner_ids)}"  # fresh: never re-entered
        node = self._node_of(key)
        await self._session_conn(node)
        epoch = self._epoch
        args = c.sem_acquire_args(key, owner, permits, self.lease_ms, self.token, block)
        cleanup = release_args("s", (key,), owner)
        try:
            reply = await blocking_call(
                self.client, self.cluster, args, block, cleanup, self._pending.append, cancels)
        except c.NoSession:
            await self._wait_session(key)
            try:
                reply = await blocking_call(
                    self.client, self.cluster, args, block, cleanup, self._pending.append, cancels)
            except c.NoSession as e:
                raise UnavailableError(f"session not registered on the server: {e}") from None
        if reply is None:
            raise c.sem_busy(key, permits, timeout)
        p = Permit(self, key, owner, int(reply), node)
        self._by_owner.setdefault(owner, []).append(p)
        if self._epoch != epoch:
            await self._reattach_owner(owner, (key,))
        return p

    async def _sem_release_some(self, p, n):
        try:
            left = await self.client.execute_command("SEM.RELEASE", p.key, p.owner, "PERMITS", n)
        except Exception as e:
            err = c.map_error(e, "release")
            if isinstance(err, NotOwnerError):
                self._mark_lost(p, "gone")
            raise err from e
        p.permits = int(left)

    def _track(self, kind, keys, owner, tokens):
        h = Hold(self, kind, tuple(keys), owner, tokens, self._node_of(keys[0]))
        self._by_owner.setdefault(owner, []).append(h)
        return h

    async def _wait_session(self, key):
        sc = await self._session_conn(self._node_of(key))
        try:
            await asyncio.wait_for(sc.up.wait(), max(1.0, self.lease_ms / 1000))
        except asyncio.TimeoutError:
            raise UnavailableError("the session connection is down") from None

    async def _retry_pending(self):
        pending, self._pending = self._pending, []
        for args in pending:
            try:
                await self.client.execute_command(*args)
            except rex.ResponseError:
                pass
            except Exception:  # noqa: BLE001
                self._pending.append(args)

    def _forget(self, h):
        if self._mine.get(h._reg) is h:
            del self._mine[h._reg]
        hs = self._by_owner.get(h.owner)
        if hs and h in hs:
            hs.remove(h)
            if not hs:
                del self._by_owner[h.owner]
                if h._reg is not None:
                    self._rw_owner.pop((h.key, h._reg[2]), None)

    async def _release(self, h):
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

    async def _renew(self, h, lease_ms):
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

    async def _renew_key(self, key, owner, lease, cmd="LOCK.RENEW"):
        args = [cmd, key, owner, "PX", lease, "SESSION", self.token]
        try:
            return await self._execute(*args)
        except c.NoSession:
            await self._wait_session(key)
            return await self._execute(*args)

    def _mark_lost(self, h, reason):
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
        for cb in list(self._callbacks):
            try:
                res = cb(h)
                if inspect.isawaitable(res):
                    asyncio.ensure_future(res)
            except Exception:  # noqa: BLE001
                log.exception("on_lost callback failed")

    def _loss_message(self, owner, key, reason):
        for h in [h for h in self._by_owner.get(owner, ()) if key in h.keys]:
            self._mark_lost(h, reason)
        e = self._elections.get((key, owner))
        if e is not None:
            e._mark_lost(reason)

    # elections (as the sync Session's)
    def _ping_interval(self):
        if not self._election_leases:
            return c.PING_INTERVAL
        return min(c.PING_INTERVAL, min(self._election_leases.values()) / 4)

    async def _elections_add(self, e, lease_s, ping=False):
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

    def _elections_remove(self, e):
        self._election_leases.pop(id(e), None)
        if self._elections.get((e.key, e.candidate)) is e:
            del self._elections[(e.key, e.candidate)]

    def _leaderships(self, node=None):
        return [e for e in self._elections.values() if e.leads and (node is None or e.node == node)]

    def _next_deadline(self):
        if not self._elections:
            return float("inf")
        return min((e.deadline for e in self._leaderships()), default=float("inf"))

    def _check_deadlines(self, now):
        for e in self._leaderships():
            if now >= e.deadline:
                e._mark_lost("deadline")

    def _elections_pong(self, sc, sent):
        for e in self._leaderships(sc.node):
            e._extend_belief(sent)

    def _elections_down(self, sc, reason):
        for e in [e for e in self._elections.values() if e.node == sc.node]:
            e._mark_lost(reason)

    def _resign_soon(self, key, candidate, lease_s):
        """As the sync Session's: ``ELECT.RESIGN`` in a task of its own, tried
        again for two leases while the server is unreachable or a replica."""
        args = ["ELECT.RESIGN", key, candidate]

        async def run():
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
        self._bg = getattr(self, "_bg", set())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _lost_if_down_too_long(self, sc):
        if time.monotonic() - sc.last_alive > self.lease_ms / 1000:
            for h in [h for h in self.holds() if h.node == sc.node]:
                self._mark_lost(h, "session-down")

    async def _rehome(self, sc):
        """Cluster: see the sync ``Session._rehome``."""
        now = time.monotonic()
        if now - getattr(sc, "rehomed_at", 0) >= 1.0:
            sc.rehomed_at = now
            try:
                await self.client.nodes_manager.initialize()
            except Exception as e:  # noqa: BLE001
                log.debug("cluster slot map refresh failed: %s", e)
            moved = {}
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
                await self._reattach_owner(owner, sorted({k for h in hs for k in h.keys}))
        idle = not any(h.node == sc.node for h in self.holds())
        if idle and now - sc.last_alive > self.lease_ms / 1000:
            if self._conns.get(sc.node) is sc:
                del self._conns[sc.node]
            sc.closing = True
            return True
        return False

    async def _reattach(self, sc):
        owners = {}
        for h in self.holds():
            if h.node == sc.node:
                owners.setdefault(h.owner, set()).update(h.keys)
        for owner, keys in owners.items():
            await self._reattach_owner(owner, sorted(keys))

    async def _reattach_owner(self, owner, keys):
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

    async def _retry_unattached(self):
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
    def __init__(self, session, kind, keys):
        self.session = session
        self.kind = kind
        self.keys = keys

    async def acquire(self, timeout=None, owner=None):
        """``timeout=None`` waits forever, ``0`` tries once, ``seconds`` then BusyError.
        ``owner``: as the threaded ``acquire`` (the owner of another of this
        session's holds; a wait closing a cycle raises ``DeadlockError``)."""
        return await self.session._acquire(self.kind, self.keys, timeout, owner)

    async def __aenter__(self):
        h = await self.acquire()
        self.__dict__.setdefault("_held", {}).setdefault(asyncio.current_task(), []).append(h)
        return h

    async def __aexit__(self, *exc):
        task = asyncio.current_task()
        stack = self._held[task]
        h = stack.pop()
        if not stack:
            del self._held[task]
        await h.release()


class RWLock:
    def __init__(self, session, name):
        self.session = session
        self.name = name

    def read_lock(self):
        return _Acquirable(self.session, "r", (self.name,))

    def write_lock(self):
        return _Acquirable(self.session, "w", (self.name,))


class Permit(Hold):
    """Permits of a semaphore held by one owner (see the sync ``Permit``);
    ``lost`` is an :class:`asyncio.Event`."""

    def __init__(self, session, key, owner, permits, node):
        super().__init__(session, "s", (key,), owner, [], node)
        self.permits = permits

    token = property(lambda self: None)  # no fencing token for permits

    def check(self):
        if self.lost_reason is not None:
            raise LostError(f"permits of semaphore {self.key!r} were lost: {self.lost_reason}")

    async def release(self, permits=None):
        """Give back ``permits`` of the permits (default: all)."""
        if permits is not None:
            c.check_permits(permits)
            if self.count > 0 and self.lost_reason is None:
                if permits > self.permits:
                    raise ValueError(f"release of {permits} permits: {self.permits} held")
                if permits < self.permits:
                    return await self.session._sem_release_some(self, permits)
        await self.session._release(self)

    def __repr__(self):
        state = "lost" if self.lost_reason is not None else ("held" if self.count else "released")
        return f"<Permit {self.key!r} owner={self.owner} permits={self.permits} {state}>"


class Semaphore:
    """The asyncio ``Semaphore`` (see the sync one): ``Semaphore(session,
    name, permits=None)`` or ``session.semaphore(name, permits)``; given a
    ``redis.asyncio`` client instead of a session, its ``default_session``
    is used (opened at the first command).  ``await sem.acquire(...)`` ->
    :class:`Permit`; ``async with sem as permit:`` takes one permit."""

    def __init__(self, session, name, permits=None):
        if permits is not None and (isinstance(permits, bool) or not isinstance(permits, int) or permits < 0):
            raise ValueError("permits must be None or an int >= 0")
        self._session = session if isinstance(session, Session) else None
        self._client = None if self._session is not None else session
        self.name = name
        self.initial_permits = permits
        self._init_done = permits is None

    async def _get_session(self):
        if self._session is None or (self._session._closed and self._client is not None):
            self._session = await default_session(self._client)
        return self._session

    @property
    def session(self):
        return self._session

    async def _execute(self, *args):
        return await (await self._get_session())._execute(*args)

    async def _ensure_init(self):
        if not self._init_done:
            await self._execute("SEM.INIT", self.name, self.initial_permits)
            self._init_done = True

    async def init(self, permits):
        """``SEM.INIT`` (after this object's own ``permits``, if given): True
        if set, False if the semaphore existed."""
        await self._ensure_init()
        return bool(await self._execute("SEM.INIT", self.name, permits))

    async def acquire(self, permits=1, blocking=True, timeout=None):
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

    async def info(self):
        """``SEM.INFO`` as a dict, or None if the semaphore does not exist."""
        await self._ensure_init()
        return c.sem_info(await self._execute("SEM.INFO", self.name))

    async def available(self):
        info = await self.info()
        return 0 if info is None else int(info["available"])

    async def add(self, delta):
        await self._ensure_init()
        return int(await self._execute("SEM.ADD", self.name, delta))

    async def __aenter__(self):
        p = await self.acquire()
        self.__dict__.setdefault("_held", {}).setdefault(asyncio.current_task(), []).append(p)
        return p

    async def __aexit__(self, *exc):
        task = asyncio.current_task()
        stack = self._held[task]
        p = stack.pop()
        if not stack:
            del self._held[task]
        await p.release()


class Latch:
    """The asyncio count-down latch (see the sync ``Latch``)."""

    def __init__(self, client, name):
        if isinstance(client, Session):
            client = client.client
        self.client = client
        self.name = name
        self.cluster = _is_cluster(client)

    async def _execute(self, *args):
        try:
            return await self.client.execute_command(*args)
        except Exception as e:
            raise c.map_error(e, str(args[0])) from e

    async def init(self, count, ttl=None):
        """``LATCH.INIT``; ``ttl`` in seconds.  True if set, False if it existed."""
        return bool(await self._execute("LATCH.INIT", self.name, count, *c.latch_ttl_args(ttl)))

    async def count_down(self, n=1):
        return int(await self._execute("LATCH.COUNTDOWN", self.name, n))

    async def count(self):
        info = await self.info()
        return 0 if info is None else int(info["count"])

    async def info(self):
        return c.as_map(await self._execute("LATCH.INFO", self.name))

    async def wait(self, timeout=None):
        """True when the latch is open, False when ``timeout`` ran out;
        :class:`LatchGone` if it ended without reaching zero."""
        block = c.block_ms(timeout)
        args = ["LATCH.AWAIT", self.name]
        if block is not None:
            args += ["BLOCK", block]
        return await blocking_call(self.client, self.cluster, args, block, None, None) is not None


from ._election import Election, Leader, Leadership, Observer  # noqa: E402 (it uses the names above)
