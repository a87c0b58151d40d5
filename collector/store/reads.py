"""The read side, used by the aggregator: tallies summed over shards, and flags.

>>> await store.read_tallies(spec, [20421])                     # doctest: +SKIP
{20421: ([0, 0, 0, 1], 1)}
>>> async for epoch, vector, n in store.read_vectors(spec, [20421]):  # doctest: +SKIP
...     print(epoch, vector.tolist(), n)
20421 [0, 0, 0, 1] 1
>>> await store.read_counts(spec, [20421])                      # doctest: +SKIP
{20421: 1}

Cost.  redis-py parses replies in pure Python (about 9 microseconds a value
here) on the event loop, so a tally is read in slices: one round trip asks
``HMGET`` of at most ``READ_SLICE`` counters, and the loop is never held
longer than one slice's parse (about 40 ms), whatever the metric.  A window
costs (counters x epochs x shards) values; the aggregator bounds it per
request (``LDP_MAX_READ_COUNTERS``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import numpy as np
import numpy.typing as npt

from collector.store.base import StoreBase
from collector.store.schema import as_text, implausible_key, index_key, tally_tag
from ldp_core.metric import MetricSpec

__all__ = ["READ_SLICE", "ReadSide"]

#: Counters asked per round trip (see the module docstring).
READ_SLICE = 4096


class ReadSide(StoreBase):
    """Epochs with data, tallies and poisoning flags of a metric version."""

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
        wanted = set(epochs)
        slots = [(e, s) for e, s in await self._slots(spec) if e in wanted]
        if not slots:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for epoch, shard in slots:
            pipe.hget(f"{tally_tag(spec, epoch, shard)}:t", "n")
        out: dict[int, int] = {}
        for (epoch, _), n in zip(slots, await pipe.execute(), strict=True):
            out[epoch] = out.get(epoch, 0) + int(n or 0)
        return {e: out[e] for e in sorted(out) if out[e] > 0}

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
                key = f"{tally_tag(spec, epoch, shard)}:t"
                n += int(await self.client.hget(key, "n") or 0)
                for lo in range(0, size, READ_SLICE):
                    hi = min(lo + READ_SLICE, size)
                    values = await self.client.hmget(key, [str(i) for i in range(lo, hi)])
                    vector[lo:hi] += np.array([int(v or 0) for v in values], dtype=np.int64)
            if n > 0:
                yield epoch, vector, n

    async def read_tallies(
        self, spec: MetricSpec, epochs: Iterable[int]
    ) -> dict[int, tuple[list[int], int]]:
        """epoch -> (tally vector summed over shards, report count); empty epochs omitted."""
        return {
            epoch: ([int(x) for x in vector], n)
            async for epoch, vector, n in self.read_vectors(spec, epochs)
        }
