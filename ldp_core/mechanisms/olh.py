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
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng
from ldp_core.base import (
    Design,
    Kind,
    Mechanism,
    Report,
    check_domain_size,
    check_index,
    need,
)
from ldp_core.epsilon import check_epsilon, log_up
from ldp_core.errors import ReportError
from ldp_core.mechanisms._two_level import TwoLevel
from ldp_core.mechanisms.grr import grr_compose, grr_keep_threshold, grr_step, grr_steps

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MECHANISMS", "OLH", "LongitudinalOLH", "choose_g"]

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


class _Hashed(Mechanism):
    """Hooks of local hashing, for both levels: reports (seed, bucket) over the exact
    projective family of ``hashing``, with P[bucket kept] = ``bucket_keep``."""

    kind: ClassVar[Kind] = "frequency"

    @property
    def hashing(self) -> OLH:
        """The hash family (seeds, g, h_s); a two-level OLH shares its base's."""
        raise NotImplementedError

    @property
    def bucket_keep(self) -> Fraction:
        """P[reported bucket = true bucket]."""
        raise NotImplementedError

    # The number of buckets and of seeds (fields of OLH, the base's for two levels).
    g: int
    num_seeds: int

    @property
    def collision(self) -> Fraction:
        """P[h_s(v) = h_s(v')] for any v != v', over the uniform seed."""
        h = self.hashing
        return _family(h.g, h.size)[2]

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        c, p = self.collision, self.bucket_keep
        return p, c * p + (1 - c) * (1 - p) / (self.g - 1)

    @property
    def num_counters(self) -> int:
        return self.num_seeds * self.g

    @property
    def report_bits(self) -> float:
        return math.log2(self.num_seeds) + math.log2(self.g)

    def bucket(self, seed: int, value: int) -> int:
        """h_seed(value)."""
        h = self.hashing
        digits = _base_digits(value, h.g, h.length)
        return sum(a * x for a, x in zip(h.seed_vector(seed), digits, strict=True)) % h.g

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
        return check_index(value, self.domain_size)

    def support_counts(self, tallies: Any) -> list[int]:
        return _support_counts(self.hashing, tallies)

    # -- vectorised hooks ----------------------------------------------------------

    def hashes(self, seeds: npt.NDArray[np.int64], values: npt.NDArray[np.int64]) -> Any:
        """h_seed(value) elementwise (a cached table when small)."""
        h = self.hashing
        table = _hash_table(h.g, h.length, h.num_seeds, h.size)
        if table is not None:
            return table[seeds, values].astype("int64")
        return (h.seed_matrix()[seeds] * h.digit_matrix(values)).sum(axis=1) % h.g

    def batch_counters(self, batch: Any) -> npt.NDArray[np.int64]:
        seeds, buckets = batch
        return seeds * self.g + buckets  # type: ignore[no-any-return]

    def output_distribution(self, value: int) -> npt.NDArray[np.float64]:
        import numpy as np

        h = self.hashing
        keep = float(self.bucket_keep)
        g, seeds = h.g, h.num_seeds
        buckets = (h.seed_matrix() @ h.digit_matrix(np.array([value]))[0]) % g
        table = np.full((seeds, g), (1 - keep) / (g - 1))
        table[np.arange(seeds), buckets] = keep
        flat = (table / seeds).ravel()
        return np.asarray(flat / flat.sum(), dtype=np.float64)

    def audit_design(self) -> Design:
        # E = {the report supports 0 and not 1}: the seed separates 0 and 1 with
        # probability 1 - c, then the bucket GRR decides: ratio P (g-1)/(1-P).
        c, keep, g = self.collision, self.bucket_keep, self.g

        def event(r: Report) -> bool:
            assert isinstance(r, tuple)
            seed, y = r
            return self.bucket(seed, 0) == y and self.bucket(seed, 1) != y

        def batch_event(batch: Any) -> Any:
            import numpy as np

            seeds, y = batch
            zeros, ones = np.zeros_like(seeds), np.ones_like(seeds)
            return (y == self.hashes(seeds, zeros)) & (y != self.hashes(seeds, ones))

        return Design(0, 1, event, batch_event, ((1 - c) * keep, (1 - c) * (1 - keep) / (g - 1)))


@dataclass(frozen=True)
class OLH(_Hashed):
    """Optimised local hashing; see the module docstring for the family."""

    name: ClassVar[str] = "olh"
    auto_candidate: ClassVar[bool] = True
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

    @classmethod
    def create(cls, params: dict[str, Any]) -> OLH:
        return cls(
            need(params, "epsilon", cls.name),
            need(params, "domain_size", cls.name),
            g=params.get("g"),
        )

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def domain_size(self) -> int:
        return self.size

    @property
    def hashing(self) -> OLH:
        """The hash family (seeds, g, h_s); a two-level OLH shares its base's."""
        return self

    @property
    def bucket_keep(self) -> Fraction:
        """P[reported bucket = true bucket]."""
        return Fraction(self.keep, WORD)

    @property
    def epsilon_actual(self) -> float:
        p = self.bucket_keep
        return log_up(p * (self.g - 1) / (1 - p))

    def describe(self) -> dict[str, object]:
        # The hash family (g buckets, num_seeds seeds) and the bucket keep threshold.
        return {**super().describe(), "g": self.g, "num_seeds": self.num_seeds,
                "keep": self.keep}

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

    def _perturb(self, value: int | float, rng: Rng) -> tuple[int, int]:
        seed = rng.randrange(self.num_seeds)
        return seed, grr_step(self.bucket(seed, int(value)), self.keep, self.g, rng)

    def sample(self, values: npt.NDArray[Any], gen: Any) -> Any:
        seeds = gen.integers(0, self.num_seeds, size=len(values))
        hashed = self.hashes(seeds, values.astype("int64"))
        return seeds, grr_steps(hashed, self.keep, self.g, gen)

    # -- server side (numpy, imported lazily) ------------------------------------

    def seed_matrix(self) -> npt.NDArray[np.int64]:
        """All seed vectors, shape (S, L) (computed once per (g, L), read-only)."""
        return _seed_matrix(self.g, self.length)

    def digit_matrix(self, values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Base-g digits (most significant first) of ``values``, shape (len, L)."""
        import numpy as np

        powers = self.g ** np.arange(self.length - 1, -1, -1, dtype=np.int64)
        return (values[:, None] // powers[None, :]) % self.g


@dataclass(frozen=True)
class LongitudinalOLH(_Hashed, TwoLevel[OLH]):
    """Permanent (seed, GRR_g(h_seed(v))) at eps_inf, then GRR over g on the bucket.

    The seed is part of the permanent response and kept.  The bucket passes two
    GRRs over g, i.e. one GRR with keep P = p1 p2 + (1 - p1)(1 - p2)/(g - 1),
    so one report is an OLH report with bucket keep P (same hash family):
        p* = P, q* = c P + (1 - c)(1 - P)/(g - 1),
        eps_1 = ln[ P (g - 1) / (1 - P) ]   (the bucket GRR's epsilon).
    """

    name: ClassVar[str] = "olh"
    base_class: ClassVar[type[Mechanism]] = OLH

    @staticmethod
    def _bucket_keep(base: OLH, keep: int) -> Fraction:
        return grr_compose(base.bucket_keep, base.g, keep)[0]

    @staticmethod
    def _compose(base: OLH, keep: int) -> tuple[Fraction, Fraction]:
        c, p = base.collision, LongitudinalOLH._bucket_keep(base, keep)
        return p, c * p + (1 - c) * (1 - p) / (base.g - 1)

    @staticmethod
    def _epsilon_of(base: OLH, channel: tuple[Fraction, Fraction]) -> float:
        p = channel[0]
        return log_up(p * (base.g - 1) / (1 - p))

    @staticmethod
    def _lowest_keep(base: OLH) -> int:
        return -(-WORD // base.g)

    @property
    def hashing(self) -> OLH:
        """The hash family (seeds, g, h_s), shared with the permanent level."""
        return self.base

    @property
    def bucket_keep(self) -> Fraction:
        """P[reported bucket = true bucket], over both levels."""
        return self._bucket_keep(self.base, self.keep)

    @property
    def g(self) -> int:  # type: ignore[override]
        return self.base.g

    @property
    def num_seeds(self) -> int:  # type: ignore[override]
        return self.base.num_seeds

    def _instant(self, permanent: Report, rng: Rng) -> tuple[int, int]:
        assert isinstance(permanent, tuple)
        seed, bucket = permanent
        return seed, grr_step(bucket, self.keep, self.base.g, rng)

    def _instant_batch(self, permanent: Any, gen: Any) -> Any:
        seeds, buckets = permanent
        return seeds, grr_steps(buckets, self.keep, self.base.g, gen)

    @classmethod
    def _permanent_for(cls, epsilon: float, epsilon_inf: float, params: dict[str, Any]) -> OLH:
        # g is chosen for the per-report epsilon: the estimator sees single reports.
        d = check_domain_size(need(params, "domain_size", cls.name))
        return OLH(epsilon_inf, d, g=choose_g(epsilon, d))


MECHANISMS: tuple[type[Mechanism], ...] = (OLH, LongitudinalOLH)


def _support_counts(olh: OLH, tallies: Sequence[int] | npt.NDArray[np.int64]) -> list[int]:
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
        if table.shape != (olh.num_counters,):
            raise ValueError(
                f"tally vector has shape {table.shape}, olh needs ({olh.num_counters},)"
            )
        g, length = olh.g, olh.length
        table = table.reshape(olh.num_seeds, g)
        spectrum = np.fft.fft(table.astype(np.float64), axis=1)
        full = np.zeros(g**length, dtype=np.complex128)
        full[0] = float(table.sum())
        seeds = olh.seed_matrix()
        powers = g ** np.arange(length - 1, -1, -1, dtype=np.int64)
        for k in range(1, g):
            full[((k * seeds) % g) @ powers] = spectrum[:, k]
        counts = np.fft.ifftn(full.reshape((g,) * length)).real.ravel()[: olh.size]
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


@functools.lru_cache(maxsize=4)
def _hash_table(g: int, length: int, seeds: int, size: int) -> Any:
    """h_s(v) for every seed and value as uint8/uint16 (None above 2**24 cells)."""
    import numpy as np

    if seeds * size > 1 << 24:
        return None
    powers = g ** np.arange(length - 1, -1, -1, dtype=np.int64)
    digits = (np.arange(size, dtype=np.int64)[:, None] // powers[None, :]) % g
    dtype = np.uint8 if g < 256 else np.uint16
    table = ((_seed_matrix(g, length) @ digits.T) % g).astype(dtype)
    table.flags.writeable = False
    return table
