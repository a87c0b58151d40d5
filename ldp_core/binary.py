"""Binary randomised response: Warner (1965) and the forced-response coin design.

Both report one bit; counter 1 counts the "yes" reports and the estimator
debiases the share of yes.  p* = P[yes | true yes], q* = P[yes | true no].

>>> import random
>>> m = BinaryRR.from_p(0.7)
>>> round(m.epsilon, 4)           # ln(0.7 / 0.3)
0.8473
>>> m.randomize(1, rng=random.Random(0)) in (0, 1)
True
>>> round(ForcedResponse().epsilon, 6)   # two fair coins: ln 3
1.098612
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

from ldp_core._rng import WORD, Rng
from ldp_core.base import Family, Kind, Mechanism, Report, check_index, int_payload
from ldp_core.epsilon import check_epsilon, log_up, threshold_at_most

__all__ = ["BinaryRR", "ForcedResponse", "exact_probability"]


def exact_probability(p: object, name: str) -> Fraction:
    """``p`` as an exact fraction strictly inside (0, 1); 0.7 becomes 7/10."""
    ok = isinstance(p, int | float | Fraction) and not isinstance(p, bool)
    if ok and isinstance(p, float):
        ok = math.isfinite(p)
    exact = Fraction(repr(p)) if isinstance(p, float) and ok else Fraction(0)
    if ok and isinstance(p, int | Fraction):
        exact = Fraction(p)
    if not 0 < exact < 1:
        raise ValueError(f"{name} must be a probability in (0, 1), got {p!r}")
    return exact


class _OneBit(Mechanism):
    """What the two binary designs share: one bit, two counters."""

    kind: ClassVar[Kind] = "binary"
    family: ClassVar[Family] = "binary"

    @property
    def domain_size(self) -> int:
        return 2

    @property
    def num_counters(self) -> int:
        return 2

    def counters(self, report: Report) -> tuple[int, ...]:
        assert isinstance(report, int)
        return (report,)

    def encode(self, report: Report) -> int:
        assert isinstance(report, int)
        return report

    def decode(self, payload: object) -> int:
        return int_payload(payload, 2, "bit_out_of_range")

    def check_value(self, value: object) -> int:
        return check_index(value, 2)

    @property
    def epsilon_actual(self) -> float:
        # A report is one bit: eps = ln max(P[1|1]/P[1|0], P[0|0]/P[0|1]).
        p, q = self.channel
        return max(log_up(p / q), log_up((1 - q) / (1 - p)))


@dataclass(frozen=True)
class BinaryRR(_OneBit):
    """Warner's randomised response: report the true bit with probability ``keep``."""

    name: ClassVar[str] = "binary_rr"
    keep: Fraction
    declared: float

    def __post_init__(self) -> None:
        if not Fraction(1, 2) < self.keep < 1:
            raise ValueError(f"keep probability must be in (1/2, 1), got {self.keep}")

    @classmethod
    def from_epsilon(cls, epsilon: float) -> BinaryRR:
        # eps = ln(p / (1-p))  <=>  p = e^eps / (1 + e^eps); the integer threshold
        # lies strictly below p, so ln(K / (W-K)) < eps.
        eps = check_epsilon(epsilon)
        keep = Fraction(threshold_at_most(math.exp(eps) / (1 + math.exp(eps))), WORD)
        return cls(keep=keep, declared=eps)

    @classmethod
    def from_p(cls, p: float | Fraction) -> BinaryRR:
        keep = exact_probability(p, "p")
        if keep <= Fraction(1, 2):
            raise ValueError(f"p must be in (1/2, 1), got {p!r}")
        return cls(keep=keep, declared=log_up(keep / (1 - keep)))

    @property
    def epsilon(self) -> float:
        return self.declared

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        return self.keep, 1 - self.keep

    def _perturb(self, value: int | float, rng: Rng) -> int:
        flip = int(rng.randrange(self.keep.denominator) >= self.keep.numerator)
        return int(value) ^ flip


@dataclass(frozen=True)
class ForcedResponse(_OneBit):
    """The coin design: with probability ``truth`` answer truthfully, else say
    "yes" with probability ``yes``.  Two fair coins: P[yes|yes] = 3/4,
    P[yes|no] = 1/4, eps = ln 3.
    """

    name: ClassVar[str] = "forced_response"
    truth: Fraction = Fraction(1, 2)
    yes: Fraction = Fraction(1, 2)

    def __post_init__(self) -> None:
        object.__setattr__(self, "truth", exact_probability(self.truth, "truth"))
        object.__setattr__(self, "yes", exact_probability(self.yes, "yes"))

    @classmethod
    def from_epsilon(cls, epsilon: float) -> ForcedResponse:
        # With yes = 1/2, eps = ln((1+t)/(1-t)), so t = (e^eps-1)/(e^eps+1),
        # taken as an integer threshold strictly below.
        eps = check_epsilon(epsilon)
        t = threshold_at_most((math.exp(eps) - 1) / (math.exp(eps) + 1))
        return cls(truth=Fraction(t, WORD), yes=Fraction(1, 2))

    @property
    def epsilon(self) -> float:
        # Computed from the design, never declared:
        # eps = ln max[(t + (1-t)y) / ((1-t)y), (t + (1-t)(1-y)) / ((1-t)(1-y))].
        return self.epsilon_actual

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        t, y = self.truth, self.yes
        return t + (1 - t) * y, (1 - t) * y

    def _perturb(self, value: int | float, rng: Rng) -> int:
        honest = int(rng.randrange(self.truth.denominator) < self.truth.numerator)
        coin = int(rng.randrange(self.yes.denominator) < self.yes.numerator)
        return (honest & int(value)) | ((1 - honest) & coin)
