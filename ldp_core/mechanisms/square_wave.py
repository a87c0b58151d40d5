"""Square Wave (Li et al., SIGMOD 2020) on an integer grid: a whole distribution.

The paper's SW maps v in [0, 1] to a continuous output in [-b, 1 + b], uniform
on the window [v - b, v + b] with density e^eps times that outside it, where

    b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps))

maximises the mutual information between input and output.  Here, as for the
grid Piecewise (``ldp_core.mechanisms.piecewise``, whose sampler and exact
channel it shares), the value is first rounded at random to the grid j = 0..k
(unbiased; ``ldp_core.mechanisms._grid``), and the output is one of
M = k + L cells; grid point j's window is the L cells j..j+L-1 with
L = round(2 b k) clamped to [1, k] (the paper's window width 2b on the grid's
scale).  A report is cell i with probability A/D inside the window and B/D
outside, D = L A + k B, drawn exactly from one uniform integer u in [0, D)
from the OS CSPRNG.  Derivation of epsilon: any two grid points' rows differ
cell by cell by at most A/B (a cell is inside one window and outside the
other, or the same for both), and the rounding is a pre-processing of the
true value, so eps_actual = ln(A/B) rounded up; A is the largest integer with
that <= eps (``piecewise._ratio``: B = 2**32 unless D would pass 2**62).

The exact channel is the (k + 1) x M matrix of integer weights
(``weights``): row j is A on the window, B elsewhere, over the total D.  The
server estimates the distribution of the rounded value on the k + 1 grid
points from the cell tallies by EM with smoothing (``aggregator.distribution``).
Because E[cell | j] is linear in j, the report is also an unbiased mean
(the ``Numeric`` hooks inherited from the grid Piecewise): a square-wave
metric answers the mean, the distribution and its quantiles from one report.

>>> import random
>>> m = SquareWave(epsilon=1.0, lo=0.0, hi=100.0)
>>> m.k, m.cells, m.num_counters          # 2 b k = 32.8 cells in each window
(64, 33, 97)
>>> 0 <= m.randomize(42.0, rng=random.Random(0)) < m.num_counters
True
>>> m.epsilon_actual <= 1.0
True
>>> sum(m.weights(0)) == m.total          # a row of the exact channel
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core.base import Kind, Mechanism, need
from ldp_core.epsilon import check_mechanism_epsilon
from ldp_core.mechanisms._grid import round_inputs
from ldp_core.mechanisms.mean import check_bounds
from ldp_core.mechanisms.piecewise import PiecewiseMean, _ratio

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["GRID", "MECHANISMS", "SquareWave", "window_half_width"]

#: Input grid steps k.  The distribution is estimated on k + 1 grid points: a
#: quantile's resolution is (hi - lo)/k before interpolation, and the server's EM
#: costs O(k^2) per iteration (the bootstrap runs it a few hundred times).
GRID = 64


def window_half_width(epsilon: float) -> float:
    """The paper's b on [0, 1] (mutual-information optimal), about 1/2 as eps -> 0.

    >>> round(window_half_width(1.0), 4), round(window_half_width(4.0), 4)
    (0.2561, 0.0304)
    """
    e = math.exp(epsilon)
    if epsilon < 1e-6:
        return 0.5
    return (epsilon * e - e + 1) / (2 * e * (e - 1 - epsilon))


@lru_cache(maxsize=256)
def layout(epsilon: float, k: int) -> tuple[int, int, int]:
    """(L, A, B): the window's cells and the integer weights inside and outside it."""
    cells = min(k, max(1, round(2 * window_half_width(epsilon) * k)))
    a, b = _ratio(epsilon, k + cells)
    return cells, a, b


@dataclass(frozen=True, init=False)
class SquareWave(PiecewiseMean):
    """Square Wave over [lo, hi] with grid outputs: mean, distribution and quantiles."""

    name: ClassVar[str] = "square_wave"
    kind: ClassVar[Kind] = "mean"
    #: ``auto`` for a mean prefers Piecewise/Hybrid; a spec asking for a
    #: distribution resolves ``auto`` to this class (``ldp_core.metric``).
    auto_candidate: ClassVar[bool] = False

    def __init__(self, epsilon: float, lo: float, hi: float, k: int = GRID) -> None:
        eps = check_mechanism_epsilon(epsilon)
        low, high = check_bounds(lo, hi)
        if isinstance(k, bool) or not isinstance(k, int) or not 4 <= k <= 1024:
            raise ValueError(f"grid steps k must be an integer in [4, 1024], got {k!r}")
        cells, a, b = layout(eps, k)
        for key, value in (("declared_epsilon", eps), ("lo", low), ("hi", high), ("k", k),
                           ("cells", cells), ("a", a), ("b", b)):
            object.__setattr__(self, key, value)

    @classmethod
    def create(cls, params: dict[str, Any]) -> SquareWave:
        epsilon, lo, hi = (need(params, what, cls.name) for what in ("epsilon", "lo", "hi"))
        return cls(epsilon, lo, hi)

    # -- the exact channel ---------------------------------------------------------------

    def weights(self, j: int) -> tuple[int, ...]:
        """Row j of the channel as integer weights over ``total``: P[cell i | grid j]."""
        if not 0 <= j <= self.k:
            raise ValueError(f"grid point {j} is not in [0, {self.k}]")
        return tuple(self.a if j <= i < j + self.cells else self.b
                     for i in range(self.num_counters))

    def transition(self) -> npt.NDArray[np.float64]:
        """The (k + 1) x M matrix P[cell | grid point], from the integer weights."""
        import numpy as np

        rows = np.full((self.k + 1, self.num_counters), float(self.b))
        for j in range(self.k + 1):
            rows[j, j : j + self.cells] = float(self.a)
        return rows / float(self.total)

    def grid_points(self) -> npt.NDArray[np.float64]:
        """The values the k + 1 grid points stand for, lo..hi."""
        import numpy as np

        return np.linspace(self.lo, self.hi, self.k + 1)

    def grid_counts(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.int64]:
        """How many of ``values`` the random rounding puts on each grid point."""
        import numpy as np

        j = round_inputs(self._checked(values), self.lo, self.hi, self.k, gen)
        return np.bincount(j, minlength=self.k + 1)

    def simulate_tallies(
        self, values: npt.NDArray[Any], trials: int, gen: Any
    ) -> npt.NDArray[np.int64]:
        """Round each value, then one multinomial per grid point over its exact row:
        the same law as ``sample`` per report, in O(k M) draws whatever n."""
        import numpy as np

        x = self._checked(values)
        out = np.zeros((trials, self.num_counters), dtype=np.int64)
        rows = self.transition()
        for t in range(trials):
            counts = self.grid_counts(x, gen)
            for j in np.flatnonzero(counts):
                out[t] += gen.multinomial(int(counts[j]), rows[j])
        return out

    def describe(self) -> dict[str, object]:
        # The exact integers, for SDKs in other languages (sdk-js reads them, never
        # recomputes them): a report is ``cell_of(j, u)``, u uniform in [0, window a + grid b).
        return {**Mechanism.describe(self), "grid": self.k, "cells": self.num_counters,
                "window": self.cells, "a": self.a, "b": self.b}


MECHANISMS: tuple[type[Mechanism], ...] = (SquareWave,)
