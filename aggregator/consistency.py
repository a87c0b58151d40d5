"""Consistency post-processing: Norm-Sub, the projection onto the simplex.

Unbiased frequency estimates can be negative and need not sum to 1.  Norm-Sub
(Wang et al. 2020) repeatedly zeroes the negative entries and subtracts a
common amount from the positive ones until the result is a distribution; its
fixed point is the Euclidean projection onto the probability simplex.  The
result is biased, so it is always a separate, labelled output.

>>> [round(float(x), 12) for x in norm_sub([0.7, 0.5, -0.1])]
[0.6, 0.4, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["norm_sub", "simplex_projection"]


def norm_sub(
    values: Sequence[float] | npt.NDArray[Any], total: float = 1.0, max_iter: int = 10_000
) -> npt.NDArray[np.float64]:
    """Iterated Norm-Sub: >= 0 and summing to ``total``."""
    x = np.asarray(values, dtype=np.float64).copy()
    active = np.ones(len(x), dtype=bool)
    for _ in range(max_iter):
        shift = (x[active].sum() - total) / active.sum()
        x[active] -= shift
        negative = active & (x < 0)
        if not negative.any():
            break
        x[negative] = 0.0
        active &= ~negative
    x[~active] = 0.0
    return x


def simplex_projection(
    values: Sequence[float] | npt.NDArray[Any], total: float = 1.0
) -> npt.NDArray[np.float64]:
    """argmin ||y - values||_2 over {y >= 0, sum y = total} (sort-based, exact)."""
    x = np.asarray(values, dtype=np.float64)
    ordered = np.sort(x)[::-1]
    cumulative = np.cumsum(ordered) - total
    ranks = np.arange(1, len(x) + 1)
    rho = np.flatnonzero(ordered - cumulative / ranks > 0)[-1]
    theta = cumulative[rho] / (rho + 1)
    return np.asarray(np.maximum(x - theta, 0.0), dtype=np.float64)
