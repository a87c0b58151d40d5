"""Shared parts of the grid-output mean mechanisms (Piecewise, Hybrid).

A value x in [lo, hi] maps to t = 2 (x - lo)/(hi - lo) - 1 in [-1, 1] and is
first rounded at random to the input grid t_j = -1 + 2 j / k (j = 0..k): with
s = (x - lo)/(hi - lo) * k in IEEE doubles (the device and numpy compute the
same bits), j = floor(s) and the report uses j + 1 with probability
ceil(frac(s) 2**32) / 2**32.  The rounding is a pre-processing of the true
value, so it costs no privacy; it is unbiased to within 2**-32 of a grid step
and adds f (1 - f) (2/k)^2 <= 1/k^2 to the variance on the t scale.

Each report increments one counter; ``report_values()`` is the unbiased
estimate of x that each counter stands for, so the mean is a dot product of
the tally with it, and ``mean_variance`` estimates its variance from the
same tally (``Numeric`` in ``ldp_core.capabilities``).

>>> round_input(0.25, 0.0, 1.0, 4)
(1, 0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ldp_core._rng import WORD, Rng

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["mean_variance_from_moments", "round_input", "round_inputs", "segment_max"]


def round_input(value: float, lo: float, hi: float, k: int) -> tuple[int, int]:
    """(j, threshold): the report uses grid point j + 1 iff a 32-bit word < threshold."""
    s = (value - lo) / (hi - lo) * k
    j = min(math.floor(s), k)
    frac = s - j
    threshold = math.ceil(frac * WORD) if j < k else 0
    return j, threshold


def rounded(value: float, lo: float, hi: float, k: int, rng: Rng) -> int:
    """The random grid index of ``value`` (device path)."""
    j, threshold = round_input(value, lo, hi, k)
    return j + int(rng.getrandbits(32) < threshold)


def round_inputs(
    values: npt.NDArray[Any], lo: float, hi: float, k: int, gen: Any
) -> npt.NDArray[np.int64]:
    """``rounded`` over a batch, with the same IEEE arithmetic."""
    import numpy as np

    s = (np.asarray(values, dtype=np.float64) - lo) / (hi - lo) * k
    j = np.minimum(np.floor(s), k).astype(np.int64)
    frac = s - j
    threshold = np.where(j < k, np.ceil(frac * WORD), 0).astype(np.int64)
    up = gen.integers(0, WORD, size=len(j), dtype=np.int64) < threshold
    return j + up  # type: ignore[no-any-return]


def up_probability(value: float, lo: float, hi: float, k: int) -> tuple[int, float]:
    """(j, P[grid point j + 1]) for one value."""
    j, threshold = round_input(value, lo, hi, k)
    return j, threshold / WORD


def segment_max(values: Sequence[float], curvature: Sequence[float]) -> float:
    """max over f in [0, 1] of (1-f) v_j + f v_{j+1} + f (1-f) c_j, over all segments j.

    The per-report variance between two grid points is this concave quadratic in
    the rounding fraction f (``values``: the variance at grid points).
    """
    best = max(values)
    for j in range(len(values) - 1):
        v0, v1, c = values[j], values[j + 1], curvature[j]
        if c <= 0:
            continue
        f = min(max((v1 - v0 + c) / (2 * c), 0.0), 1.0)
        best = max(best, (1 - f) * v0 + f * v1 + f * (1 - f) * c)
    return best


def mean_variance_from_moments(m1: float, m2_raw: float, quad: tuple[float, float, float],
                               n: int, evaluate: tuple[float, float, float] | None = None
                               ) -> float:
    """Var of the mean of t, from the tally moments m1 = mean y, m2_raw = mean y^2.

    The per-report variance at a grid value is v(t) = c0 + c1 t + c2 t^2 (exact at
    grid points; rounding adds <= 1/k^2, ignored), and E[y^2 | t] = v(t) + t^2.
    The mean of v over reports is c0 + c1 mean(t) + c2 mean(t^2): with c2 <= 0 its
    upper bound puts mean(t^2) = mean(t)^2 (Jensen, as for 1BitMean); with c2 > 0
    mean(t^2) is estimated without bias by (m2 - c0 - c1 m1) / (1 + c2), clipped to
    [m1^2, 1].  ``evaluate`` (default ``quad``): another quadratic to average
    instead of v, with mean(t^2) still estimated through the reports' own ``quad``
    (a window of memoised reports: ``piecewise_memo``).

    >>> mean_variance_from_moments(0.0, 2.0, (1.0, 0.0, 0.5), 10)   # mean(t^2) = 2/3
    0.13333333333333333
    """
    c0, c1, c2 = quad
    e0, e1, e2 = quad if evaluate is None else evaluate
    t1 = min(max(m1, -1.0), 1.0)
    t2 = t1 * t1 if e2 <= 0 else min(max((m2_raw - c0 - c1 * m1) / (1 + c2), t1 * t1), 1.0)
    return max(e0 + e1 * t1 + e2 * t2, 0.0) / n
