"""Hadamard response (Acharya, Sun and Zhang 2019): log2(K)-bit reports, FWHT decoding.

K is the least power of two above d.  Value v owns row r = v + 1 of the K x K
Sylvester-Hadamard matrix, H[r][y] = (-1)^popcount(r & y), and its half
C_v = {y : H[r][y] = +1} (K/2 outputs; row 0, all ones, is never used).  The
device reports y in C_v with probability p = e^eps/(1 + e^eps), uniformly within
it, else a uniform y outside it.  A report y supports every u with y in C_u.

Channel.  p* = p.  Two distinct rows, neither constant, agree on exactly K/2
columns, so |C_u & C_v| = K/4 and for u != v
    q* = (K/4)(2p/K) + (K/4)(2(1-p)/K) = 1/2   exactly, for every pair.
Epsilon: P[y | v] is 2p/K or 2(1-p)/K, so eps = ln(p/(1-p)); with the integer
threshold p = K_keep/2**32 strictly below e^eps/(1+e^eps), the implemented
ratio is < e^eps.

Server.  C(u) = sum_y T[y] (1 + H[u+1][y])/2 = (n + (H T)[u+1]) / 2: one fast
Walsh-Hadamard transform of the K counters, O(K log K), whatever n.

Two-level: a permanent HR response y' at eps_inf, then keep y' with probability
k, else a uniform y over all K.  P[supports u | B'] = k [y' in C_u] + (1-k)/2,
so p* = k p1 + (1-k)/2, q* = 1/2, and P[y | v] = 2p*/K or 2(1-p*)/K: one report
costs eps_1 = ln(p*/(1-p*)), the same formula as one level.

>>> import random
>>> m = HadamardResponse(epsilon=1.0, domain_size=6)
>>> m.num_counters, m.q_star
(8, 0.5)
>>> 0 <= m.randomize(5, rng=random.Random(0)) < 8
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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

__all__ = ["MECHANISMS", "HadamardResponse", "LongitudinalHadamard", "fwht"]

#: The largest domain: K = 2**23 counters.
MAX_DOMAIN = (1 << 23) - 1


def _parity(x: int) -> int:
    return x.bit_count() & 1


def _parities(x: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """popcount(x) mod 2, elementwise, by folding (x < 2**32)."""
    for shift in (16, 8, 4, 2, 1):
        x = x ^ (x >> shift)
    return x & 1


def fwht(values: Sequence[int] | npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """The Walsh-Hadamard transform H v along the last axis (length 2^m), in integers.

    >>> fwht([1, 0, 0, 0]).tolist(), fwht([[0, 1, 0, 0]]).tolist()
    ([1, 1, 1, 1], [[1, -1, 1, -1]])
    """
    import numpy as np

    out = np.array(values, dtype=np.int64)
    size = out.shape[-1]
    if size & (size - 1):
        raise ValueError(f"length must be a power of two, got {size}")
    half = 1
    while half < size:
        blocks = out.reshape(-1, 2 * half)
        left, right = blocks[:, :half].copy(), blocks[:, half:]
        blocks[:, :half] += right
        blocks[:, half:] = left - right
        half *= 2
    return out


class _Hadamard(IntReport):
    """Hooks of Hadamard response, for both levels (everything follows from p*)."""

    kind: ClassVar[Kind] = "frequency"

    @property
    def width(self) -> int:
        """K, the number of outputs (a power of two above the domain size)."""
        return 1 << self.domain_size.bit_length()

    @property
    def num_counters(self) -> int:
        return self.width

    @property
    def report_bits(self) -> float:
        return math.log2(self.width)

    @property
    def epsilon_actual(self) -> float:
        p = self.channel[0]
        return log_up(p / (1 - p))

    def check_value(self, value: object) -> int:
        return check_index(value, self.domain_size)

    def supports(self, report: int, value: int) -> bool:
        """Whether output ``report`` lies in C_value."""
        return _parity((value + 1) & report) == 0

    def support_counts(self, tallies: Sequence[int] | npt.NDArray[np.int64]) -> list[int]:
        import numpy as np

        table = np.asarray(tallies, dtype=np.int64)
        if table.shape != (self.width,):
            raise ValueError(f"tally vector has shape {table.shape}, need ({self.width},)")
        spectrum = fwht(table)
        counts = (int(table.sum()) + spectrum[1 : self.domain_size + 1]) // 2
        return [int(c) for c in counts]

    def output_distribution(self, value: int) -> npt.NDArray[np.float64]:
        import numpy as np

        p = float(self.channel[0])
        inside = _parities((value + 1) & np.arange(self.width, dtype=np.int64)) == 0
        dist = np.where(inside, 2 * p / self.width, 2 * (1 - p) / self.width)
        return np.asarray(dist / dist.sum(), dtype=np.float64)

    def audit_design(self) -> Design:
        # E = {y in C_0, y not in C_1}: a quarter of the outputs, inside C_0 and
        # outside C_1, so P[E | 0] = p*/2 and P[E | 1] = (1 - p*)/2: ratio e^eps.
        p = self.channel[0]

        def event(r: Report) -> bool:
            assert isinstance(r, int)
            return self.supports(r, 0) and not self.supports(r, 1)

        def batch_event(y: Any) -> Any:
            return (_parities(y & 1) == 0) & (_parities(y & 2) == 1)

        return Design(0, 1, event, batch_event, (p / 2, (1 - p) / 2))


@dataclass(frozen=True)
class HadamardResponse(_Hadamard, OverIndices):
    """Hadamard response over the indices [0, domain_size)."""

    name: ClassVar[str] = "hadamard"
    declared_epsilon: float
    size: int
    keep: int = field(init=False)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        d = check_domain_size(domain_size)
        if d > MAX_DOMAIN:
            raise ValueError(f"domain_size must be at most {MAX_DOMAIN} for hadamard, got {d}")
        eps = check_mechanism_epsilon(epsilon)
        e = math.exp(eps)
        object.__setattr__(self, "declared_epsilon", eps)
        object.__setattr__(self, "size", d)
        object.__setattr__(self, "keep", threshold_at_most(e / (1 + e)))
        check_separated(self.name, eps, self.channel)

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        return Fraction(self.keep, WORD), Fraction(1, 2)

    def describe(self) -> dict[str, object]:
        # The integer threshold of "report inside C_v" (P = keep / 2**32).
        return {**super().describe(), "keep": self.keep}

    def _perturb(self, value: int | float, rng: Rng) -> int:
        # A uniform y, moved into C_v (or out of it) by flipping the lowest set bit
        # of row r = v + 1 when its parity is wrong: a 2-to-1 map onto each half, so
        # y is uniform within the chosen half.  Same work for every value.
        row = int(value) + 1
        inside = int(rng.getrandbits(32) < self.keep)
        y = rng.getrandbits(self.width.bit_length() - 1)
        wrong = _parity(row & y) ^ (1 - inside)
        return y ^ (wrong * (row & -row))

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.int64]:
        import numpy as np

        rows = values.astype(np.int64) + 1
        inside = (words(gen, len(rows)) < self.keep).astype(np.int64)
        y = gen.integers(0, self.width, size=len(rows), dtype=np.int64)
        wrong = _parities(rows & y) ^ (1 - inside)
        return y ^ (wrong * (rows & -rows))  # type: ignore[no-any-return]


@dataclass(frozen=True)
class LongitudinalHadamard(_Hadamard, TwoLevel[HadamardResponse]):
    """Permanent Hadamard response at eps_inf, then keep it or draw a uniform output."""

    name: ClassVar[str] = "hadamard"
    base_class: ClassVar[type[Mechanism]] = HadamardResponse

    @staticmethod
    def _compose(base: HadamardResponse, keep: int) -> tuple[Fraction, Fraction]:
        k, p1 = Fraction(keep, WORD), base.channel[0]
        return k * p1 + (1 - k) / 2, Fraction(1, 2)

    @staticmethod
    def _epsilon_of(base: HadamardResponse, channel: tuple[Fraction, Fraction]) -> float:
        p = channel[0]
        return log_up(p / (1 - p))

    @staticmethod
    def _lowest_keep(base: HadamardResponse) -> int:
        return 0

    def _instant(self, permanent: Report, rng: Rng) -> int:
        assert isinstance(permanent, int)
        kept = int(rng.getrandbits(32) < self.keep)
        other = rng.getrandbits(self.width.bit_length() - 1)
        return kept * permanent + (1 - kept) * other

    def _instant_batch(self, permanent: Any, gen: Any) -> Any:
        import numpy as np

        kept = words(gen, len(permanent)) < self.keep
        return np.where(kept, permanent, gen.integers(0, self.width, size=len(permanent)))


MECHANISMS: tuple[type[Mechanism], ...] = (HadamardResponse, LongitudinalHadamard)
