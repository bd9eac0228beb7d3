"""The asyncio core: :class:`SessionCore`, the session without its
factories, the threaded ``_core``'s twin.  On the books both faces share
(``redis_lock_client._books``) it does the session's I/O with ``await``:
its connections (``_conn``), the acquire, release, renewal and re-attach
of holds (``_hold``), cluster re-homing, background resigns; a loss
callback's coroutine runs as a task.  The objects are built on it; the
public :class:`~redis_lock_client.asyncio.Session` adds the factories on top."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

import redis.exceptions as rex
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .. import _common as c
from ..errors import LockError, NotOwnerError, UnavailableError
from .._books import SessionState
from ._conn import SessionConn
from ._hold import Hold, Permit
from ._wait import blocking_call, cancel_requests

__all__ = ["SessionCore"]

log = logging.getLogger("redis_lock_client")
_S = TypeVar("_S", bound="SessionCore")


class SessionCore(SessionState[Hold]):
    """A session without its factories: what the objects hold and call (see
    the public :class:`~redis_lock_client.asyncio.Session`)."""

    _hold_type = Hold

    def __init__(self, client: Any, lease_ms: int = 30000, name: Optional[str] = None) -> None:
        super().__init__(client, lease_ms, name)
        # (the books, with this face's connections)
        self._conns: Dict[Optional[str], SessionConn]
        # (key, id(task)) -> (owner, task): a task's read-write lock's owner
        self._rw_owner: Dict[Tuple[Any, int], Tuple[Any, asyncio.Task[Any]]]
        self._opening: Dict[Optional[str], asyncio.Future[SessionConn]] = {}
        self._bg: set[asyncio.Task[None]] = set()  # background resigns, kept until done

    async def start(self: _S) -> _S:
        try:
            if self.cluster:
                await self.client.initialize()  # the slot map, for get_node_from_key
            else:
                await self._session_conn(None)
        except Exception as e:
            raise c.map_error(e, "session") from e
        return self

    async def __aenter__(self: _S) -> _S:
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

    async def _session_conn(self, node: Optional[str]) -> SessionConn:
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
            sc = SessionConn(self, node, self._factory(src))
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

    async def _execute(self, *args: Any) -> Any:
        try:
            return await self.client.execute_command(*args)
        except Exception as e:
            raise c.map_error(e, str(args[0])) from e

    async def session_client_id(self, key: Any = None) -> Optional[int]:
        return (await self._session_conn(self._node_of(key) if key else None)).id

    async def close(self) -> None:
        if self._closed:
            return
        for e in self._elections.leaderships():
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
        cancels = cancel_requests()
        if self._closed:
            raise LockError("session is closed")
        block = c.block_ms(timeout)
        task = asyncio.current_task()
        assert task is not None  # (called from a coroutine)
        reg = (kind, keys, id(task))
        if owner is not None:
            c.check_owner(self._by_owner, owner, keys)
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
        args = c.acquire_args(c.ACQUIRE_CMD[kind], keys, owner, self.lease_ms, self.token, block)
        cleanup = c.release_args(kind, keys, owner)
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
    ) -> Permit:
        if cancels is None:
            cancels = cancel_requests()
        if self._closed:
            raise LockError("session is closed")
        block = c.block_ms(timeout)
        owner = self._new_owner()  # fresh: never re-entered
        node = self._node_of(key)
        await self._session_conn(node)
        epoch = self._epoch
        args = c.sem_acquire_args(key, owner, permits, self.lease_ms, self.token, block)
        cleanup = c.release_args("s", (key,), owner)
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

    async def _release(self, h: Hold) -> None:
        if h.count <= 0:
            raise LockError(f"lock {h.key!r}: release of a hold already released")
        h.count -= 1
        if h.count > 0:
            return
        self._forget(h)
        args = c.release_args(h.kind, h.keys, h.owner)
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

    def _call_back(self, cb: Callable[[Any], Any], h: Any) -> None:
        """A loss callback may be a coroutine function: its coroutine runs as a task."""
        res = cb(h)
        if inspect.isawaitable(res):
            asyncio.ensure_future(res)

    # elections: the register is ``_elections``; what needs the session's I/O is here
    async def _elections_add(self, e: Any, lease_s: float, ping: bool = False) -> None:
        """Register a campaign or a leadership; ``ping``: a PING now."""
        self._elections.add(e, lease_s)
        sc = self._conns.get(e.node)
        if ping and sc is not None:
            # a campaign begins: a PING now, whose answer ends the reader's
            # wait (up to a second), which then waits lease/4 at most
            try:
                await sc.ping()
            except Exception:  # noqa: BLE001 - the reader sees the connection broken
                pass

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
