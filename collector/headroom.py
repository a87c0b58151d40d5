"""Redis memory headroom: whether the store is near its ``maxmemory``, read off the hot path.

Under ``noeviction`` a full Redis refuses every write (OOM), and the collector's
/readyz used to stay 200 meanwhile.  ``Headroom.watch`` (a task of the app's
lifespan) reads ``INFO memory`` once per ``interval`` seconds; requests only
read the result (``low``): /readyz answers 503 ``store_memory_low`` and the
token issuer registers no new install while ``used_memory`` is above
``LDP_REDIS_MEMORY_HIGH_SHARE`` of ``maxmemory`` (of a cluster: the node nearest
its cap).  No cap (``maxmemory`` 0), or a Redis that does not answer, is not
"low" (/readyz reports the latter on its own).

>>> h = Headroom(share=0.9)
>>> h.update(used=95.0, cap=100.0); h.low
True
>>> h.update(used=95.0, cap=0.0); h.low
False
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import redis.exceptions

from ldp_server.telemetry import redis_memory

__all__ = ["Headroom"]


@dataclass
class Headroom:
    """The last ``INFO memory`` reading of one worker, and the share it is held to."""

    share: float
    interval: float = 1.0
    used: float = math.nan
    cap: float = math.nan

    @property
    def low(self) -> bool:
        """used_memory is above ``share`` of a set maxmemory (False when unknown)."""
        return self.share < 1.0 and self.cap > 0 and self.used > self.share * self.cap

    def update(self, used: float, cap: float) -> None:
        self.used, self.cap = used, cap

    async def read(self, client: Any) -> None:
        """One ``INFO memory`` (unknown, NaN, if Redis does not answer)."""
        try:
            self.update(*redis_memory(await client.info("memory")))
        except (redis.exceptions.RedisError, OSError, KeyError, ValueError, TypeError):
            self.update(math.nan, math.nan)

    async def watch(self, client: Any) -> None:
        """Read every ``interval`` seconds until cancelled (the lifespan's end)."""
        while True:
            await self.read(client)
            await asyncio.sleep(self.interval)
