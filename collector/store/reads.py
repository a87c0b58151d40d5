"""The read side, used by the aggregator: tallies summed over shards, and flags.

>>> await store.read_tallies(spec, [20421])                     # doctest: +SKIP
{20421: ([0, 0, 0, 1], 1)}
>>> async for epoch, vector, n in store.read_vectors(spec, [20421]):  # doctest: +SKIP
...     print(epoch, vector.tolist(), n)
20421 [0, 0, 0, 1] 1
>>> await store.read_counts(spec, [20421])                      # doctest: +SKIP
{20421: 1}
>>> await store.read_stored(spec, [20421])                      # doctest: +SKIP
{20421: 1}

Cost.  A tally is read in slices: one round trip is a script (``SCAN_LUA``)
that runs an ``HSCAN`` of about ``READ_SLICE`` counters and packs them into
one binary string of (index, value) int64 pairs, which numpy reads whole.
redis-py parses a plain HSCAN reply in pure Python, about 9 microseconds a
field: a week of a string metric at 10^5 reports a day (657,874 fields) took
6.57 s of aggregator CPU that way, 0.45 s packed
(``benchmarks/bench_read_cost.py``).  Redis is held one slice at a time, so
reports keep arriving during a long read.  Only counters that were ever set
travel (a sparse shard is cheap).  HSCAN may return a field twice when the
hash grows during the scan (the current epoch takes reports meanwhile): each
field *sets* its counter, so a repeat counts once.  A window costs the
counters stored in its epochs (``read_stored``: one HLEN per slot, one round
trip); the aggregator bounds it per request (``LDP_MAX_READ_COUNTERS``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from collector.store.base import StoreBase
from collector.store.schema import as_text, implausible_key, index_key, tally_tag
from ldp_core.metric import MetricSpec

__all__ = ["READ_SLICE", "SCAN_LUA", "ReadSide"]

#: Counters asked per round trip (the COUNT of HSCAN; see the module docstring).
READ_SLICE = 2048

# KEYS[1] a tally hash, ARGV[1] the HSCAN cursor, ARGV[2] its COUNT.  Returns the
# next cursor, the counters of the slice packed as little-endian int64 pairs
# (index, value), and the report count "n" if the slice holds it (else false).
SCAN_LUA = """
local r = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local fields, out, n = r[2], {}, false
for i = 1, #fields, 2 do
  local index = tonumber(fields[i])
  if index then
    out[#out + 1] = struct.pack('<i8<i8', index, tonumber(fields[i + 1]))
  else
    n = fields[i + 1]
  end
end
return {r[1], table.concat(out), n}
"""


class ReadSide(StoreBase):
    """Epochs with data, tallies and poisoning flags of a metric version."""

    _scan_script: Any = None

    async def read_flags(self, spec: MetricSpec, epochs: Iterable[int]) -> dict[int, int]:
        """epoch -> number of distinct reports refused as implausible_report (0 if none)."""
        wanted = sorted(set(epochs))
        if not wanted:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for epoch in wanted:
            pipe.scard(implausible_key(spec.name, spec.version, epoch))
        counts = await pipe.execute()
        return {epoch: int(c) for epoch, c in zip(wanted, counts, strict=True)}

    async def _slots(self, spec: MetricSpec) -> list[tuple[int, int]]:
        members = await self.client.smembers(index_key(spec.name, spec.version))
        pairs = []
        for m in members:
            epoch, _, shard = as_text(m).partition(":")
            pairs.append((int(epoch), int(shard)))
        return sorted(pairs)

    async def epochs_with_data(self, spec: MetricSpec) -> list[int]:
        """Epochs of this metric version that hold at least one accepted report."""
        return sorted({epoch for epoch, _ in await self._slots(spec)})

    async def read_counts(self, spec: MetricSpec, epochs: Iterable[int]) -> dict[int, int]:
        """epoch -> number of reports (one small read per shard; no counter is read)."""
        counts = await self._per_slot(spec, epochs, lambda pipe, key: pipe.hget(key, "n"))
        return {e: n for e, n in counts.items() if n > 0}

    async def read_stored(self, spec: MetricSpec, epochs: Iterable[int]) -> dict[int, int]:
        """epoch -> counters stored over its shards (what a read of it parses), without
        reading them: one pipelined HLEN per slot.  Epochs without a slot are left out."""
        # Every field but the report count "n" is a counter.
        return await self._per_slot(spec, epochs, lambda pipe, key: pipe.hlen(key), less=1)

    async def _per_slot(
        self, spec: MetricSpec, epochs: Iterable[int], ask: Callable[[Any, str], Any],
        less: int = 0,
    ) -> dict[int, int]:
        """epoch -> the sum over its slots of one small pipelined read of each tally hash
        (``ask(pipe, key)``), minus ``less`` per slot (never below 0), epochs ascending."""
        wanted = set(epochs)
        slots = [(e, s) for e, s in await self._slots(spec) if e in wanted]
        if not slots:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for epoch, shard in slots:
            ask(pipe, f"{tally_tag(spec, epoch, shard)}:t")
        out: dict[int, int] = {}
        for (epoch, _), value in zip(slots, await pipe.execute(), strict=True):
            out[epoch] = out.get(epoch, 0) + max(0, int(value or 0) - less)
        return dict(sorted(out.items()))

    async def read_vectors(
        self, spec: MetricSpec, epochs: Iterable[int]
    ) -> AsyncIterator[tuple[int, npt.NDArray[np.int64], int]]:
        """(epoch, tally vector summed over shards, report count), one epoch at a time in
        ascending order; epochs without reports are left out.  Holds one epoch in memory."""
        wanted = set(epochs)
        by_epoch: dict[int, list[int]] = {}
        for epoch, shard in await self._slots(spec):
            if epoch in wanted:
                by_epoch.setdefault(epoch, []).append(shard)
        size = spec.build().num_counters
        for epoch in sorted(by_epoch):
            vector = np.zeros(size, dtype=np.int64)
            n = 0
            for shard in by_epoch[epoch]:
                part, count = await self._scan_tally(f"{tally_tag(spec, epoch, shard)}:t", size)
                vector += part
                n += count
            if n > 0:
                yield epoch, vector, n

    async def _scan_tally(self, key: str, size: int) -> tuple[npt.NDArray[np.int64], int]:
        """One shard's counters and report count, read in HSCAN slices."""
        if self._scan_script is None:
            self._scan_script = self.client.register_script(SCAN_LUA)
        vector = np.zeros(size, dtype=np.int64)
        n = 0
        cursor = 0
        while True:
            next_cursor, packed, count = await self._scan_script(
                keys=[key], args=[cursor, READ_SLICE]
            )
            pairs = np.frombuffer(packed, dtype="<i8").reshape(-1, 2)
            vector[pairs[:, 0]] = pairs[:, 1]
            if count:
                n = int(count)
            cursor = int(next_cursor)
            if not cursor:
                return vector, n

    async def read_tallies(
        self, spec: MetricSpec, epochs: Iterable[int]
    ) -> dict[int, tuple[list[int], int]]:
        """epoch -> (tally vector summed over shards, report count); empty epochs omitted."""
        return {
            epoch: ([int(x) for x in vector], n)
            async for epoch, vector, n in self.read_vectors(spec, epochs)
        }
