"""The threaded core's wait: one blocking command (an acquire, a campaign, a
latch's await) on a pooled connection, cancelled without leaving anything
queued or held, and sent again when its connection breaks.  Every object
that waits goes through :func:`blocking_call`; what it decides without I/O
is :class:`~redis_lock_client._common.Wait`'s."""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import redis.exceptions as rex

from . import _common as c

__all__ = ["blocking_call", "get_conn", "pool_of"]


def get_conn(pool: Any) -> Any:
    """A connection of ``pool`` (redis-py's signature changed in 5.1)."""
    try:
        return pool.get_connection()
    except TypeError:  # redis-py 5.0 needs a command name
        return pool.get_connection("LOCK.ACQUIRE")


def pool_of(client: Any, cluster: bool, key: Any) -> Any:
    """The connection pool of the server that serves ``key``."""
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
    pool = pool_of(client, cluster, wait.key)
    try:
        conn = get_conn(pool)
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
