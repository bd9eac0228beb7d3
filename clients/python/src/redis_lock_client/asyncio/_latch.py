"""The asyncio :class:`Latch`, the threaded one's twin: it needs no
session, only the client; its wait is the core's (``_wait``)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from .. import _common as c
from ._core import SessionCore
from ._wait import blocking_call

__all__ = ["Latch"]


class Latch:
    """The asyncio count-down latch (see the sync ``Latch``)."""

    def __init__(self, client: Any, name: Any) -> None:
        if isinstance(client, SessionCore):
            client = client.client
        self.client = client
        self.name = name
        self.cluster = c.is_cluster(client)

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
        args = c.latch_await_args(self.name, block)
        return await blocking_call(self.client, self.cluster, args, block, None, None) is not None
