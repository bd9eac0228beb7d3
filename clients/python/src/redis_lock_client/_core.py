"""The threaded core: :class:`SessionCore`, the session without its
factories.  On the books both faces share (``_books``: the holds by owner,
the loss dispatch, the elections' register) it does the session's I/O: its
connections (``_conn``), the acquire (a lock's, a semaphore's), release,
renewal and re-attach of holds (``_hold``), cluster re-homing, the
background resign of a lost leadership.  Every object (``_locks``,
``_semaphore``, ``_latch``, ``_election``) is built on it; the public
:class:`~redis_lock_client.Session` adds the factories on top."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import _common as c
from ._books import SessionState
from ._conn import SessionConn
from ._hold import Hold, Permit
from ._wait import blocking_call
from .errors import LockError, NotOwnerError, UnavailableError

__all__ = ["SessionCore"]

log = logging.getLogger("redis_lock_client")

_tl = threading.local()
_thread_ids = itertools.count(1)
_S = TypeVar("_S", bound="SessionCore")


def _thread_key() -> int:
    """This thread's number (re-entry is per thread; ``threading.get_ident``
    is reused once a thread ends)."""
    tid = getattr(_tl, "id", None)
    if tid is None:
        tid = _tl.id = next(_thread_ids)
    return tid


class SessionCore(SessionState[Hold]):
    """A session without its factories: what the objects hold and call (the
    public :class:`~redis_lock_client.Session` documents its arguments)."""

    _hold_type = Hold

    def __init__(self, client: Any, lease_ms: int = 30000, name: Optional[str] = None) -> None:
        super().__init__(client, lease_ms, name, threading.RLock())
        # (the books, with this face's connections)
        self._conns: Dict[Optional[str], SessionConn]
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

    def _session_conn(self, node: Optional[str]) -> SessionConn:
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
            sc = SessionConn(self, node, self._factory(pool))
            sc.start()
            self._conns[node] = sc
            return sc

    def _execute(self, *args: Any) -> Any:
        try:
            return self.client.execute_command(*args)
        except Exception as e:
            raise c.map_error(e, str(args[0])) from e

    # public (the factories of objects are the public Session's)
    def session_client_id(self, key: Any = None) -> Optional[int]:
        """``CLIENT ID`` of the session connection (of ``key``'s node on a cluster)."""
        return self._session_conn(self._node_of(key) if key else None).id

    def close(self) -> None:
        """Release every hold and close the session connection(s)."""
        with self._lock:
            if self._closed:
                return
            holds = self.holds()
        for e in self._elections.leaderships():
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

    def __enter__(self: _S) -> _S:
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
                c.check_owner(self._by_owner, owner, keys)
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
        args = c.acquire_args(c.ACQUIRE_CMD[kind], keys, owner, self.lease_ms, self.token, block)
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

    def _sem_acquire(self, key: Any, permits: int, timeout: Optional[float]) -> Permit:
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

    def _wait_session(self, key: Any) -> None:
        node = self._node_of(key)
        sc = self._session_conn(node)
        if not sc.up.wait(max(1.0, self.lease_ms / 1000)):
            raise UnavailableError("the session connection is down")
        if not self.cluster:
            # the server forgot the name (a restart): open the session anew
            return

    def _blocking(
        self, args: List[Any], kind: str, keys: Tuple[Any, ...], owner: Any, block: Optional[int], fresh: bool
    ) -> Any:
        """The wait of an acquire; ``fresh``: the owner was made for it, and is
        made anew if the wait's connection breaks (an owner that holds other
        locks keeps waiting as itself)."""
        return blocking_call(
            self.client, self.cluster, args, block, c.release_args(kind, keys, owner), self._pending_add,
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

    def _release(self, h: Hold) -> None:
        with self._lock:
            if h.count <= 0:
                raise LockError(f"lock {h.key!r}: release of a hold already released")
            h.count -= 1
            if h.count > 0:
                return
            self._forget(h)
        args = c.release_args(h.kind, h.keys, h.owner)
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

    # elections: the register is ``_elections``; what needs the session's I/O is here
    def _elections_add(self, e: Any, lease_s: float) -> None:
        """Register a campaign or a leadership, and wake the reader thread: its
        PING interval (lease/4) and the leadership's deadline change."""
        self._elections.add(e, lease_s)
        sc = self._conns.get(e.node)
        if sc is not None:
            sc.wake()

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

    def _rehome(self, sc: SessionConn) -> bool:
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

    def _reattach(self, sc: SessionConn) -> None:
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
