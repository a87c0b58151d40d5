"""Read a window of epochs [start, end) through the store and sum it.

The store keeps one tally vector per (metric, version, epoch, shard) and its
read side already sums the shards; here the epochs of the window are summed
too, one epoch in memory at a time, and only the epochs asked for (a series
page, the robust estimate) are kept apart.  Reading is the only thing this
module does to Redis; what a request may read is bounded by the caller
(``aggregator.paging``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ldp_core.metric import MetricSpec

__all__ = [
    "TallyReader",
    "WindowTallies",
    "WindowTooLarge",
    "epochs_in_window",
    "read_window",
    "select_epochs",
]

Vector = npt.NDArray[np.int64]


class TallyReader(Protocol):
    """The read side of ``collector.store.Store`` that the aggregator uses."""

    async def epochs_with_data(self, spec: MetricSpec) -> list[int]: ...

    def read_vectors(
        self, spec: MetricSpec, epochs: Iterable[int]
    ) -> AsyncIterator[tuple[int, Vector, int]]: ...

    async def read_counts(self, spec: MetricSpec, epochs: Iterable[int]) -> dict[int, int]: ...


class WindowTooLarge(ValueError):
    """The window holds more epochs with data than the server reads at once."""


@dataclass(frozen=True, eq=False)
class WindowTallies:
    """Tallies of the epochs read: the sum, the latest epoch, and the epochs kept.

    ``epochs`` are those with reports; ``kept`` holds (epoch, vector, n) of the
    epochs asked to be kept, in order; ``latest`` the last epoch read.
    """

    epochs: tuple[int, ...]
    total: Vector
    n: int
    latest: tuple[Vector, int] | None
    kept: tuple[tuple[int, Vector, int], ...]


def select_epochs(epochs: Sequence[int], start: int | None, end: int | None) -> list[int]:
    """The epochs in [start, end), sorted; ``None`` leaves a side open.

    >>> select_epochs([5, 3, 9, 7], 4, 9)
    [5, 7]
    """
    return sorted(
        e for e in set(epochs) if (start is None or e >= start) and (end is None or e < end)
    )


async def epochs_in_window(
    reader: TallyReader, spec: MetricSpec, start: int | None, end: int | None, max_epochs: int
) -> list[int]:
    """The epochs with data in [start, end), sorted; WindowTooLarge past ``max_epochs``."""
    epochs = select_epochs(await reader.epochs_with_data(spec), start, end)
    if len(epochs) > max_epochs:
        raise WindowTooLarge(
            f"the window holds {len(epochs)} epochs with data; at most {max_epochs} are read "
            "at once: narrow start/end"
        )
    return epochs


async def read_window(
    reader: TallyReader, spec: MetricSpec, epochs: Sequence[int], keep: Collection[int] = ()
) -> WindowTallies:
    """Sum the tallies of ``epochs``; keep the vectors of the epochs in ``keep``."""
    size = spec.build().num_counters
    total = np.zeros(size, dtype=np.int64)
    n = 0
    found: list[int] = []
    kept: list[tuple[int, Vector, int]] = []
    latest: tuple[Vector, int] | None = None
    async for epoch, vector, count in reader.read_vectors(spec, epochs):
        if len(vector) != size:
            raise ValueError(
                f"epoch {epoch} of {spec.name} v{spec.version} has {len(vector)} counters, "
                f"expected {size}"
            )
        total += vector
        n += count
        found.append(epoch)
        latest = (vector, count)
        if epoch in keep:
            kept.append((epoch, vector, count))
    return WindowTallies(tuple(found), total, n, latest, tuple(kept))

