"""The Hybrid mechanism (Wang et al., ICDE 2019): Piecewise or one bit, by a coin.

With probability alpha = mix / 2**32 (a 32-bit word below ``mix``) the device
reports a grid Piecewise cell (``piecewise.PiecewiseMean``, cells 0..M-1),
otherwise a 1BitMean bit (``mean.OneBitMean``, cells M and M + 1).  Both parts
are eps-LDP and their outputs are disjoint, so every cell's ratio between two
inputs is one part's: eps_actual = max of the two.  Both parts' values are
unbiased for t = 2 (x - lo)/(hi - lo) - 1, so the mixture's variance is
alpha V_PM(t) + (1 - alpha) V_bit(t).  The paper's alpha = 1 - e^{-eps/2}
(0 for eps <= 0.61) is tuned for the continuous PM; here alpha is the value in
{0, 1/64, ..., 1} with the lowest worst-case variance of the exact grid
channels, so the Hybrid is never worse than either part (alpha = 0 is 1BitMean).

>>> import random
>>> m = HybridMean(epsilon=2.0, lo=0.0, hi=1.0)
>>> 0 <= m.randomize(0.5, rng=random.Random(1)) < m.num_counters
True
>>> HybridMean(epsilon=0.1, lo=0.0, hi=1.0).alpha       # one bit is best here
Fraction(0, 1)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng, words
from ldp_core.base import Design, IntReport, Kind, Mechanism, need
from ldp_core.epsilon import check_mechanism_epsilon
from ldp_core.mechanisms._grid import segment_max
from ldp_core.mechanisms.mean import OneBitMean, check_bounds
from ldp_core.mechanisms.piecewise import GRID, PiecewiseMean, _tally_variance

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MECHANISMS", "HybridMean"]

#: alpha is searched on multiples of 1/STEPS.
STEPS = 64


def _bit_quadratic(bit: OneBitMean) -> tuple[float, float, float]:
    """Var[y | t] of the bit's unbiased value: pi (1 - pi) 4/(p - q)^2, pi linear in t."""
    p, q = bit.channel
    c0 = (p + q) * (2 - p - q) / (p - q) ** 2
    c1 = 2 * (1 - p - q) / (p - q)
    return float(c0), float(c1), -1.0


def _mixed_worst(pm: PiecewiseMean, bit: OneBitMean, alpha: float) -> float:
    """Worst case over t of alpha V_PM + (1 - alpha) V_bit (t scale)."""
    k = pm.k
    b0, b1, b2 = _bit_quadratic(bit)
    v0, v1, v2 = pm.quadratic()
    values = []
    for j in range(k + 1):
        t = -1 + 2 * j / k
        pm_v = v0 + v1 * t + v2 * t * t
        values.append(alpha * pm_v + (1 - alpha) * (b0 + b1 * t + b2 * t * t))
    # Within a segment PM's rounding adds f(1-f) (2/k)^2 and -t^2 lies f(1-f) (2/k)^2
    # above its chord: the curvature is (2/k)^2 whatever alpha.
    return segment_max(values, [(2 / k) ** 2] * k)


@lru_cache(maxsize=256)
def _best_mix(epsilon: float, k: int) -> int:
    pm = PiecewiseMean(epsilon, 0.0, 1.0, k)
    bit = OneBitMean(epsilon, 0.0, 1.0)
    scores = {s: _mixed_worst(pm, bit, s / STEPS) for s in range(STEPS + 1)}
    best = min(scores, key=scores.__getitem__)
    return best * (WORD // STEPS) if best < STEPS else WORD


@dataclass(frozen=True)
class HybridMean(IntReport):
    """Piecewise with probability alpha, 1BitMean otherwise, over [lo, hi]."""

    name: ClassVar[str] = "hybrid"
    kind: ClassVar[Kind] = "mean"
    auto_candidate: ClassVar[bool] = True
    declared_epsilon: float
    lo: float
    hi: float
    mix: int = field(init=False)
    pm: PiecewiseMean = field(init=False, repr=False)
    bit: OneBitMean = field(init=False, repr=False)

    def __init__(self, epsilon: float, lo: float, hi: float, k: int = GRID) -> None:
        eps = check_mechanism_epsilon(epsilon)
        low, high = check_bounds(lo, hi)
        for key, value in (
            ("declared_epsilon", eps), ("lo", low), ("hi", high),
            ("pm", PiecewiseMean(eps, low, high, k)), ("bit", OneBitMean(eps, low, high)),
            ("mix", _best_mix(eps, k)),
        ):
            object.__setattr__(self, key, value)

    @classmethod
    def create(cls, params: dict[str, Any]) -> HybridMean:
        epsilon, lo, hi = (need(params, what, cls.name) for what in ("epsilon", "lo", "hi"))
        return cls(epsilon, lo, hi)

    @property
    def alpha(self) -> Fraction:
        """P[the report is a Piecewise cell]."""
        return Fraction(self.mix, WORD)

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def epsilon_actual(self) -> float:
        """The larger epsilon of the parts a report can come from."""
        parts = [self.pm] if self.mix == WORD else [self.bit] if self.mix == 0 else [
            self.pm, self.bit]
        return max(part.epsilon_actual for part in parts)

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        """The bit's channel (P[1 | hi], P[1 | lo])."""
        return self.bit.channel

    @property
    def domain_size(self) -> int:
        return 2

    @property
    def num_counters(self) -> int:
        return self.pm.num_counters + 2

    @property
    def report_bits(self) -> float:
        return math.log2(self.num_counters)

    def check_value(self, value: object) -> float:
        return self.pm.check_value(value)

    def _perturb(self, value: int | float, rng: Rng) -> int:
        if rng.getrandbits(32) < self.mix:
            return self.pm._perturb(value, rng)
        return self.pm.num_counters + self.bit._perturb(value, rng)

    # -- drivers -----------------------------------------------------------------------

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.int64]:
        import numpy as np

        x = self.pm._checked(values)
        out = np.empty(len(x), dtype=np.int64)
        use_pm = words(gen, len(x)) < self.mix
        if use_pm.any():
            out[use_pm] = self.pm.sample(x[use_pm], gen)
        if (~use_pm).any():
            out[~use_pm] = self.pm.num_counters + self.bit.sample(x[~use_pm], gen)
        return out

    def batch_counters(self, batch: Any) -> npt.NDArray[np.int64]:
        return batch.astype("int64")  # type: ignore[no-any-return]

    def simulate_tallies(
        self, values: npt.NDArray[Any], trials: int, gen: Any
    ) -> npt.NDArray[np.int64]:
        import numpy as np

        x = self.pm._checked(values)
        out = np.zeros((trials, self.num_counters), dtype=np.int64)
        for t in range(trials):
            out[t] = np.bincount(self.sample(x, gen), minlength=self.num_counters)
        return out

    def output_distribution(self, value: float) -> npt.NDArray[np.float64]:
        import numpy as np

        one = float(self.bit.one_probability(self.check_value(value)))
        alpha = float(self.alpha)
        return np.concatenate(
            [alpha * self.pm.output_distribution(value), (1 - alpha) * np.array([1 - one, one])]
        )

    def audit_design(self) -> Design:
        # The part whose epsilon is the larger: PM cells in hi's block (k..M-1, outside
        # lo's block), ratio A/B; or bit = 1, ratio p*/q*.  x = hi, x' = lo.
        k, m, alpha = self.pm.k, self.pm.num_counters, self.alpha
        if self.mix and (self.pm.epsilon_actual >= self.bit.epsilon_actual or self.mix == WORD):
            a, b = self.pm.channel
            cells = self.pm.cells
            return Design(self.hi, self.lo, lambda r: isinstance(r, int) and k <= r < m,
                          lambda c: (c >= k) & (c < m),
                          (alpha * cells * a, alpha * cells * b))
        p, q = self.bit.channel
        return Design(self.hi, self.lo, lambda r: r == m + 1, lambda c: c == m + 1,
                      ((1 - alpha) * p, (1 - alpha) * q))

    # -- the estimator's hooks (``Numeric``) ----------------------------------------------

    def t_values(self) -> tuple[float, ...]:
        p, q = (float(x) for x in self.bit.channel)
        bit_values = tuple(2 * (b - q) / (p - q) - 1 for b in (0, 1))
        return self.pm.t_values() + bit_values

    def report_values(self) -> tuple[float, ...]:
        half = (self.hi - self.lo) / 2
        return tuple(self.lo + (y + 1) * half for y in self.t_values())

    def quadratic(self) -> tuple[float, float, float]:
        alpha = float(self.alpha)
        pm, bit = self.pm.quadratic(), _bit_quadratic(self.bit)
        return tuple(alpha * u + (1 - alpha) * v for u, v in zip(pm, bit, strict=True))  # type: ignore[return-value]

    def t_variance(self, value: float) -> float:
        p, q = (float(x) for x in self.bit.channel)
        one = float(self.bit.one_probability(self.check_value(value)))
        bit_var = one * (1 - one) * 4 / (p - q) ** 2
        alpha = float(self.alpha)
        return alpha * self.pm.t_variance(value) + (1 - alpha) * bit_var

    def value_variance(self, value: float) -> float:
        return self.t_variance(value) * ((self.hi - self.lo) / 2) ** 2

    def mean_variance(self, tallies: Sequence[int] | npt.NDArray[np.int64], n: int) -> float:
        return _tally_variance(self.t_values(), self.quadratic(), tallies, n) * (
            (self.hi - self.lo) / 2
        ) ** 2

    def worst_variance(self) -> float:
        return _mixed_worst(self.pm, self.bit, float(self.alpha))

    def unit_variance(self) -> float:
        """Worst-case per-report variance of the mean of z = (x - lo)/(hi - lo)."""
        return self.worst_variance() / 4

    def average_variance(self) -> float:
        """Mean over z uniform in [0, 1] of the per-report variance of z_hat."""
        alpha = float(self.alpha)
        return alpha * self.pm.average_variance() + (1 - alpha) * self.bit.average_variance()

    def describe(self) -> dict[str, object]:
        # The exact integers, for SDKs in other languages: Piecewise iff a 32-bit word
        # < mix, then its (block, a, b); else the bit's (one, zero).
        return {**super().describe(), "grid": self.pm.k, "cells": self.num_counters,
                "alpha": float(self.alpha), "mix": self.mix, "block": self.pm.cells,
                "a": self.pm.a, "b": self.pm.b, "one": self.bit.one, "zero": self.bit.zero}


MECHANISMS: tuple[type[Mechanism], ...] = (HybridMean,)
