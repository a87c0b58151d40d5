"""The Piecewise mechanism (Wang et al., ICDE 2019) on an integer grid.

The paper's PM maps t in [-1, 1] to a continuous output in [-C, C], uniform on
a centre interval [l(t), r(t)] of width C - 1 with density e^eps times that
outside it.  Here the output is one of M = k + L cells.  The input is first
rounded at random to the grid j = 0..k (``ldp_core.mechanisms._grid``); grid
point j's centre block is the L cells j..j+L-1.  With integers A > B and
D = L A + (M - L) B, a report is cell i with probability a = A/D inside the
block and b = B/D outside, drawn exactly: u uniform in [0, D) (the OS CSPRNG's
``randrange``); u < L A gives cell j + u // A, else the (u - L A) // B-th cell
outside the block.  Any two inputs' laws differ cell by cell by at most
a/b = A/B, so eps_actual = ln(A/B) rounded up, and A is the largest integer
with that <= eps (B = 2**32, smaller only when eps is so large that D would
pass 2**62).  L minimises the worst-case variance for (eps, k); its fraction
L/M tracks the paper's (C - 1)/(2C).

E[i | j] = c0 + g j with g = (a - b) L, so y(i) = -1 + (2/k)(i - c0)/g is
unbiased for t_j, and for t after the rounding.  Var[y | j] is a quadratic in j
(exact, ``quadratic``); the rounding adds f (1 - f) (2/k)^2.  ``grid_cost()``
is the worst-case variance over the paper's continuous closed form
1/(e^{eps/2} - 1) + (e^{eps/2} + 3)/(3 (e^{eps/2} - 1)^2), minus 1: it is
negative (-1% at eps = 0.5, -32% at eps = 4, -57% at eps = 8), because L is
chosen for the exact worst case rather than the paper's block width C - 1 (the
same observation as Zhao et al.'s PM-SUB, 2020).  What the grid itself costs
is the input rounding, at most (2/k)^2 / 4 = 1/k^2; ``rounding_cost()`` is its
share of the worst case (0.14% at eps = 8, k = 256).

>>> import random
>>> m = PiecewiseMean(epsilon=4.0, lo=0.0, hi=10.0)
>>> 0 <= m.randomize(2.5, rng=random.Random(0)) < m.num_counters
True
>>> m.epsilon_actual <= 4.0, m.grid_cost() < 0.01, m.rounding_cost() < 0.01
(True, True, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng
from ldp_core.base import Design, IntReport, Kind, Mechanism, need
from ldp_core.epsilon import check_mechanism_epsilon, log_up
from ldp_core.mechanisms._grid import (
    mean_variance_from_moments,
    round_inputs,
    rounded,
    segment_max,
    up_probability,
)
from ldp_core.mechanisms.mean import check_bounds

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["GRID", "MECHANISMS", "PiecewiseHooks", "PiecewiseMean", "continuous_pm_variance"]

#: Input grid steps k: the rounding adds at most 1/k^2 to the variance on [-1, 1].
GRID = 256


def continuous_pm_variance(epsilon: float, t: float = 1.0) -> float:
    """The paper's Var[t* | t] of the continuous PM on [-1, 1] (worst case at |t| = 1)."""
    e = math.exp(epsilon / 2)
    return t * t / (e - 1) + (e + 3) / (3 * (e - 1) ** 2)


def _ratio(epsilon: float, cells: int) -> tuple[int, int]:
    """(A, B): the largest A with ln(A/B) rounded up <= eps; D stays below 2**62."""
    b = WORD
    e = math.exp(epsilon)
    while b > 1 and cells * (e + 1) * b >= 1 << 62:
        b //= 2
    a = math.floor(Fraction(e) * b) - 1
    if a > b and log_up(Fraction(a, b)) > epsilon:
        # The largest a' in (b, a) with ln(a'/b) rounded up <= eps, by bisection: the
        # outward slack can sit many units below a when A is large (eps > 10).
        low, high = b, a  # high fails; low is the floor (refused below)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if log_up(Fraction(mid, b)) <= epsilon else (low, mid)
        a = low
    if a <= b:
        raise ValueError(f"epsilon {epsilon} is too small for the piecewise grid")
    return a, b


def _quadratic(k: int, cells: int, a: int | Fraction, b: int | Fraction
               ) -> tuple[float, float, float]:
    """Var[y | j] = v0 + v1 j + v2 j^2 on the t scale, from exact rationals.

    (a, b): the weights of a cell inside and outside the block (normalised here).
    """
    m = k + cells
    d = cells * a + (m - cells) * b
    pa, pb = Fraction(a, d), Fraction(b, d)
    g = (pa - pb) * cells
    c0 = pb * m * (m - 1) / 2 + (pa - pb) * cells * (cells - 1) / 2
    s2 = Fraction((m - 1) * m * (2 * m - 1), 6)
    s2l = Fraction((cells - 1) * cells * (2 * cells - 1), 6)
    q2 = g - g * g
    q1 = (pa - pb) * cells * (cells - 1) - 2 * c0 * g
    q0 = pb * s2 + (pa - pb) * s2l - c0 * c0
    scale = (Fraction(2, k) / g) ** 2
    return float(scale * q0), float(scale * q1), float(scale * q2)


def _worst(k: int, quad: tuple[float, float, float]) -> float:
    v0, v1, v2 = quad
    values = [v0 + v1 * j + v2 * j * j for j in range(k + 1)]
    return segment_max(values, [(2 / k) ** 2] * k)


@lru_cache(maxsize=256)
def _t_values(a: Fraction, b: Fraction, m: int, cells: int, k: int) -> tuple[float, ...]:
    # Exact in Fractions (~10 ms at m = 457), so computed once per channel.
    g = (a - b) * cells
    c0 = b * m * (m - 1) / 2 + (a - b) * cells * (cells - 1) / 2
    return tuple(float(-1 + Fraction(2, k) * (i - c0) / g) for i in range(m))


@lru_cache(maxsize=256)
def design(epsilon: float, k: int = GRID) -> tuple[int, int, int]:
    """(L, A, B) minimising the worst-case variance for (eps, k)."""
    e = math.exp(epsilon / 2)
    c = (e + 1) / (e - 1)
    share = (c - 1) / (2 * c)
    guess = share * k / (1 - share)
    best: tuple[float, int, int, int] | None = None
    for cells in range(max(1, int(guess / 2)), min(k - 1, int(2 * guess) + 3) + 1):
        a, b = _ratio(epsilon, k + cells)
        worst = _worst(k, _quadratic(k, cells, a, b))
        if best is None or worst < best[0]:
            best = (worst, cells, a, b)
    assert best is not None
    return best[1], best[2], best[3]


class PiecewiseHooks(IntReport):
    """The hooks of a grid Piecewise channel, for both levels.

    They read only ``k``, ``cells``, ``lo``, ``hi`` and ``channel`` = (a, b): the
    probabilities of a cell inside and outside the block, so a two-level form
    whose composed channel keeps the block shape reuses them as they are.
    """

    kind: ClassVar[Kind] = "mean"
    lo: float
    hi: float
    k: int
    cells: int

    @property
    def domain_size(self) -> int:
        return 2

    @property
    def num_counters(self) -> int:
        return self.k + self.cells

    @property
    def report_bits(self) -> float:
        return math.log2(self.num_counters)

    def check_value(self, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"value {value!r} is not a number in [{self.lo}, {self.hi}]")
        if not (math.isfinite(value) and self.lo <= value <= self.hi):
            raise ValueError(f"value {value!r} is not in [{self.lo}, {self.hi}]")
        return float(value)

    # -- drivers -----------------------------------------------------------------------

    def _checked(self, values: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        import numpy as np

        x = np.asarray(values, dtype=np.float64)
        if len(x) and (not np.all(np.isfinite(x)) or x.min() < self.lo or x.max() > self.hi):
            raise ValueError(f"true values must lie in [{self.lo}, {self.hi}]")
        return x

    def batch_counters(self, batch: Any) -> npt.NDArray[np.int64]:
        return batch.astype("int64")  # type: ignore[no-any-return]

    def simulate_tallies(
        self, values: npt.NDArray[Any], trials: int, gen: Any
    ) -> npt.NDArray[np.int64]:
        import numpy as np

        x = self._checked(values)
        out = np.zeros((trials, self.num_counters), dtype=np.int64)
        for t in range(trials):
            out[t] = np.bincount(self.sample(x, gen), minlength=self.num_counters)
        return out

    def grid_distribution(self, j: int) -> npt.NDArray[np.float64]:
        """P[cell | grid point j]."""
        import numpy as np

        a, b = (float(x) for x in self.channel)
        row = np.full(self.num_counters, b)
        row[j : j + self.cells] = a
        return row

    def output_distribution(self, value: float) -> npt.NDArray[np.float64]:
        j, f = up_probability(self.check_value(value), self.lo, self.hi, self.k)
        row = (1 - f) * self.grid_distribution(j)
        return row + f * self.grid_distribution(j + 1) if f else row

    def audit_design(self) -> Design:
        # x = hi is grid point k (block k..M-1), x' = lo grid point 0 (block 0..L-1);
        # L < k, so E = {cell >= k} has probabilities L a and L b: ratio a/b.
        a, b = self.channel
        k = self.k
        return Design(self.hi, self.lo, lambda r: isinstance(r, int) and r >= k, lambda c: c >= k,
                      (self.cells * a, self.cells * b))

    # -- the estimator's hooks (``Numeric``) ----------------------------------------------

    def grid_quadratic(self) -> tuple[float, float, float]:
        """Var[y | grid point j] = v0 + v1 j + v2 j^2 on the t scale, exactly."""
        a, b = self.channel
        return _quadratic(self.k, self.cells, a, b)

    def quadratic(self) -> tuple[float, float, float]:
        """Var[y | t] at grid values = c0 + c1 t + c2 t^2 on the t scale."""
        v0, v1, v2 = self.grid_quadratic()
        h = self.k / 2  # j = h (t + 1)
        return v0 + v1 * h + v2 * h * h, v1 * h + 2 * v2 * h * h, v2 * h * h

    def t_values(self) -> tuple[float, ...]:
        """The unbiased estimate of t each cell stands for."""
        a, b = self.channel
        return _t_values(a, b, self.num_counters, self.cells, self.k)

    def report_values(self) -> tuple[float, ...]:
        half = (self.hi - self.lo) / 2
        return tuple(self.lo + (y + 1) * half for y in self.t_values())

    def t_variance(self, value: float) -> float:
        """Exact Var[y | value] on the t scale, rounding included."""
        v0, v1, v2 = self.grid_quadratic()
        j, f = up_probability(self.check_value(value), self.lo, self.hi, self.k)
        at = [v0 + v1 * i + v2 * i * i for i in (j, j + 1)]
        return (1 - f) * at[0] + f * at[1] + f * (1 - f) * (2 / self.k) ** 2

    def value_variance(self, value: float) -> float:
        return self.t_variance(value) * ((self.hi - self.lo) / 2) ** 2

    def mean_variance(self, tallies: Sequence[int] | npt.NDArray[np.int64], n: int) -> float:
        return _tally_variance(self.t_values(), self.quadratic(), tallies, n) * (
            (self.hi - self.lo) / 2
        ) ** 2

    def worst_variance(self) -> float:
        """The worst-case Var[y | t] over t in [-1, 1] (t scale), rounding included."""
        return _worst(self.k, self.grid_quadratic())

    def unit_variance(self) -> float:
        """Worst-case per-report variance of the mean of z = (x - lo)/(hi - lo)."""
        return self.worst_variance() / 4

    def average_variance(self) -> float:
        """Mean over z uniform in [0, 1] of the per-report variance of z_hat."""
        c0, _, c2 = self.quadratic()
        # E[t^2] = 1/3 for t uniform on [-1, 1]; rounding adds (2/k)^2 E[f(1-f)] = (2/k)^2/6.
        return (c0 + c2 / 3 + (2 / self.k) ** 2 / 6) / 4


@dataclass(frozen=True)
class PiecewiseMean(PiecewiseHooks):
    """The Piecewise mechanism over [lo, hi] with grid outputs."""

    name: ClassVar[str] = "piecewise"
    auto_candidate: ClassVar[bool] = True
    declared_epsilon: float
    lo: float
    hi: float
    k: int = field(init=False)
    cells: int = field(init=False)
    a: int = field(init=False)
    b: int = field(init=False)

    def __init__(self, epsilon: float, lo: float, hi: float, k: int = GRID,
                 cells: int | None = None) -> None:
        eps = check_mechanism_epsilon(epsilon)
        low, high = check_bounds(lo, hi)
        if isinstance(k, bool) or not isinstance(k, int) or k < 4:
            raise ValueError(f"grid steps k must be an integer >= 4, got {k!r}")
        if cells is None:
            cells, a, b = design(eps, k)
        elif isinstance(cells, bool) or not isinstance(cells, int) or not 1 <= cells < k:
            raise ValueError(f"block width cells must be an integer in [1, {k}), got {cells!r}")
        else:
            a, b = _ratio(eps, k + cells)
        for key, value in (("declared_epsilon", eps), ("lo", low), ("hi", high), ("k", k),
                           ("cells", cells), ("a", a), ("b", b)):
            object.__setattr__(self, key, value)

    @classmethod
    def create(cls, params: dict[str, Any]) -> PiecewiseMean:
        epsilon, lo, hi = (need(params, what, cls.name) for what in ("epsilon", "lo", "hi"))
        return cls(epsilon, lo, hi)

    # -- the channel -------------------------------------------------------------------

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def epsilon_actual(self) -> float:
        return log_up(Fraction(self.a, self.b))

    @property
    def total(self) -> int:
        """D = L A + (M - L) B: a report draws u uniform in [0, D)."""
        return self.cells * self.a + self.k * self.b

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        """(P[a given cell of the block], P[a given cell outside it])."""
        return Fraction(self.a, self.total), Fraction(self.b, self.total)

    def cell_of(self, j: int, u: int) -> int:
        """The cell for grid point j and a uniform u in [0, D)."""
        inside = self.cells * self.a
        if u < inside:
            return j + u // self.a
        w = (u - inside) // self.b
        return w if w < j else w + self.cells

    def _perturb(self, value: int | float, rng: Rng) -> int:
        j = rounded(float(value), self.lo, self.hi, self.k, rng)
        return self.cell_of(j, rng.randrange(self.total))

    def sample_grid(self, j: npt.NDArray[np.int64], gen: Any) -> npt.NDArray[np.int64]:
        """``cell_of`` over a batch of grid points."""
        import numpy as np

        u = gen.integers(0, self.total, size=len(j), dtype=np.int64)
        inside = self.cells * self.a
        w = (u - inside) // self.b
        out = np.where(u < inside, j + u // self.a, w + self.cells * (w >= j))
        return out.astype(np.int64)  # type: ignore[no-any-return]

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.int64]:
        j = round_inputs(self._checked(values), self.lo, self.hi, self.k, gen)
        return self.sample_grid(j, gen)

    def grid_cost(self) -> float:
        """Worst-case variance over the continuous PM's, minus 1."""
        return self.worst_variance() / continuous_pm_variance(self.epsilon_actual) - 1

    def rounding_cost(self) -> float:
        """The input rounding's bound 1/k^2 over the worst-case variance."""
        return 1 / self.k**2 / self.worst_variance()

    def describe(self) -> dict[str, object]:
        # The exact integers, for SDKs in other languages: a report is ``cell_of(j, u)``
        # for u uniform in [0, block a + grid b).
        return {**super().describe(), "grid": self.k, "cells": self.num_counters,
                "block": self.cells, "a": self.a, "b": self.b}


def _tally_variance(
    values: Sequence[float],
    quad: tuple[float, float, float],
    tallies: Sequence[int] | npt.NDArray[np.int64],
    n: int,
    evaluate: tuple[float, float, float] | None = None,
) -> float:
    """Var of the mean of t from a tally over cells with t-values ``values``
    (``mean_variance_from_moments``)."""
    if len(tallies) != len(values):
        raise ValueError(f"tally vector has {len(tallies)} counters, need {len(values)}")
    m1 = sum(c * y for c, y in zip(tallies, values, strict=True)) / n
    m2 = sum(c * y * y for c, y in zip(tallies, values, strict=True)) / n
    return mean_variance_from_moments(float(m1), float(m2), quad, n, evaluate)


MECHANISMS: tuple[type[Mechanism], ...] = (PiecewiseMean,)
