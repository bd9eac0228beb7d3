"""The asyncio core's wait: one blocking command (an acquire, a campaign, a
latch's await) on a pooled connection, the twin of the threaded ``_wait``
(the decisions without I/O are :class:`~redis_lock_client._common.Wait`'s),
and the honouring of the task cancels that redis-py can lose
(:func:`cancel_requests`)."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable, List, Optional

import redis.exceptions as rex

from .. import _common as c

__all__ = ["blocking_call", "cancel_requests", "honour_lost_cancel", "get_conn", "release_conn", "FOREVER"]

#: seconds: a read with no client-side limit (redis-py >= 5)
FOREVER = 10.0**9  # seconds: a read with no client-side limit (redis-py >= 5)


async def get_conn(pool: Any) -> Any:
    """A connection of ``pool`` (redis-py's signature changed in 5.1)."""
    try:
        return await pool.get_connection()
    except TypeError:
        return await pool.get_connection("LOCK.ACQUIRE")



def cancel_requests() -> int:
    """The cancel requests pending on the current task (``Task.cancelling()``,
    Python >= 3.11; 0 before).

    redis-py writes a command through ``asyncio.wait_for`` when the connection
    has a ``socket_timeout`` (redis-py 8's default is 5 s), and so does its
    connect (HELLO).  Before Python 3.12 ``wait_for`` *returns* instead of
    raising when the cancel lands after the write finished but before the
    waiting task resumed (CPython gh-86296): the cancel is lost, and a
    blocking command then waits for its reply as if never cancelled.  Such a
    cancel still counts here (nothing uncancelled it), so a count grown since
    an operation began is a cancel to honour: see :func:`honour_lost_cancel`.
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


def honour_lost_cancel(before: int) -> None:
    """Raise the CancelledError a cancel request made since ``before`` (a
    :func:`cancel_requests` count) should have raised."""
    if cancel_requests() > before:
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
    """The asyncio twin of ``redis_lock_client._wait.blocking_call`` (a wait
    whose connection breaks is cleaned up and sent again, as a fresh owner
    ``new_owner()`` when given).  ``cancels``: the :func:`cancel_requests`
    count when the caller's operation began (default: now); one made since,
    and lost, ends the call with CancelledError before its wait (see
    :func:`cancel_requests`)."""
    if cancels is None:
        cancels = cancel_requests()
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
            conn = await get_conn(pool)
        except Exception as e:
            raise c.map_error(e, args[0]) from e
        release = lambda: pool.release(conn)  # noqa: E731
    sent = False
    limit = None
    try:
        if cluster:
            await conn.connect()
        honour_lost_cancel(cancels)  # (lost in the pool's connect or before)
        sent = True  # (from the first byte: a write that fails half-way may have reached the server)
        await conn.send_command(*args)
        honour_lost_cancel(cancels)  # (lost in the write): cancelled and cleaned up below
        if block is None or (block == 0 and getattr(conn, "socket_timeout", False) is None):
            # a try, or a wait with no limit on a connection with none: a plain read (no
            # timer set and cancelled per acquisition)
            reply = await conn.read_response()
        else:
            limit = FOREVER if block == 0 else block / 1000 + c.BLOCK_SLACK
            t0 = time.monotonic()
            reply = await conn.read_response(timeout=limit)
            if reply is None and time.monotonic() - t0 >= limit - 0.01:
                raise rex.TimeoutError("no answer within the BLOCK time")
    except rex.ResponseError as e:
        await release_conn(release)
        raise c.map_error(e, args[0]) from e
    except BaseException as e:
        await conn.disconnect(nowait=True)
        await release_conn(release)
        if wait.cleanup_args is not None:
            reachable = sent and await _clean_up(client, wait)
        else:  # (nothing to clean up: a PING says whether a broken wait can be sent again)
            reachable = c.is_broken_connection(e) and await _reachable(client, cluster, wait.key)
        raise wait.failure(e, reachable)
    await release_conn(release)  # (a coroutine in recent redis-py)
    return reply


async def _clean_up(client: Any, wait: c.Wait) -> bool:
    """The asyncio twin of ``redis_lock_client._wait._clean_up``: LOCK.CANCEL,
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


async def release_conn(release: Callable[[], Any]) -> None:
    """Give a connection back (a coroutine in recent redis-py, a plain call before)."""
    r = release()
    if r is not None and inspect.isawaitable(r):
        await r
