"""Unary encodings: symmetric (SUE, basic one-time RAPPOR) and optimised (OUE).

The value v becomes a d-bit vector with only bit v set; every bit is then
reported independently: a 1 stays 1 with probability p, a 0 becomes 1 with
probability q.  Bit v supports value v, so p* = p and q* = q.

Neighbouring inputs differ in two bits, so
    eps = ln[ p (1-q) / ((1-p) q) ].
SUE: p = e^(eps/2) / (1 + e^(eps/2)), q = 1 - p.
OUE: p = 1/2, q = 1 / (1 + e^eps)   (Wang et al. 2017, minimum variance).
Two-level (RAPPOR): the permanent response is SUE or OUE at eps_inf (the PRR),
then every bit is kept with probability k or flipped (the IRR).

A report is the sorted tuple of its set bits; on the wire it is the bit vector,
packed little-endian within bytes, base64url without padding.

Plausibility.  Every bit of an honest report is drawn independently: the bit of
the true value is 1 with probability p*, each of the d - 1 others with
probability q*, so the number of set bits K of ANY honest report, whatever its
value, follows

    K ~ Binomial(d - 1, q*) + Bernoulli(p*)
    P[K > k] = p* P[X > k - 1] + (1 - p*) P[X > k],   X ~ Binomial(d - 1, q*).

``max_set_bits(alpha)`` is the least k with P[K > k] <= alpha, summed term by
term from the binomial pmf in log space (no normal approximation); the
collector refuses a report with more bits.  ``tally_sum_law`` gives E[K] and
Var[K], so the sum of an honest tally vector has a known law whatever the true
distribution.

>>> import random
>>> m = OUE(epsilon=1.0, domain_size=16)
>>> r = m.randomize(3, rng=random.Random(1))
>>> m.decode(m.encode(r)) == r
True
>>> limit = OUE(epsilon=1.0, domain_size=64).max_set_bits()   # more bits: implausible
>>> limit is not None and 17 < limit < 64
True
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import compress
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import SYSTEM_RNG, WORD, WORD_BITS, Rng, random_bytes, uniform_words, words
from ldp_core.base import (
    Design,
    Kind,
    Mechanism,
    OverIndices,
    Report,
    check_domain_size,
    check_index,
)
from ldp_core.binomial_tail import max_bits
from ldp_core.epsilon import (
    check_mechanism_epsilon,
    check_separated,
    log_up,
    threshold_at_least,
    threshold_at_most,
)
from ldp_core.mechanisms._bits import pack_bits, unpack_bits
from ldp_core.mechanisms._two_level import TwoLevel

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "MECHANISMS",
    "OUE",
    "SUE",
    "LongitudinalOUE",
    "LongitudinalSUE",
    "UnaryEncoding",
]


class _Unary(Mechanism):
    """Hooks of a unary encoding (one counter per bit), for both levels."""

    kind: ClassVar[Kind] = "frequency"

    @property
    def num_counters(self) -> int:
        return self.domain_size

    @property
    def report_bits(self) -> float:
        return float(self.domain_size)

    @property
    def payload_bytes(self) -> int:
        return (self.domain_size + 7) // 8

    def counters(self, report: Report) -> tuple[int, ...]:
        assert isinstance(report, tuple)
        return report

    def check_value(self, value: object) -> int:
        return check_index(value, self.domain_size)

    def simulate_tallies(
        self, values: npt.NDArray[Any], trials: int, gen: Any
    ) -> npt.NDArray[np.int64]:
        # Counters are independent across bits and reports given the values, for
        # both levels: C(v) = Bin(n_v, p*) + Bin(n - n_v, q*), exactly.
        import numpy as np

        index = self._check_indices(values)
        counts = np.bincount(index, minlength=self.domain_size)
        p, q = (float(x) for x in self.channel)
        shape = (trials, self.domain_size)
        ones = gen.binomial(counts, p, size=shape)
        ones += gen.binomial(len(index) - counts, q, size=shape)
        return ones.astype(np.int64)  # type: ignore[no-any-return]

    def audit_design(self) -> Design:
        # E = {bit 0 set and bit 1 clear}: P[E | 0] / P[E | 1] = p*(1-q*) / (q*(1-p*)).
        p, q = self.channel

        def event(r: Report) -> bool:
            assert isinstance(r, tuple)
            return 0 in r and 1 not in r

        def batch_event(bits: Any) -> Any:
            return bits[:, 0] & ~bits[:, 1]

        return Design(0, 1, event, batch_event, (p * (1 - q), q * (1 - p)))

    def max_set_bits(self, alpha: float = 1e-9) -> int | None:
        p, q = self.channel
        limit = max_bits(self.domain_size, p, q, alpha)
        return None if limit >= self.domain_size else limit

    def tally_sum_law(self) -> tuple[float, float]:
        p, q = (float(x) for x in self.channel)
        d = self.domain_size
        return p + (d - 1) * q, p * (1 - p) + (d - 1) * q * (1 - q)

    def encode(self, report: Report) -> str:
        assert isinstance(report, tuple)
        return pack_bits(report, self.domain_size)

    def decode(self, payload: object) -> tuple[int, ...]:
        return unpack_bits(payload, self.domain_size)


@dataclass(frozen=True)
class UnaryEncoding(_Unary, OverIndices):
    """Unary encoding with integer thresholds: P[bit=1] = one/2**32 or zero/2**32."""

    name: ClassVar[str] = "unary"
    declared_epsilon: float
    size: int
    one: int = field(init=False)
    zero: int = field(init=False)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        object.__setattr__(self, "declared_epsilon", check_mechanism_epsilon(epsilon))
        object.__setattr__(self, "size", check_domain_size(domain_size))
        one, zero = self._thresholds(self.declared_epsilon)
        object.__setattr__(self, "one", one)
        object.__setattr__(self, "zero", zero)
        check_separated(self.name, self.declared_epsilon, self.channel)

    @staticmethod
    def _thresholds(epsilon: float) -> tuple[int, int]:
        raise NotImplementedError


    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        return Fraction(self.one, WORD), Fraction(self.zero, WORD)

    @property
    def epsilon_actual(self) -> float:
        p, q = self.channel
        return log_up(p * (1 - q) / ((1 - p) * q))

    def describe(self) -> dict[str, object]:
        # The integer thresholds: P[bit = 1] = one / 2**32 (true bit), zero / 2**32.
        return {**super().describe(), "one": self.one, "zero": self.zero}

    def _perturb(self, value: int | float, rng: Rng) -> tuple[int, ...]:
        if rng is not SYSTEM_RNG:
            # Injected generators (tests, simulation, the memoising HMAC-DRBG of the
            # longitudinal mechanisms) keep the word-per-bit stream, so seeded and
            # memoised reports stay exactly what they were.
            return self._perturb_words(value, rng)
        # Bit i != v is 1 iff a uniform 32-bit word u_i < zero; bit v iff u_v < one.
        # u_i = top_i * 2**24 + low_i: the top byte alone decides unless it equals
        # zero >> 24 (probability 1/256), and only then are 24 low bits drawn.  Same
        # law as comparing whole words, a quarter of the entropy, and the scan over
        # the bits runs in C (bytes.translate + itertools.compress).
        size, zero = self.size, self.zero
        cut = zero >> 24
        below = _below_table(cut)
        top = random_bytes(size, rng)
        bits = list(compress(range(size), top.translate(below)))
        if cut in top:
            low = zero & 0xFFFFFF
            start = top.find(cut)
            while start != -1:
                if rng.getrandbits(24) < low:
                    bits.append(start)
                start = top.find(cut, start + 1)
            bits.sort()
        v = int(value)
        keep = rng.getrandbits(WORD_BITS) < self.one  # the true bit's own word
        at = bisect_left(bits, v)
        has = at < len(bits) and bits[at] == v
        if keep and not has:
            bits.insert(at, v)
        elif has and not keep:
            del bits[at]
        return tuple(bits)

    def _perturb_words(self, value: int | float, rng: Rng) -> tuple[int, ...]:
        # One uniform word per bit.  Every bit is first decided with the 0-bit
        # threshold; the true bit's own word is then compared with the 1-bit
        # threshold (zero < one, so the first pass can only under-set it).
        words = uniform_words(self.size, rng)
        zero = self.zero
        bits = [i for i, u in enumerate(words) if u < zero]
        v = int(value)
        if zero <= words[v] < self.one:
            bits.append(v)
            bits.sort()
        return tuple(bits)

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.bool_]:
        # One word per bit, compared with the 0-bit threshold, the true bit with the
        # 1-bit threshold: the word-per-bit law of ``_perturb_words``.
        import numpy as np

        n, d = len(values), self.size
        w = words(gen, n * d).reshape(n, d)
        bits = w < self.zero
        rows = np.arange(n)
        idx = values.astype(np.int64)
        bits[rows, idx] = w[rows, idx] < self.one
        return bits


@functools.lru_cache(maxsize=64)
def _below_table(cut: int) -> bytes:
    """The bytes.translate table mapping a top byte to 1 if it is below ``cut``, else 0."""
    return bytes(int(b < cut) for b in range(256))


@dataclass(frozen=True, init=False)
class SUE(UnaryEncoding):
    """Symmetric unary encoding (basic one-time RAPPOR)."""

    name: ClassVar[str] = "sue"

    @staticmethod
    def _thresholds(epsilon: float) -> tuple[int, int]:
        # p = e^(eps/2) / (1 + e^(eps/2)), q = 1 - p: ratio p^2 / (1-p)^2 = e^eps.
        # one < p * W strictly, zero = W - one, so the implemented ratio is < e^eps.
        half = math.exp(epsilon / 2)
        one = threshold_at_most(half / (1 + half))
        return one, WORD - one


@dataclass(frozen=True, init=False)
class OUE(UnaryEncoding):
    """Optimised unary encoding: p = 1/2, q = 1/(1 + e^eps)."""

    name: ClassVar[str] = "oue"
    auto_candidate: ClassVar[bool] = True

    @staticmethod
    def _thresholds(epsilon: float) -> tuple[int, int]:
        # ratio = (1/2)(1-q) / ((1/2) q) = (1-q)/q = e^eps at q = 1/(1+e^eps);
        # zero > q * W strictly, so the implemented (1-q)/q is < e^eps.
        return WORD // 2, threshold_at_least(1 / (1 + math.exp(epsilon)))


@dataclass(frozen=True)
class _LongitudinalUnary(_Unary, TwoLevel[UnaryEncoding]):
    """Permanent unary encoding (RAPPOR's PRR) per bit, then per-bit flips (IRR).

    IRR: P[S_i = 1 | B'_i = 1] = p2 = k, P[S_i = 1 | B'_i = 0] = q2 = 1 - k.
    Bits stay independent given the value, so one report is a unary encoding
    with the composed (p*, q*), and two values differ in two bits:
        eps_1 = ln[ p* (1 - q*) / ((1 - p*) q*) ].
    """

    @staticmethod
    def _compose(base: UnaryEncoding, keep: int) -> tuple[Fraction, Fraction]:
        # A bit with P[1] = p1 (true) or q1 (other), then a symmetric flip keeping
        # with k: P[1] = k P1 + (1 - k)(1 - P1).
        p1, q1 = base.channel
        k = Fraction(keep, WORD)
        return k * p1 + (1 - k) * (1 - p1), k * q1 + (1 - k) * (1 - q1)

    @staticmethod
    def _epsilon_of(base: UnaryEncoding, channel: tuple[Fraction, Fraction]) -> float:
        p, q = channel
        return log_up(p * (1 - q) / ((1 - p) * q))

    @staticmethod
    def _lowest_keep(base: UnaryEncoding) -> int:
        return WORD // 2

    def _instant(self, permanent: Report, rng: Rng) -> tuple[int, ...]:
        assert isinstance(permanent, tuple)
        # One uniform word per bit: bit i is B'_i when its word is < keep, else flipped.
        ones = set(permanent)
        keep = self.keep
        draws = uniform_words(self.base.size, rng)
        return tuple(i for i, u in enumerate(draws) if (i in ones) == (u < keep))

    def _instant_batch(self, permanent: Any, gen: Any) -> Any:
        flip = words(gen, permanent.size).reshape(permanent.shape) >= self.keep
        return permanent ^ flip


@dataclass(frozen=True)
class LongitudinalSUE(_LongitudinalUnary):
    """Basic RAPPOR: SUE(eps_inf) as the PRR, then a symmetric IRR."""

    name: ClassVar[str] = "sue"
    base_class: ClassVar[type[Mechanism]] = SUE


@dataclass(frozen=True)
class LongitudinalOUE(_LongitudinalUnary):
    """OUE(eps_inf) as the PRR, then a symmetric IRR."""

    name: ClassVar[str] = "oue"
    base_class: ClassVar[type[Mechanism]] = OUE


MECHANISMS: tuple[type[Mechanism], ...] = (SUE, OUE, LongitudinalSUE, LongitudinalOUE)
