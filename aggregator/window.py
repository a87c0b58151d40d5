"""Read a window of epochs [start, end) through the store and sum it.

The store keeps one tally vector per (metric, version, epoch, shard) and its
read side already sums the shards; here the epochs of the window are summed
too, and each epoch is kept apart for the per-epoch series.  Reading is the
only thing this module does to Redis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ldp_core.metric import MetricSpec

__all__ = ["TallyReader", "WindowTallies", "WindowTooLarge", "read_window", "select_epochs"]


class TallyReader(Protocol):
    """The read side of ``collector.store.Store`` that the aggregator uses."""

    async def epochs_with_data(self, spec: MetricSpec) -> list[int]: ...

    async def read_tallies(
        self, spec: MetricSpec, epochs: Sequence[int]
    ) -> Mapping[int, tuple[Sequence[int], int]]: ...


class WindowTooLarge(ValueError):
    """The window holds more epochs with data than the server reads at once."""


@dataclass(frozen=True)
class WindowTallies:
    """Tallies of a window: the sum, and each epoch with data on its own."""

    start: int | None
    end: int | None
    epochs: tuple[int, ...]
    total: tuple[int, ...]
    n: int
    per_epoch: tuple[tuple[int, tuple[int, ...], int], ...]


def select_epochs(epochs: Sequence[int], start: int | None, end: int | None) -> list[int]:
    """The epochs in [start, end), sorted; ``None`` leaves a side open.

    >>> select_epochs([5, 3, 9, 7], 4, 9)
    [5, 7]
    """
    return sorted(
        e for e in set(epochs) if (start is None or e >= start) and (end is None or e < end)
    )


async def read_window(
    reader: TallyReader,
    spec: MetricSpec,
    start: int | None,
    end: int | None,
    max_epochs: int,
) -> WindowTallies:
    """Sum the tallies of every epoch with data in [start, end)."""
    epochs = select_epochs(await reader.epochs_with_data(spec), start, end)
    if len(epochs) > max_epochs:
        raise WindowTooLarge(
            f"the window holds {len(epochs)} epochs with data; at most {max_epochs} are read "
            "at once: narrow start/end"
        )
    size = spec.build().num_counters
    total = [0] * size
    n = 0
    rows: list[tuple[int, tuple[int, ...], int]] = []
    found = await reader.read_tallies(spec, epochs) if epochs else {}
    for epoch in epochs:
        if epoch not in found:
            continue
        vector, count = found[epoch]
        if len(vector) != size:
            raise ValueError(
                f"epoch {epoch} of {spec.name} v{spec.version} has {len(vector)} counters, "
                f"expected {size}"
            )
        for i, value in enumerate(vector):
            total[i] += int(value)
        n += int(count)
        rows.append((epoch, tuple(int(v) for v in vector), int(count)))
    return WindowTallies(
        start=start,
        end=end,
        epochs=tuple(e for e, _, _ in rows),
        total=tuple(total),
        n=n,
        per_epoch=tuple(rows),
    )
