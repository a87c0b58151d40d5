"""The two-level Piecewise mean: alpha-point rounding, a memoised cell, a fresh resample.

A numeric value reported every epoch must not average its noise away, and a
value that drifts a little must not buy a fresh permanent response each time.
As in Ding, Kulkarni and Yekhanin (NeurIPS 2017), the value is rounded with a
*permanent* random offset before it is memoised:

1. alpha-point rounding.  Once per metric the device derives a secret offset
   alpha, a uniform 32-bit word from HMAC_DRBG(HMAC(secret, OFFSET_LABEL |
   context)) (``memo.offset_seed``).  With s = (x - lo)/(hi - lo) k,
   j = floor(s) and T = ceil(frac(s) 2**32) (``_grid.round_input``), x goes to
   grid point j + [alpha < T].  Over devices alpha is uniform, so
   P[j + 1] = T / 2**32, the one-level Piecewise's rounding law.  For one
   device the grid point is a function of x: a value held fixed is one point,
   and a value drifting within one grid step (hi - lo)/k visits at most two.
2. Permanent level.  B' = the Piecewise cell of grid point j at epsilon_inf
   (``PiecewiseMean.cell_of`` with u uniform in [0, D) from the HMAC_DRBG of
   (secret, context, j)): memoised per grid point, never stored.
3. Instantaneous level.  Each report keeps B' with probability K / 2**32,
   else it is a cell uniform over all M; both draws are made every time.

Exact composed channel.  With (a1, b1) the permanent level's cell
probabilities inside and outside the block, and kappa = K / 2**32,

    a* = kappa a1 + (1 - kappa)/M,      b* = kappa b1 + (1 - kappa)/M,

and L a* + (M - L) b* = 1: one report is again a grid Piecewise channel with
the same block, so the one-level hooks (``PiecewiseHooks``) serve it with
(a*, b*).  eps_1 = ln(a*/b*) rounded up; K is the largest integer with
eps_1 <= epsilon (``TwoLevel.solve_keep``).

Lifetime.  Every report about grid point j is a post-processing of
(alpha, B'_j), and P[B'_j = c | x] = sum_j P[j | x] P1(c | j) mixes rows whose
ratio is at most a1/b1 = A/B: epsilon_inf per device, per metric, per grid
point visited, where memoising the exact value would spend it per distinct
float.

Window variance.  E[y | B'] = kappa y*(B') + const, and y*(c) is affine in c
with slope (2/k)/(kappa g1), so kappa y*(c) and the permanent level's y1(c)
differ by a constant: two reports of one device and value covary by
Var(y1(B')) = V1(t), the permanent level's one-report variance.  Reports of
other values may share the device's offset (and its cell, on the same grid
point); whatever they share, E[y_r | alpha, the cells] = y1(B'_r) + const has
variance V1(t_r), so by Cauchy-Schwarz Cov(y_r, y_s) <= (V1(t_r) + V1(t_s))/2.
With at most T reports per device, whatever its values and participation,
Var[window mean] <= mean over reports of [V*(t) + (T - 1) V1(t)] / n
(``window_mean_variance``), the bound the other two-level metrics use.

Block width.  The permanent level's block L is chosen for the pair
(eps_1, eps_inf): it minimises the worst-case variance of one device's mean
over ``WINDOW`` epochs, max_t [V*(t) + (W - 1) V1(t)] / W.  The one-level
optimum for eps_inf (a narrow block) leaves one report with almost no signal
after the resample (V* = 80 at eps_1 = 1, eps_inf = 8, against 6.1 here).

>>> import random
>>> from ldp_core import longitudinal
>>> m = longitudinal("piecewise", epsilon=1.0, epsilon_inf=4.0, lo=0.0, hi=10.0)
>>> m.epsilon <= 1.0 and m.permanent.epsilon_actual <= 4.0
True
>>> secret = bytes(range(32))
>>> m.permanent_response(2.5, secret, "latency/1") == m.permanent_response(2.5, secret, "latency/1")
True
>>> m.grid_point(2.5, secret, "latency/1")             # 2.5 is grid point 64 of 256
64
>>> 0 <= m.randomize_memoised(2.5, secret, "latency/1", random.Random(0)) < m.num_counters
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng, words
from ldp_core.base import Mechanism, Report, need
from ldp_core.epsilon import log_up
from ldp_core.mechanisms._grid import round_input
from ldp_core.mechanisms._two_level import TwoLevel
from ldp_core.mechanisms.piecewise import (
    GRID,
    PiecewiseHooks,
    PiecewiseMean,
    _quadratic,
    _ratio,
    _tally_variance,
    _worst,
)
from ldp_core.memo import HmacDrbg, offset_seed, permanent_seed

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MECHANISMS", "WINDOW", "LongitudinalPiecewise", "block_width"]

#: The window (epochs) the block width is tuned for: a month of daily reports.
WINDOW = 30

Quad = tuple[float, float, float]


def _combine(star: Quad, permanent: Quad, epochs: int) -> Quad:
    """V* + (T - 1) V1, coefficient by coefficient."""
    return tuple(s + (epochs - 1) * p for s, p in zip(star, permanent, strict=True))  # type: ignore[return-value]


def _compose(a1: Fraction, b1: Fraction, m: int, keep: int) -> tuple[Fraction, Fraction]:
    """(a*, b*) of keep-or-resample over M = ``m`` cells (module docstring)."""
    kappa = Fraction(keep, WORD)
    return kappa * a1 + (1 - kappa) / m, kappa * b1 + (1 - kappa) / m


@lru_cache(maxsize=256)
def block_width(epsilon: float, epsilon_inf: float, k: int = GRID) -> int:
    """The block L minimising the worst case of (V* + (W - 1) V1) / W, W = ``WINDOW``.

    A design choice only (the privacy comes from the exact thresholds built
    after it): kappa is solved here in floats, then exactly by ``solve_keep``.
    """
    e1 = math.exp(epsilon)
    best: tuple[float, int] | None = None
    for cells in range(1, k):
        m = k + cells
        a, b = _ratio(epsilon_inf, m)
        d = cells * a + k * b
        a1, b1 = a / d, b / d
        # (kappa a1 + (1 - kappa)/M) = e1 (kappa b1 + (1 - kappa)/M), solved for kappa.
        kappa = min((e1 - 1) / m / (a1 - e1 * b1 + (e1 - 1) / m), 1.0)
        star = _quadratic(k, cells, Fraction(kappa * a1 + (1 - kappa) / m),
                          Fraction(kappa * b1 + (1 - kappa) / m))
        window = _combine(star, _quadratic(k, cells, a, b), WINDOW)
        worst = _worst(k, tuple(c / WINDOW for c in window))  # type: ignore[arg-type]
        if best is None or worst < best[0]:
            best = (worst, cells)
    assert best is not None
    return best[1]


@dataclass(frozen=True)
class LongitudinalPiecewise(PiecewiseHooks, TwoLevel[PiecewiseMean]):
    """alpha-point rounding, a permanent Piecewise cell at eps_inf, then keep or resample."""

    name: ClassVar[str] = "piecewise"
    base_class: ClassVar[type[Mechanism]] = PiecewiseMean

    @classmethod
    def _permanent_for(
        cls, epsilon: float, epsilon_inf: float, params: dict[str, Any]
    ) -> PiecewiseMean:
        lo, hi = (need(params, what, cls.name) for what in ("lo", "hi"))
        return PiecewiseMean(epsilon_inf, lo, hi, GRID, cells=block_width(epsilon, epsilon_inf))

    # -- the levels (TwoLevel) ----------------------------------------------------------

    @staticmethod
    def _compose(base: PiecewiseMean, keep: int) -> tuple[Fraction, Fraction]:
        a1, b1 = base.channel
        return _compose(a1, b1, base.num_counters, keep)

    @staticmethod
    def _epsilon_of(base: PiecewiseMean, channel: tuple[Fraction, Fraction]) -> float:
        # Every input's law over the M cells is a mixture of grid rows, each a* on its
        # block and b* elsewhere, so two inputs differ cell by cell by at most a*/b*.
        a, b = channel
        return log_up(a / b)

    @staticmethod
    def _lowest_keep(base: PiecewiseMean) -> int:
        return 0  # kappa = 0: a* = b* = 1/M, every report uniform

    def _instant(self, permanent: Report, rng: Rng) -> int:
        assert isinstance(permanent, int)
        kept = rng.getrandbits(32) < self.keep
        other = rng.randrange(self.num_counters)
        return permanent if kept else other

    def _instant_batch(self, permanent: Any, gen: Any) -> Any:
        import numpy as np

        kept = words(gen, len(permanent)) < self.keep
        other = gen.integers(0, self.num_counters, size=len(permanent), dtype=np.int64)
        return np.where(kept, permanent, other)

    # -- the family's parameters, from the permanent level -----------------------------

    @property
    def lo(self) -> float:  # type: ignore[override]
        return self.base.lo

    @property
    def hi(self) -> float:  # type: ignore[override]
        return self.base.hi

    @property
    def k(self) -> int:  # type: ignore[override]
        return self.base.k

    @property
    def cells(self) -> int:  # type: ignore[override]
        return self.base.cells

    # -- memoisation with alpha-point rounding ------------------------------------------

    def grid_point(self, value: object, secret: bytes, context: str) -> int:
        """The grid point this device rounds ``value`` to: the key of its memoised cell."""
        j, threshold = round_input(self.check_value(value), self.lo, self.hi, self.k)
        alpha = HmacDrbg(offset_seed(secret, context)).getrandbits(32)
        return j + int(alpha < threshold)

    def memo_key(self, value: object, secret: bytes, context: str) -> int:
        """The grid point: the SDK's lifetime ledger charges eps_inf once per point."""
        return self.grid_point(value, secret, context)

    def permanent_response(self, value: object, secret: bytes, context: str) -> Report:
        """B': the permanent cell of this device's grid point for ``value``."""
        j = self.grid_point(value, secret, context)
        u = HmacDrbg(permanent_seed(secret, context, j)).randrange(self.base.total)
        return self.base.cell_of(j, u)

    # -- windows -----------------------------------------------------------------------

    def window_mean_variance(
        self, tallies: Sequence[int] | npt.NDArray[np.int64], n: int, epochs: int
    ) -> float:
        """Upper bound on Var of the mean over a window of ``epochs`` epochs (module
        docstring), estimated from the window's summed tallies."""
        evaluate = _combine(self.quadratic(), self.base.quadratic(), epochs)
        return _tally_variance(self.t_values(), self.quadratic(), tallies, n, evaluate) * (
            (self.hi - self.lo) / 2
        ) ** 2

    def window_unit_variance(self, epochs: int) -> float:
        """The exact worst case over values of (V* + (T - 1) V1) / T, on the z scale."""
        window = _combine(self.grid_quadratic(), self.base.grid_quadratic(), epochs)
        return _worst(self.k, tuple(c / epochs for c in window)) / 4  # type: ignore[arg-type]

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "rounding": "alpha-point", "block": self.cells}

    def unit_text(self) -> str:
        return (
            f"eps_1={self.epsilon:.4g} per device, per metric, per report; "
            f"eps_inf={self.epsilon_inf:.4g} per device, per metric, per grid point visited "
            f"(alpha-point rounding to {self.k + 1} points: a value held fixed is one), lifetime"
        )


MECHANISMS: tuple[type[Mechanism], ...] = (LongitudinalPiecewise,)
