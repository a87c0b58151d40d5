"""k-ary randomised response (GRR, direct encoding), one- and two-level.

Report the true index with probability p, else one of the other d-1 indices
uniformly.  p* = p, q* = (1-p)/(d-1).  The two-level form is a permanent
GRR(eps_inf) then an instantaneous GRR over the same d symbols.

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
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng, words
from ldp_core.base import (
    Design,
    IntReport,
    Kind,
    Mechanism,
    OverIndices,
    Report,
    check_domain_size,
    check_index,
)
from ldp_core.epsilon import check_mechanism_epsilon, check_separated, log_up, threshold_at_most
from ldp_core.mechanisms._two_level import TwoLevel

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["GRR", "MECHANISMS", "LongitudinalGRR", "grr_keep_threshold", "grr_step", "grr_steps"]


def grr_keep_threshold(epsilon: float, domain_size: int) -> int:
    """K such that keeping with probability K / 2**32 is epsilon-LDP over d values.

    eps = ln(p / q) = ln(p (d-1) / (1-p))  <=>  p = e^eps / (e^eps + d - 1);
    K lies strictly below p * 2**32, so the implemented ratio is < e^eps.
    """
    e = math.exp(epsilon)
    return threshold_at_most(e / (e + domain_size - 1))


def grr_step(value: int, keep: int, size: int, rng: Rng) -> int:
    """GRR over ``size`` symbols: keep with probability keep/2**32, else a uniform other."""
    # Draw both numbers whatever happens, so the work does not depend on the value.
    kept = int(rng.getrandbits(32) < keep)
    other = (value + 1 + rng.randrange(size - 1)) % size
    return kept * value + (1 - kept) * other


def grr_steps(
    values: npt.NDArray[np.int64], keep: int, size: int, gen: Any
) -> npt.NDArray[np.int64]:
    """``grr_step`` over an array, from a numpy Generator (same thresholds)."""
    import numpy as np

    kept = words(gen, len(values)) < keep
    other = (values + 1 + gen.integers(0, size - 1, size=len(values))) % size
    return np.where(kept, values, other)


def grr_compose(p1: Fraction, size: int, keep: int) -> tuple[Fraction, Fraction]:
    """The channel of GRR(p1) then GRR(keep) over the same ``size`` symbols (a GRR).

    p* = p1 p2 + (1 - p1) q2 (kept twice, or moved away and back),
    q* = q1 p2 + (1 - q1) q2, with q_i = (1 - p_i)/(size - 1).
    """
    q1 = (1 - p1) / (size - 1)
    p2 = Fraction(keep, WORD)
    q2 = (1 - p2) / (size - 1)
    return p1 * p2 + (1 - p1) * q2, q1 * p2 + (1 - q1) * q2


class _Direct(IntReport):
    """Hooks of a direct encoding (one counter per value), for both levels."""

    kind: ClassVar[Kind] = "frequency"

    @property
    def num_counters(self) -> int:
        return self.domain_size

    def check_value(self, value: object) -> int:
        return check_index(value, self.domain_size)

    def output_distribution(self, value: int) -> npt.NDArray[np.float64]:
        import numpy as np

        p, q = (float(x) for x in self.channel)
        dist = np.full(self.domain_size, q)
        dist[value] = p
        return np.asarray(dist / dist.sum(), dtype=np.float64)

    def audit_design(self) -> Design:
        # E = {output = 0}: P[E | 0] / P[E | 1] = p*/q* = e^eps.
        p, q = self.channel
        return Design(0, 1, lambda r: r == 0, lambda batch: batch == 0, (p, q))


@dataclass(frozen=True)
class GRR(_Direct, OverIndices):
    """Generalised randomised response over the indices [0, domain_size)."""

    name: ClassVar[str] = "grr"
    auto_candidate: ClassVar[bool] = True
    declared_epsilon: float
    size: int
    keep: int = field(init=False)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        object.__setattr__(self, "declared_epsilon", check_mechanism_epsilon(epsilon))
        object.__setattr__(self, "size", check_domain_size(domain_size))
        object.__setattr__(self, "keep", grr_keep_threshold(self.declared_epsilon, self.size))
        check_separated(self.name, self.declared_epsilon, self.channel)

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        p = Fraction(self.keep, WORD)
        return p, (1 - p) / (self.size - 1)

    @property
    def epsilon_actual(self) -> float:
        p, q = self.channel
        return log_up(p / q)

    def describe(self) -> dict[str, object]:
        # The integer keep threshold (P[keep] = keep / 2**32).
        return {**super().describe(), "keep": self.keep}

    def _perturb(self, value: int | float, rng: Rng) -> int:
        return grr_step(int(value), self.keep, self.size, rng)

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.int64]:
        return grr_steps(values.astype("int64"), self.keep, self.size, gen)


@dataclass(frozen=True)
class LongitudinalGRR(_Direct, TwoLevel[GRR]):
    """Permanent GRR(eps_inf) over d, then an instantaneous GRR over d.

    eps_1: the composition is itself a GRR (p*, q*) with p* + (d-1) q* = 1, so
    every output y has P[y|v]/P[y|v'] in {p*/q*, q*/p*, 1}: eps_1 = ln(p*/q*).
    """

    name: ClassVar[str] = "grr"
    base_class: ClassVar[type[Mechanism]] = GRR

    @staticmethod
    def _compose(base: GRR, keep: int) -> tuple[Fraction, Fraction]:
        return grr_compose(Fraction(base.keep, WORD), base.size, keep)

    @staticmethod
    def _epsilon_of(base: GRR, channel: tuple[Fraction, Fraction]) -> float:
        return log_up(channel[0] / channel[1])

    @staticmethod
    def _lowest_keep(base: GRR) -> int:
        return -(-WORD // base.size)

    def _instant(self, permanent: Report, rng: Rng) -> int:
        assert isinstance(permanent, int)
        return grr_step(permanent, self.keep, self.base.size, rng)

    def _instant_batch(self, permanent: Any, gen: Any) -> Any:
        return grr_steps(permanent, self.keep, self.base.size, gen)


MECHANISMS: tuple[type[Mechanism], ...] = (GRR, LongitudinalGRR)
