"""k-ary randomised response (GRR, direct encoding).

Report the true index with probability p, else one of the other d-1 indices
uniformly.  p* = p, q* = (1-p)/(d-1).

>>> import random
>>> m = GRR(epsilon=1.0, domain_size=4)
>>> 0 <= m.randomize(2, rng=random.Random(0)) < 4
True
>>> m.epsilon_actual <= m.epsilon
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import ClassVar

from ldp_core._rng import WORD, Rng
from ldp_core.base import (
    Family,
    Kind,
    Mechanism,
    Report,
    check_domain_size,
    check_index,
    int_payload,
)
from ldp_core.epsilon import check_epsilon, log_up, threshold_at_most

__all__ = ["GRR", "grr_keep_threshold"]


def grr_keep_threshold(epsilon: float, domain_size: int) -> int:
    """K such that keeping with probability K / 2**32 is epsilon-LDP over d values.

    eps = ln(p / q) = ln(p (d-1) / (1-p))  <=>  p = e^eps / (e^eps + d - 1);
    K lies strictly below p * 2**32, so the implemented ratio is < e^eps.
    """
    e = math.exp(epsilon)
    return threshold_at_most(e / (e + domain_size - 1))


@dataclass(frozen=True)
class GRR(Mechanism):
    """Generalised randomised response over the indices [0, domain_size)."""

    name: ClassVar[str] = "grr"
    kind: ClassVar[Kind] = "frequency"
    family: ClassVar[Family] = "direct"
    declared_epsilon: float
    size: int
    keep: int = field(init=False)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        object.__setattr__(self, "declared_epsilon", check_epsilon(epsilon))
        object.__setattr__(self, "size", check_domain_size(domain_size))
        object.__setattr__(self, "keep", grr_keep_threshold(self.declared_epsilon, self.size))

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def domain_size(self) -> int:
        return self.size

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        p = Fraction(self.keep, WORD)
        return p, (1 - p) / (self.size - 1)

    @property
    def epsilon_actual(self) -> float:
        p, q = self.channel
        return log_up(p / q)

    @property
    def num_counters(self) -> int:
        return self.size

    def counters(self, report: Report) -> tuple[int, ...]:
        assert isinstance(report, int)
        return (report,)

    def encode(self, report: Report) -> int:
        assert isinstance(report, int)
        return report

    def decode(self, payload: object) -> int:
        return int_payload(payload, self.size, "bucket_out_of_range")

    def check_value(self, value: object) -> int:
        return check_index(value, self.size)

    def _perturb(self, value: int | float, rng: Rng) -> int:
        # Draw both numbers whatever happens, so the work does not depend on the value.
        keep = int(rng.getrandbits(32) < self.keep)
        other = (int(value) + 1 + rng.randrange(self.size - 1)) % self.size
        return keep * int(value) + (1 - keep) * other
