"""Unary encodings: symmetric (SUE, basic one-time RAPPOR) and optimised (OUE).

The value v becomes a d-bit vector with only bit v set; every bit is then
reported independently: a 1 stays 1 with probability p, a 0 becomes 1 with
probability q.  Bit v supports value v, so p* = p and q* = q.

Neighbouring inputs differ in two bits, so
    eps = ln[ p (1-q) / ((1-p) q) ].
SUE: p = e^(eps/2) / (1 + e^(eps/2)), q = 1 - p.
OUE: p = 1/2, q = 1 / (1 + e^eps)   (Wang et al. 2017, minimum variance).

A report is the sorted tuple of its set bits; on the wire it is the bit vector,
packed little-endian within bytes, base64url without padding.

>>> import random
>>> m = OUE(epsilon=1.0, domain_size=16)
>>> r = m.randomize(3, rng=random.Random(1))
>>> m.decode(m.encode(r)) == r
True
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
from bisect import bisect_left
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import compress
from typing import ClassVar

from ldp_core._rng import SYSTEM_RNG, WORD, WORD_BITS, Rng, random_bytes, uniform_words
from ldp_core.base import Family, Kind, Mechanism, Report, check_domain_size, check_index
from ldp_core.epsilon import check_epsilon, log_up, threshold_at_least, threshold_at_most
from ldp_core.errors import ReportError

__all__ = ["OUE", "SUE", "UnaryEncoding"]


@dataclass(frozen=True)
class UnaryEncoding(Mechanism):
    """Unary encoding with integer thresholds: P[bit=1] = one/2**32 or zero/2**32."""

    name: ClassVar[str] = "unary"
    kind: ClassVar[Kind] = "frequency"
    family: ClassVar[Family] = "unary"
    declared_epsilon: float
    size: int
    one: int = field(init=False)
    zero: int = field(init=False)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        object.__setattr__(self, "declared_epsilon", check_epsilon(epsilon))
        object.__setattr__(self, "size", check_domain_size(domain_size))
        one, zero = self._thresholds(self.declared_epsilon)
        object.__setattr__(self, "one", one)
        object.__setattr__(self, "zero", zero)

    @staticmethod
    def _thresholds(epsilon: float) -> tuple[int, int]:
        raise NotImplementedError

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def domain_size(self) -> int:
        return self.size

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        return Fraction(self.one, WORD), Fraction(self.zero, WORD)

    @property
    def epsilon_actual(self) -> float:
        p, q = self.channel
        return log_up(p * (1 - q) / ((1 - p) * q))

    @property
    def num_counters(self) -> int:
        return self.size

    @property
    def report_bits(self) -> float:
        return float(self.size)

    @property
    def payload_bytes(self) -> int:
        return (self.size + 7) // 8

    def counters(self, report: Report) -> tuple[int, ...]:
        assert isinstance(report, tuple)
        return report

    def check_value(self, value: object) -> int:
        return check_index(value, self.size)

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

    def encode(self, report: Report) -> str:
        assert isinstance(report, tuple)
        packed = bytearray(self.payload_bytes)
        for i in report:
            packed[i >> 3] |= 1 << (i & 7)
        return base64.urlsafe_b64encode(bytes(packed)).rstrip(b"=").decode("ascii")

    def decode(self, payload: object) -> tuple[int, ...]:
        if not isinstance(payload, str):
            raise ReportError(
                "payload_type", f"payload must be a base64url string, got {type(payload).__name__}"
            )
        expected = math.ceil(self.payload_bytes * 4 / 3)
        if len(payload) != expected:
            raise ReportError(
                "bitvector_length",
                f"bit vector of {self.size} bits is {expected} base64url characters, "
                f"got {len(payload)}",
            )
        try:
            raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        except (binascii.Error, ValueError):
            raise ReportError("payload_encoding", "payload is not base64url") from None
        if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != payload:
            raise ReportError("payload_encoding", "payload is not canonical base64url")
        if self.size % 8 and raw[-1] >> (self.size % 8):
            raise ReportError(
                "bitvector_length", f"bits set beyond the {self.size} bits of the vector"
            )
        return _set_bits(raw)


@functools.lru_cache(maxsize=64)
def _below_table(cut: int) -> bytes:
    """The bytes.translate table mapping a top byte to 1 if it is below ``cut``, else 0."""
    return bytes(int(b < cut) for b in range(256))


def _set_bits(raw: bytes) -> tuple[int, ...]:
    """Indices of the set bits of a little-endian packed vector, ascending."""
    out = []
    for byte_index, byte in enumerate(raw):
        base = byte_index << 3
        while byte:
            low = byte & -byte
            out.append(base + low.bit_length() - 1)
            byte ^= low
    return tuple(out)


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

    @staticmethod
    def _thresholds(epsilon: float) -> tuple[int, int]:
        # ratio = (1/2)(1-q) / ((1/2) q) = (1-q)/q = e^eps at q = 1/(1+e^eps);
        # zero > q * W strictly, so the implemented (1-q)/q is < e^eps.
        return WORD // 2, threshold_at_least(1 / (1 + math.exp(epsilon)))
