"""The result of every drift test (``Drift``) and the Monte Carlo thresholds shared by
the simulated ones: the likelihood-ratio test (``aggregator._drift_likelihood``), the
independent-bits test (``aggregator._drift_bits``) and the memoised one
(``aggregator.drift_memo``).  The tests themselves are explained in ``aggregator.drift``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["CHUNK", "MC_MAX_DRAWS", "MC_MAX_WORK", "Drift", "Floats", "Tally"]

Tally = tuple[Sequence[int] | npt.NDArray[Any], int]
Floats = npt.NDArray[np.float64]

#: Monte Carlo calibration when draws x counters x values is at most MC_MAX_WORK
#: and draws x counters (binomial draws, twice) at most MC_MAX_DRAWS: the work of
#: one request, in a worker thread; past them the normal thresholds apply.
MC_MAX_WORK = 1 << 28
MC_MAX_DRAWS = 1 << 22
#: Draws simulated at once (memory: CHUNK x counters integers, twice).
CHUNK = 1000


@dataclass(frozen=True, eq=False)
class Drift:
    """Per-value z of the latest epoch, and the thresholds a rise or a fall must pass."""

    z: Floats
    rise_threshold: float
    fall_threshold: float
    method: str


def _seed(*vectors: npt.NDArray[Any]) -> int:
    """A seed from the data: the same window always gets the same answer."""
    h = hashlib.blake2b(digest_size=8)
    for v in vectors:
        h.update(np.ascontiguousarray(v, dtype=np.int64).tobytes())
    return int.from_bytes(h.digest(), "big")


def _order_threshold(maxima: Floats, alpha: float) -> float:
    """The r-th largest of B simulated maxima, r = floor(alpha (B + 1)): T above it
    has Monte Carlo p-value (1 + #{T* >= T}) / (B + 1) <= alpha."""
    r = int(alpha * (len(maxima) + 1) + 1e-9)
    if r < 1:
        raise ValueError(f"{len(maxima)} draws are too few for alpha = {alpha!r}")
    return float(np.sort(maxima)[-r])


def _monte_carlo(
    z: Floats,
    pair: Callable[[int], tuple[Floats, Floats]],
    stat: Callable[[Floats, Floats], Floats],
    alpha_rise: float,
    alpha_fall: float,
    draws: int,
    method: str,
) -> Drift:
    """Thresholds of max_v z and max_v -z from ``draws`` simulated (latest, earlier) pairs."""
    tops, bottoms = [], []
    for start in range(0, draws, CHUNK):
        now, before = pair(min(CHUNK, draws - start))
        zs = stat(now, before)
        tops.append(zs.max(axis=1))
        bottoms.append((-zs).max(axis=1))
    return Drift(
        z=z,
        rise_threshold=_order_threshold(np.concatenate(tops), alpha_rise),
        fall_threshold=-_order_threshold(np.concatenate(bottoms), alpha_fall),
        method=method,
    )
