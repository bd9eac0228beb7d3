"""The threaded :class:`Latch`: a count-down latch (``LATCH.*``).  It needs
no session, only the client; its wait is the core's (``_wait``)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _common as c
from ._core import SessionCore
from ._wait import blocking_call

__all__ = ["Latch"]


class Latch:
    """A count-down latch (``LATCH.*``, Redisson's ``RCountDownLatch``): it
    opens when its count reaches zero.  ``Latch(client, name)`` (a session
    works too: its client is used).  Waiting is ``LATCH.AWAIT ... BLOCK`` on
    a pooled connection, as lock waits."""

    def __init__(self, client: Any, name: Any) -> None:
        if isinstance(client, SessionCore):
            client = client.client
        self.client = client
        self.name = name
        self.cluster = c.is_cluster(client)

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
        args = c.latch_await_args(self.name, block)
        return blocking_call(self.client, self.cluster, args, block, None, None) is not None
