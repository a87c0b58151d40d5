"""Apple's count-mean sketch (CMS) and Hadamard count-mean sketch (HCMS), exactly.

Both hash the value with one of S public hash functions h_j into m buckets and
randomise the bucket; the collector keeps a sketch of S x m (CMS) or S x K x 2
(HCMS) counters whatever n, and a report (j, ...) supports every value u with
h_j(u) in the report's support.  Apple draws k hash functions at random, so two
values collide with a probability that varies by pair and the estimator is
biased for the unlucky pairs.  Here h_j is the projective family of
``ldp_core.mechanisms._projective`` (m prime): every pair of distinct values
collides on exactly the fraction c of the seeds, so both channels are pure and
exact, the generic estimator is unbiased and its variance (collisions included)
is the generic one.

CMS.  The report is (j, an m-bit vector): the one-hot vector of h_j(v), each
bit then kept with probability p = e^(eps/2)/(1 + e^(eps/2)) (flipped
otherwise).  p* = p; q* = c p + (1 - c)(1 - p).  Two values differ in two bits
of the one-hot vector (when they do not collide), so eps = ln[p^2/(1-p)^2].
On the wire: "j.<base64url bits>".

HCMS.  The report is (j, l, b): the coefficient l (uniform over K, a power of
two above m) of row h_j(v) + 1 of the Sylvester-Hadamard matrix, a sign bit
kept with probability p = e^eps/(1 + e^eps).  It supports u when u's row has
the reported sign at l: p* = p; rows of distinct buckets agree on half of the
coefficients, so q* = c p + (1 - c)/2; eps = ln[p/(1-p)].  One integer on the
wire, (j K + l) 2 + b, its own counter.  Decoding: one Walsh-Hadamard transform
per seed turns the sign counts into bucket supports, then the projective FFT
gives every value's support: O(S K log K + m^L L log m).

>>> import random
>>> m = CountMeanSketch(epsilon=2.0, domain_size=100, buckets=11)
>>> m.num_counters, m.collision
(132, Fraction(1, 12))
>>> r = m.randomize(42, rng=random.Random(1))
>>> m.decode(m.encode(r)) == r
True
>>> h = HadamardCountMeanSketch(epsilon=2.0, domain_size=100, buckets=11)
>>> h.num_counters, h.q_star > 0.5
(384, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng, uniform_words, words
from ldp_core.base import (
    Design,
    IntReport,
    Kind,
    Mechanism,
    OverIndices,
    Report,
    check_domain_size,
    need,
)
from ldp_core.binomial_tail import max_bits
from ldp_core.epsilon import check_mechanism_epsilon, check_separated, log_up, threshold_at_most
from ldp_core.errors import ReportError
from ldp_core.mechanisms._bits import pack_bits, unpack_bits
from ldp_core.mechanisms._projective import Projective, is_prime, projective
from ldp_core.mechanisms.hadamard import fwht

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MECHANISMS", "CountMeanSketch", "HadamardCountMeanSketch", "default_buckets"]

#: Apple's sketch width; a prime is taken at or above it (or above d when smaller).
DEFAULT_WIDTH = 1024


def default_buckets(domain_size: int) -> int:
    """The least prime >= min(d, 1024): no hashing at all for a small domain."""
    start = max(2, min(domain_size, DEFAULT_WIDTH))
    return next(n for n in range(start, 2 * start + 2) if is_prime(n))


def _buckets(params: dict[str, Any], name: str) -> int:
    d = need(params, "domain_size", name)
    m = params.get("buckets")
    return default_buckets(d) if m is None else int(m)


class _Sketch(OverIndices):
    """What both sketches share: (epsilon, d, m), the family and its collisions."""

    kind: ClassVar[Kind] = "frequency"
    declared_epsilon: float
    size: int
    buckets: int
    keep: int

    def _setup(self, epsilon: float, domain_size: int, buckets: int, keep_p: float) -> None:
        if isinstance(buckets, bool) or not isinstance(buckets, int) or not is_prime(buckets):
            raise ValueError(f"buckets must be a prime number, got {buckets!r}")
        object.__setattr__(self, "declared_epsilon", check_mechanism_epsilon(epsilon))
        object.__setattr__(self, "size", check_domain_size(domain_size))
        object.__setattr__(self, "buckets", buckets)
        object.__setattr__(self, "keep", threshold_at_most(keep_p))

    @classmethod
    def create(cls, params: dict[str, Any]) -> Mechanism:
        return cls(  # type: ignore[call-arg]
            need(params, "epsilon", cls.name),
            need(params, "domain_size", cls.name),
            buckets=_buckets(params, cls.name),
        )

    @property
    def family(self) -> Projective:
        return projective(self.buckets, self.size)

    @property
    def num_seeds(self) -> int:
        return self.family.num_seeds

    @property
    def collision(self) -> Fraction:
        return self.family.collision

    @property
    def p(self) -> Fraction:
        return Fraction(self.keep, WORD)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "buckets": self.buckets, "seeds": self.num_seeds}


@dataclass(frozen=True)
class CountMeanSketch(_Sketch):
    """Apple's CMS over the exact projective family; see the module docstring."""

    name: ClassVar[str] = "cms"
    declared_epsilon: float
    size: int
    buckets: int
    keep: int = field(init=False)

    def __init__(self, epsilon: float, domain_size: int, buckets: int | None = None) -> None:
        half = math.exp(check_mechanism_epsilon(epsilon) / 2)
        m = buckets or default_buckets(domain_size)
        # p = e^(eps/2)/(1 + e^(eps/2)), the threshold strictly below: (p/(1-p))^2 < e^eps.
        self._setup(epsilon, domain_size, m, half / (1 + half))
        check_separated(self.name, self.declared_epsilon, self.channel)

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        p, c = self.p, self.collision
        return p, c * p + (1 - c) * (1 - p)

    @property
    def epsilon_actual(self) -> float:
        p = self.p
        return log_up((p / (1 - p)) ** 2)

    @property
    def num_counters(self) -> int:
        return self.num_seeds * self.buckets

    @property
    def report_bits(self) -> float:
        return math.log2(self.num_seeds) + self.buckets

    def counters(self, report: Report) -> tuple[int, ...]:
        assert isinstance(report, tuple)
        seed, *bits = report
        return tuple(seed * self.buckets + b for b in bits)

    def encode(self, report: Report) -> str:
        assert isinstance(report, tuple)
        return f"{report[0]}.{pack_bits(report[1:], self.buckets)}"

    def decode(self, payload: object) -> tuple[int, ...]:
        if not isinstance(payload, str) or "." not in payload:
            raise ReportError("payload_type", "payload must be a string 'seed.<base64url bits>'")
        head, _, bits = payload.partition(".")
        if not (head.isdigit() and head.isascii() and len(head) <= 10):
            raise ReportError("payload_type", "the seed must be a decimal integer")
        seed = int(head)
        if seed >= self.num_seeds or str(seed) != head:
            raise ReportError("seed_out_of_range", f"seed {head} not in [0, {self.num_seeds})")
        return (seed, *unpack_bits(bits, self.buckets))

    def _perturb(self, value: int | float, rng: Rng) -> tuple[int, ...]:
        seed = rng.randrange(self.num_seeds)
        hashed = self.family.bucket(seed, int(value))
        # Bit b is 1 iff its word is below keep (b = h) or below W - keep (b != h).
        draws = uniform_words(self.buckets, rng)
        zero = WORD - self.keep
        bits = [b for b, u in enumerate(draws) if u < (self.keep if b == hashed else zero)]
        return (seed, *bits)

    def sample(self, values: npt.NDArray[Any], gen: Any) -> Any:
        import numpy as np

        n = len(values)
        seeds = gen.integers(0, self.num_seeds, size=n)
        hashed = self.family.hashes(seeds, values)
        w = words(gen, n * self.buckets).reshape(n, self.buckets)
        bits = w < WORD - self.keep
        rows = np.arange(n)
        bits[rows, hashed] = w[rows, hashed] < self.keep
        return seeds, bits

    def simulate_tallies(
        self, values: npt.NDArray[Any], trials: int, gen: Any
    ) -> npt.NDArray[np.int64]:
        # Given the seeds, bits are independent: T[j, b] = Bin(n_jb, p) + Bin(N_j - n_jb, 1-p)
        # with n_jb the reports of row j whose value hashes to b, exactly.
        import numpy as np

        index = self._check_indices(values)
        p, m = float(self.p), self.buckets
        out = np.empty((trials, self.num_counters), dtype=np.int64)
        for t in range(trials):
            seeds = gen.integers(0, self.num_seeds, size=len(index))
            hits = np.bincount(seeds * m + self.family.hashes(seeds, index),
                               minlength=self.num_counters)
            rows = np.repeat(np.bincount(seeds, minlength=self.num_seeds), m)
            out[t] = gen.binomial(hits, p) + gen.binomial(rows - hits, 1 - p)
        return out

    def support_counts(self, tallies: Any) -> list[int]:
        return self.family.support_counts(tallies)

    def audit_design(self) -> Design:
        # E = {bit h_j(0) set and bit h_j(1) clear}, impossible when they collide:
        # P[E | 0] = (1-c) p^2, P[E | 1] = (1-c)(1-p)^2: ratio (p/(1-p))^2.
        p, c = self.p, self.collision

        def event(r: Report) -> bool:
            assert isinstance(r, tuple)
            seed, bits = r[0], set(r[1:])
            h0, h1 = self.family.bucket(seed, 0), self.family.bucket(seed, 1)
            return h0 != h1 and h0 in bits and h1 not in bits

        def batch_event(batch: Any) -> Any:
            import numpy as np

            seeds, bits = batch
            rows = np.arange(len(seeds))
            h0 = self.family.hashes(seeds, np.zeros_like(seeds))
            h1 = self.family.hashes(seeds, np.ones_like(seeds))
            return (h0 != h1) & bits[rows, h0] & ~bits[rows, h1]

        return Design(0, 1, event, batch_event, ((1 - c) * p * p, (1 - c) * (1 - p) ** 2))

    def max_set_bits(self, alpha: float = 1e-9) -> int | None:
        # Within the report's row: one bit at p, m - 1 at 1 - p, all independent.
        p = self.p
        limit = max_bits(self.buckets, p, 1 - p, alpha)
        return None if limit >= self.buckets else limit

    def tally_sum_law(self) -> tuple[float, float]:
        p, m = float(self.p), self.buckets
        return p + (m - 1) * (1 - p), m * p * (1 - p)


@dataclass(frozen=True)
class HadamardCountMeanSketch(_Sketch, IntReport):
    """Apple's HCMS over the exact projective family; see the module docstring."""

    name: ClassVar[str] = "hcms"
    declared_epsilon: float
    size: int
    buckets: int
    keep: int = field(init=False)

    def __init__(self, epsilon: float, domain_size: int, buckets: int | None = None) -> None:
        e = math.exp(check_mechanism_epsilon(epsilon))
        m = buckets or default_buckets(domain_size)
        # p = e^eps/(1 + e^eps), the threshold strictly below: p/(1-p) < e^eps.
        self._setup(epsilon, domain_size, m, e / (1 + e))
        check_separated(self.name, self.declared_epsilon, self.channel)

    @property
    def width(self) -> int:
        """K: a power of two above m (bucket b uses Hadamard row b + 1)."""
        return 1 << self.buckets.bit_length()

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        p, c = self.p, self.collision
        return p, c * p + (1 - c) / 2

    @property
    def epsilon_actual(self) -> float:
        p = self.p
        return log_up(p / (1 - p))

    @property
    def num_counters(self) -> int:
        return self.num_seeds * self.width * 2

    @property
    def report_bits(self) -> float:
        return math.log2(self.num_counters)

    def _code(self, seed: Any, column: Any, bit: Any) -> Any:
        return (seed * self.width + column) * 2 + bit

    def _perturb(self, value: int | float, rng: Rng) -> int:
        seed = rng.randrange(self.num_seeds)
        row = self.family.bucket(seed, int(value)) + 1
        column = rng.getrandbits(self.width.bit_length() - 1)
        kept = int(rng.getrandbits(32) < self.keep)
        positive = 1 - ((row & column).bit_count() & 1)
        return int(self._code(seed, column, positive ^ (1 - kept)))

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.int64]:
        from ldp_core.mechanisms.hadamard import _parities

        n = len(values)
        seeds = gen.integers(0, self.num_seeds, size=n)
        rows = self.family.hashes(seeds, values) + 1
        columns = gen.integers(0, self.width, size=n)
        kept = (words(gen, n) < self.keep).astype("int64")
        return self._code(seeds, columns, (1 - _parities(rows & columns)) ^ (1 - kept))  # type: ignore[no-any-return]

    def output_distribution(self, value: int) -> npt.NDArray[np.float64]:
        import numpy as np

        from ldp_core.mechanisms.hadamard import _parities

        p = float(self.p)
        rows = self.family.buckets_of(value)[:, None] + 1
        positive = 1 - _parities(rows & np.arange(self.width)[None, :])
        dist = np.empty((self.num_seeds, self.width, 2))
        dist[:, :, 1] = np.where(positive == 1, p, 1 - p)
        dist[:, :, 0] = 1 - dist[:, :, 1]
        flat = dist.ravel()
        return np.asarray(flat / flat.sum(), dtype=np.float64)

    def support_counts(self, tallies: Any) -> list[int]:
        import numpy as np

        table = np.asarray(tallies, dtype=np.int64)
        if table.shape != (self.num_counters,):
            raise ValueError(f"tally vector has shape {table.shape}, need ({self.num_counters},)")
        signs = table.reshape(self.num_seeds, self.width, 2)
        totals = signs.sum(axis=(1, 2))
        spectrum = fwht(signs[:, :, 1] - signs[:, :, 0])
        buckets = (totals[:, None] + spectrum[:, 1 : self.buckets + 1]) // 2
        return self.family.support_counts(buckets.ravel())

    def audit_design(self) -> Design:
        # E = {supports 0 and not 1}: the seed separates them (1 - c), their rows
        # differ at half the columns, then the sign decides: (1-c)p/2 vs (1-c)(1-p)/2.
        p, c = self.p, self.collision

        def supports(code: int, value: int) -> bool:
            seed, rest = divmod(code, 2 * self.width)
            column, bit = divmod(rest, 2)
            row = self.family.bucket(seed, value) + 1
            return bit == 1 - ((row & column).bit_count() & 1)

        def event(r: Report) -> bool:
            assert isinstance(r, int)
            return supports(r, 0) and not supports(r, 1)

        def batch_event(codes: Any) -> Any:
            import numpy as np

            from ldp_core.mechanisms.hadamard import _parities

            seeds, rest = np.divmod(codes, 2 * self.width)
            columns, bits = np.divmod(rest, 2)

            def positive(value: int) -> Any:
                rows = self.family.hashes(seeds, np.full_like(seeds, value)) + 1
                return 1 - _parities(rows & columns)

            return (bits == positive(0)) & (bits != positive(1))

        return Design(0, 1, event, batch_event, ((1 - c) * p / 2, (1 - c) * (1 - p) / 2))


MECHANISMS: tuple[type[Mechanism], ...] = (CountMeanSketch, HadamardCountMeanSketch)
