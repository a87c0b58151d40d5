"""Microsoft's 1BitMean (Ding, Kulkarni, Yekhanin 2017): a mean from one bit.

A value x in [lo, hi] is scaled to z = (x - lo)/(hi - lo) in [0, 1]; the device
sends 1 with probability q + z (p - q), where p = e^eps/(e^eps + 1) and
q = 1/(e^eps + 1).  The two extremes are the bits of binary randomised
response, so for any x, x' and output b, P[b|x]/P[b|x'] <= max(p/q, (1-q)/(1-p))
= e^eps.  With integer thresholds one = floor(pW) - 1 and zero = ceil(qW) + 1
the implemented ratio is strictly below e^eps; values in between use the exact
rational threshold zero + z (one - zero), so no rounding biases the mean.

E[b] = q* + z (p* - q*), hence mean_z = (ones/n - q*)/(p* - q*).  The tally
layout is binary: counter 1 counts the 1 bits.  The two-level form is a
permanent 1BitMean bit at eps_inf, then a symmetric flip; P[1 | x] stays linear
in z between q* (x = lo) and p* (x = hi).  Memoisation is per distinct value: a
numeric metric whose value keeps changing spends eps_inf on each new value.

>>> import random
>>> m = OneBitMean(epsilon=1.0, lo=0.0, hi=60.0)
>>> m.randomize(12.5, rng=random.Random(0)) in (0, 1)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng, words
from ldp_core.base import Design, Kind, Mechanism, need
from ldp_core.epsilon import (
    check_mechanism_epsilon,
    check_separated,
    threshold_at_least,
    threshold_at_most,
)
from ldp_core.mechanisms._two_level import TwoLevel
from ldp_core.mechanisms.binary import OneBit, OneBitTwoLevel

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MECHANISMS", "LongitudinalOneBitMean", "OneBitMean", "check_bounds"]


def check_bounds(lo: object, hi: object) -> tuple[float, float]:
    """(lo, hi) as finite floats with lo < hi, else a ValueError naming them."""
    for name, bound in (("lo", lo), ("hi", hi)):
        if isinstance(bound, bool) or not isinstance(bound, int | float):
            raise ValueError(f"{name} must be a finite number, got {bound!r}")
        if not math.isfinite(bound):
            raise ValueError(f"{name} must be a finite number, got {bound!r}")
    assert isinstance(lo, int | float) and isinstance(hi, int | float)
    if lo >= hi:
        raise ValueError(f"lo must be < hi, got lo={lo!r}, hi={hi!r}")
    return float(lo), float(hi)


class _Mean(OneBit):
    """Hooks of a one-bit mean over [lo, hi], for both levels."""

    kind: ClassVar[Kind] = "mean"
    lo: float
    hi: float

    def scaled(self, value: float) -> Fraction:
        """z = (value - lo)/(hi - lo), exactly."""
        return (Fraction(value) - Fraction(self.lo)) / (Fraction(self.hi) - Fraction(self.lo))

    def one_probability(self, value: float) -> Fraction:
        """P[report = 1 | value], exactly: q* + z (p* - q*)."""
        p, q = self.channel
        return q + self.scaled(value) * (p - q)

    def check_value(self, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"value {value!r} is not a number in [{self.lo}, {self.hi}]")
        if not (math.isfinite(value) and self.lo <= value <= self.hi):
            raise ValueError(f"value {value!r} is not in [{self.lo}, {self.hi}]")
        return float(value)

    def _checked(self, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        import numpy as np

        x = np.asarray(values, dtype=np.float64)
        if len(x) and (not np.all(np.isfinite(x)) or x.min() < self.lo or x.max() > self.hi):
            raise ValueError(f"true values must lie in [{self.lo}, {self.hi}]")
        return x

    def _one_probabilities(self, values: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        p, q = (float(x) for x in self.channel)
        return q + (values - self.lo) / (self.hi - self.lo) * (p - q)

    def unit_variance(self) -> float:
        """Worst-case Var of the mean of z per report: pi (1 - pi)/(p* - q*)^2 at pi = 1/2."""
        p, q = self.p_star, self.q_star
        return 0.25 / (p - q) ** 2

    def average_variance(self) -> float:
        """Mean over z uniform in [0, 1] of the per-report variance of z_hat."""
        p, q = self.p_star, self.q_star
        mean_pi2 = q * q + q * (p - q) + (p - q) ** 2 / 3
        return ((p + q) / 2 - mean_pi2) / (p - q) ** 2

    def audit_design(self) -> Design:
        # E = {output = 1} for x = hi, x' = lo: the extremes are binary RR.
        p, q = self.channel
        return Design(self.hi, self.lo, lambda r: r == 1, lambda bits: bits, (p, q))


@dataclass(frozen=True)
class OneBitMean(_Mean):
    """1BitMean over [lo, hi]."""

    name: ClassVar[str] = "one_bit_mean"
    auto_candidate: ClassVar[bool] = True
    declared_epsilon: float
    lo: float
    hi: float
    one: int = field(init=False)
    zero: int = field(init=False)

    def __init__(self, epsilon: float, lo: float, hi: float) -> None:
        eps = check_mechanism_epsilon(epsilon)
        low, high = check_bounds(lo, hi)
        e = math.exp(eps)
        object.__setattr__(self, "declared_epsilon", eps)
        object.__setattr__(self, "lo", low)
        object.__setattr__(self, "hi", high)
        object.__setattr__(self, "one", threshold_at_most(e / (e + 1)))
        object.__setattr__(self, "zero", threshold_at_least(1 / (e + 1)))
        check_separated(self.name, eps, self.channel)

    @classmethod
    def create(cls, params: dict[str, Any]) -> OneBitMean:
        name = cls.name
        epsilon, lo, hi = (need(params, what, name) for what in ("epsilon", "lo", "hi"))
        return cls(epsilon, lo, hi)

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        return Fraction(self.one, WORD), Fraction(self.zero, WORD)

    def describe(self) -> dict[str, object]:
        # The integer thresholds of the extremes and the bounds they map.
        return {**super().describe(), "one": self.one, "zero": self.zero,
                "lo": self.lo, "hi": self.hi}

    def _perturb(self, value: int | float, rng: Rng) -> int:
        # 1 iff u < zero + z (one - zero), compared exactly in rationals.
        u = rng.getrandbits(32)
        return int(u - self.zero < self.scaled(value) * (self.one - self.zero))

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.bool_]:
        # u < zero + z (one - zero) for an integer u  <=>  u < ceil(that), exactly.
        import numpy as np

        distinct, inverse = np.unique(self._checked(values), return_inverse=True)
        span = self.one - self.zero
        limits = [math.ceil(self.zero + self.scaled(float(v)) * span) for v in distinct]
        return words(gen, len(values)) < np.array(limits, dtype=np.int64)[inverse]


@dataclass(frozen=True)
class LongitudinalOneBitMean(OneBitTwoLevel, _Mean, TwoLevel[OneBitMean]):
    """Permanent 1BitMean bit at eps_inf, then a symmetric flip keeping with k."""

    name: ClassVar[str] = "one_bit_mean"
    base_class: ClassVar[type[Mechanism]] = OneBitMean

    @property
    def lo(self) -> float:  # type: ignore[override]
        return self.base.lo

    @property
    def hi(self) -> float:  # type: ignore[override]
        return self.base.hi


MECHANISMS: tuple[type[Mechanism], ...] = (OneBitMean, LongitudinalOneBitMean)
