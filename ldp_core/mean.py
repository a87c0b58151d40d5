"""Microsoft's 1BitMean (Ding, Kulkarni, Yekhanin 2017): a mean from one bit.

A value x in [lo, hi] is scaled to z = (x - lo)/(hi - lo) in [0, 1]; the device
sends 1 with probability q + z (p - q), where p = e^eps/(e^eps + 1) and
q = 1/(e^eps + 1).  The two extremes are the bits of binary randomised
response, so for any x, x' and output b, P[b|x]/P[b|x'] <= max(p/q, (1-q)/(1-p))
= e^eps.  With integer thresholds one = floor(pW) - 1 and zero = ceil(qW) + 1
the implemented ratio is strictly below e^eps; values in between use the exact
rational threshold zero + z (one - zero), so no rounding biases the mean.

E[b] = q* + z (p* - q*), hence mean_z = (ones/n - q*)/(p* - q*).  The tally
layout is binary: counter 1 counts the 1 bits.

>>> import random
>>> m = OneBitMean(epsilon=1.0, lo=0.0, hi=60.0)
>>> m.randomize(12.5, rng=random.Random(0)) in (0, 1)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import ClassVar

from ldp_core._rng import WORD, Rng
from ldp_core.base import Family, Kind, Mechanism, Report, int_payload
from ldp_core.epsilon import check_epsilon, log_up, threshold_at_least, threshold_at_most

__all__ = ["OneBitMean", "check_bounds"]


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


@dataclass(frozen=True)
class OneBitMean(Mechanism):
    """1BitMean over [lo, hi]."""

    name: ClassVar[str] = "one_bit_mean"
    kind: ClassVar[Kind] = "mean"
    family: ClassVar[Family] = "mean"
    declared_epsilon: float
    lo: float
    hi: float
    one: int = field(init=False)
    zero: int = field(init=False)

    def __init__(self, epsilon: float, lo: float, hi: float) -> None:
        eps = check_epsilon(epsilon)
        low, high = check_bounds(lo, hi)
        e = math.exp(eps)
        object.__setattr__(self, "declared_epsilon", eps)
        object.__setattr__(self, "lo", low)
        object.__setattr__(self, "hi", high)
        object.__setattr__(self, "one", threshold_at_most(e / (e + 1)))
        object.__setattr__(self, "zero", threshold_at_least(1 / (e + 1)))

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def domain_size(self) -> int:
        return 2

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        return Fraction(self.one, WORD), Fraction(self.zero, WORD)

    @property
    def epsilon_actual(self) -> float:
        p, q = self.channel
        return max(log_up(p / q), log_up((1 - q) / (1 - p)))

    @property
    def num_counters(self) -> int:
        return 2

    def scaled(self, value: float) -> Fraction:
        """z = (value - lo)/(hi - lo), exactly."""
        return (Fraction(value) - Fraction(self.lo)) / (Fraction(self.hi) - Fraction(self.lo))

    def one_probability(self, value: float) -> Fraction:
        """P[report = 1 | value], exactly."""
        p, q = self.channel
        return q + self.scaled(value) * (p - q)

    def counters(self, report: Report) -> tuple[int, ...]:
        assert isinstance(report, int)
        return (report,)

    def encode(self, report: Report) -> int:
        assert isinstance(report, int)
        return report

    def decode(self, payload: object) -> int:
        return int_payload(payload, 2, "bit_out_of_range")

    def check_value(self, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"value {value!r} is not a number in [{self.lo}, {self.hi}]")
        if not (math.isfinite(value) and self.lo <= value <= self.hi):
            raise ValueError(f"value {value!r} is not in [{self.lo}, {self.hi}]")
        return float(value)

    def _perturb(self, value: int | float, rng: Rng) -> int:
        # 1 iff u < zero + z (one - zero), compared exactly in rationals.
        u = rng.getrandbits(32)
        return int(u - self.zero < self.scaled(value) * (self.one - self.zero))
