"""The read side, used by the aggregator: tallies summed over shards, and flags.

>>> await store.read_tallies(spec, [20421])                     # doctest: +SKIP
{20421: ([0, 0, 0, 1], 1)}
>>> await store.read_flags(spec, [20421])                       # doctest: +SKIP
{20421: 0}
"""

from __future__ import annotations

from collections.abc import Iterable

from collector.store.base import StoreBase
from collector.store.schema import as_text, implausible_key, index_key, tally_tag
from ldp_core.metric import MetricSpec

__all__ = ["ReadSide"]


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

    async def read_tallies(
        self, spec: MetricSpec, epochs: Iterable[int]
    ) -> dict[int, tuple[list[int], int]]:
        """epoch -> (tally vector summed over shards, report count); empty epochs omitted."""
        wanted = set(epochs)
        slots = [(e, s) for e, s in await self._slots(spec) if e in wanted]
        if not slots:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for epoch, shard in slots:
            pipe.hgetall(f"{tally_tag(spec, epoch, shard)}:t")
        size = spec.build().num_counters
        out: dict[int, tuple[list[int], int]] = {}
        for (epoch, _), fields in zip(slots, await pipe.execute(), strict=True):
            if not fields:
                continue
            vector, n = out.get(epoch, ([0] * size, 0))
            for key, value in fields.items():
                if key == b"n":
                    n += int(value)
                else:
                    vector[int(key)] += int(value)
            out[epoch] = (vector, n)
        return {e: out[e] for e in sorted(out) if out[e][1] > 0}
