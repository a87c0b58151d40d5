"""Optimised local hashing (OLH) over an exact, finite hash family.

The device picks a public seed s uniformly, hashes its value into g buckets
with h_s, and reports (s, GRR_g(h_s(v))).  A report (s, y) supports every value
v with h_s(v) = y.  The collector keeps one counter per (seed, bucket), so
storage and aggregation cost do not grow with the number of reports.

The family.  g is a prime; a value v in [0, d) is the vector of its L base-g
digits (g^L >= d).  Seeds are the points of the projective space PG(L-1, g):
the nonzero vectors a in GF(g)^L whose first nonzero coordinate is 1, and
h_a(v) = <a, v> mod g.  For v != v', h_a(v) = h_a(v') iff a lies on the
hyperplane orthogonal to v - v', which holds for exactly
(g^(L-1) - 1)/(g - 1) of the S = (g^L - 1)/(g - 1) seeds.  So EVERY pair of
values collides with the same probability

    c = (g^(L-1) - 1) / (g^L - 1)      (< 1/g; c = 0 when L = 1),

and the channel is pure and exact:

    p* = p,   q* = c p + (1 - c)(1 - p)/(g - 1),

with p = e^eps / (e^eps + g - 1) from the GRR over buckets.  A finite family
with non-uniform collisions (a fixed pool of random hash functions) biases the
estimator; this one cannot.  eps is the GRR's: for any (s, y),
P[s, y | v] / P[s, y | v'] = P[y | h_s(v)] / P[y | h_s(v')] <= e^eps.

Cost: S * g counters (about d to g*d); aggregation O(S g + g^L L log g) by an FFT.

>>> m = OLH(epsilon=1.0, domain_size=1024)
>>> m.g, m.num_seeds, m.num_counters
(3, 1093, 3279)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar

from ldp_core._rng import WORD, Rng
from ldp_core.base import Family, Kind, Mechanism, Report, check_domain_size, check_index
from ldp_core.epsilon import check_epsilon, log_up
from ldp_core.errors import ReportError
from ldp_core.grr import grr_keep_threshold

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["OLH", "choose_g"]

#: The largest tally vector OLH may ask the collector to keep.
MAX_COUNTERS = 1 << 22


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % k for k in range(2, math.isqrt(n) + 1))


def _digits_needed(g: int, domain_size: int) -> int:
    length, span = 1, g
    while span < domain_size:
        length, span = length + 1, span * g
    return length


def _family(g: int, domain_size: int) -> tuple[int, int, Fraction]:
    """(L, S, c) of the projective family for g buckets over d values."""
    length = _digits_needed(g, domain_size)
    seeds = (g**length - 1) // (g - 1)
    collide = Fraction(g ** (length - 1) - 1, g**length - 1)
    return length, seeds, collide


def _channel(epsilon: float, g: int, domain_size: int) -> tuple[Fraction, Fraction]:
    _, _, c = _family(g, domain_size)
    p = Fraction(grr_keep_threshold(epsilon, g), WORD)
    return p, c * p + (1 - c) * (1 - p) / (g - 1)


def choose_g(epsilon: float, domain_size: int) -> int:
    """The prime g with the lowest exact rare-value variance, within MAX_COUNTERS.

    The textbook optimum is g = e^eps + 1; with the exact family the best prime
    is searched around it.
    """
    best: tuple[float, int] | None = None
    upper = max(5, 2 * math.ceil(math.exp(epsilon) + 1) + 8)
    for g in range(2, upper + 1):
        if not _is_prime(g):
            continue
        _, seeds, _ = _family(g, domain_size)
        if seeds * g > MAX_COUNTERS:
            continue
        p, q = (float(x) for x in _channel(epsilon, g, domain_size))
        score = q * (1 - q) / (p - q) ** 2
        if best is None or score < best[0]:
            best = (score, g)
    if best is None:
        raise ValueError(f"domain_size {domain_size} needs more than {MAX_COUNTERS} OLH counters")
    return best[1]


@dataclass(frozen=True)
class OLH(Mechanism):
    """Optimised local hashing; see the module docstring for the family."""

    name: ClassVar[str] = "olh"
    kind: ClassVar[Kind] = "frequency"
    family: ClassVar[Family] = "hashed"
    declared_epsilon: float
    size: int
    g: int
    length: int = field(init=False)
    num_seeds: int = field(init=False)
    keep: int = field(init=False)

    def __init__(self, epsilon: float, domain_size: int, g: int | None = None) -> None:
        eps = check_epsilon(epsilon)
        d = check_domain_size(domain_size)
        if g is None:
            g = choose_g(eps, d)
        elif isinstance(g, bool) or not isinstance(g, int) or not _is_prime(g):
            raise ValueError(f"g must be a prime number of buckets, got {g!r}")
        length, seeds, _ = _family(g, d)
        object.__setattr__(self, "declared_epsilon", eps)
        object.__setattr__(self, "size", d)
        object.__setattr__(self, "g", g)
        object.__setattr__(self, "length", length)
        object.__setattr__(self, "num_seeds", seeds)
        object.__setattr__(self, "keep", grr_keep_threshold(eps, g))

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def domain_size(self) -> int:
        return self.size

    @property
    def collision(self) -> Fraction:
        """P[h_s(v) = h_s(v')] for any v != v', over the uniform seed."""
        return _family(self.g, self.size)[2]

    @property
    def hashing(self) -> OLH:
        """The hash family (seeds, g, h_s); a two-level OLH shares its base's."""
        return self

    @property
    def bucket_keep(self) -> Fraction:
        """P[reported bucket = true bucket]."""
        return Fraction(self.keep, WORD)

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        c, p = self.collision, self.bucket_keep
        return p, c * p + (1 - c) * (1 - p) / (self.g - 1)

    @property
    def epsilon_actual(self) -> float:
        p = self.bucket_keep
        return log_up(p * (self.g - 1) / (1 - p))

    @property
    def num_counters(self) -> int:
        return self.num_seeds * self.g

    @property
    def report_bits(self) -> float:
        return math.log2(self.num_seeds) + math.log2(self.g)

    def seed_vector(self, seed: int) -> tuple[int, ...]:
        """The projective point a_s: zeros, a leading 1, then base-g digits."""
        rest = seed
        for lead in range(self.length):
            block = self.g ** (self.length - 1 - lead)
            if rest < block:
                tail = _base_digits(rest, self.g, self.length - 1 - lead)
                return (0,) * lead + (1,) + tail
            rest -= block
        raise ValueError(f"seed {seed} not in [0, {self.num_seeds})")

    def bucket(self, seed: int, value: int) -> int:
        """h_seed(value)."""
        digits = _base_digits(value, self.g, self.length)
        return sum(a * x for a, x in zip(self.seed_vector(seed), digits, strict=True)) % self.g

    def counters(self, report: Report) -> tuple[int, ...]:
        assert isinstance(report, tuple)
        seed, bucket = report
        return (seed * self.g + bucket,)

    def encode(self, report: Report) -> list[int]:
        assert isinstance(report, tuple)
        return list(report)

    def decode(self, payload: object) -> tuple[int, int]:
        if (
            not isinstance(payload, list)
            or len(payload) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in payload)
        ):
            raise ReportError("payload_type", "payload must be a list [seed, bucket] of integers")
        seed, bucket = payload
        if not 0 <= seed < self.num_seeds:
            raise ReportError("seed_out_of_range", f"seed {seed} not in [0, {self.num_seeds})")
        if not 0 <= bucket < self.g:
            raise ReportError("bucket_out_of_range", f"bucket {bucket} not in [0, {self.g})")
        return seed, bucket

    def check_value(self, value: object) -> int:
        return check_index(value, self.size)

    def _perturb(self, value: int | float, rng: Rng) -> tuple[int, int]:
        seed = rng.randrange(self.num_seeds)
        true_bucket = self.bucket(seed, int(value))
        keep = int(rng.getrandbits(32) < self.keep)
        other = (true_bucket + 1 + rng.randrange(self.g - 1)) % self.g
        return seed, keep * true_bucket + (1 - keep) * other

    # -- server side (numpy, imported lazily) ------------------------------------

    def seed_matrix(self) -> npt.NDArray[np.int64]:
        """All seed vectors, shape (S, L) (computed once per (g, L), read-only)."""
        return _seed_matrix(self.g, self.length)

    def digit_matrix(self, values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Base-g digits (most significant first) of ``values``, shape (len, L)."""
        import numpy as np

        powers = self.g ** np.arange(self.length - 1, -1, -1, dtype=np.int64)
        return (values[:, None] // powers[None, :]) % self.g

    def support_counts(self, tallies: Sequence[int] | npt.NDArray[np.int64]) -> list[int]:
        """C(v) = sum over seeds s of T[s, h_s(v)], by a Fourier transform over GF(g)^L.

        With F(v) = C(v) on all of GF(g)^L, the transform is supported on the lines
        through the seeds: F^(0) = g^(L-1) n and F^(k a_s) = g^(L-1) sum_y T[s, y]
        w^(-k y) for k != 0 (w = e^(2 pi i / g)), because the character of k a_s is
        constant on each level set {v: <a_s, v> = y} and every other nonzero
        character sums to 0 over it.  Each nonzero w is k a_s for exactly one
        projective seed, so one FFT over the buckets of every seed and one inverse
        g^L-point FFT give C exactly (rounded; float64 is exact far beyond any
        realistic n): O(S g + g^L L log g) instead of O(S d).
        """
        import numpy as np

        table = np.asarray(tallies, dtype=np.int64)
        if table.shape != (self.num_counters,):
            raise ValueError(
                f"tally vector has shape {table.shape}, olh needs ({self.num_counters},)"
            )
        g, length = self.g, self.length
        table = table.reshape(self.num_seeds, g)
        spectrum = np.fft.fft(table.astype(np.float64), axis=1)
        full = np.zeros(g**length, dtype=np.complex128)
        full[0] = float(table.sum())
        seeds = self.seed_matrix()
        powers = g ** np.arange(length - 1, -1, -1, dtype=np.int64)
        for k in range(1, g):
            full[((k * seeds) % g) @ powers] = spectrum[:, k]
        counts = np.fft.ifftn(full.reshape((g,) * length)).real.ravel()[: self.size]
        return [int(x) for x in np.rint(counts * g ** (length - 1))]


@functools.lru_cache(maxsize=16)
def _seed_matrix(g: int, length: int) -> npt.NDArray[np.int64]:
    import numpy as np

    blocks = []
    for lead in range(length):
        free = length - 1 - lead
        tails = np.arange(g**free, dtype=np.int64)
        powers = g ** np.arange(free - 1, -1, -1, dtype=np.int64)
        block = np.zeros((g**free, length), dtype=np.int64)
        block[:, lead] = 1
        if free:
            block[:, lead + 1 :] = (tails[:, None] // powers[None, :]) % g
        blocks.append(block)
    matrix = np.concatenate(blocks)
    matrix.flags.writeable = False
    return matrix


def _base_digits(value: int, base: int, length: int) -> tuple[int, ...]:
    digits = [0] * length
    for i in range(length - 1, -1, -1):
        value, digits[i] = divmod(value, base)
    return tuple(digits)
