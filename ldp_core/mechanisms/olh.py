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

Two levels: ``ldp_core.mechanisms.olh_memo.LongitudinalOLH`` (a permanent GRR
over the d values at eps_inf, memoised, then a fresh OLH report of it).

>>> m = OLH(epsilon=1.0, domain_size=1024)
>>> m.g, m.num_seeds, m.num_counters
(3, 1093, 3279)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng
from ldp_core.base import (
    Design,
    Kind,
    Mechanism,
    OverIndices,
    Report,
    check_domain_size,
    check_index,
    need,
)
from ldp_core.epsilon import check_mechanism_epsilon, check_separated, log_up
from ldp_core.errors import ReportError
from ldp_core.mechanisms._projective import (
    Projective,
    family,
    is_prime,
    projective,
)
from ldp_core.mechanisms.grr import grr_keep_threshold, grr_step, grr_steps

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MAX_COUNTERS", "MECHANISMS", "OLH", "Hashed", "choose_g"]

#: The largest tally vector OLH may ask the collector to keep.
MAX_COUNTERS = 1 << 22


def _channel(epsilon: float, g: int, domain_size: int) -> tuple[Fraction, Fraction]:
    _, _, c = family(g, domain_size)
    p = Fraction(grr_keep_threshold(epsilon, g), WORD)
    return p, c * p + (1 - c) * (1 - p) / (g - 1)


def choose_g(epsilon: float, domain_size: int) -> int:
    """The prime g with the lowest exact rare-value variance, within MAX_COUNTERS.

    The textbook optimum is g = e^eps + 1; with the exact family the best prime
    is searched around it.
    """
    best: tuple[float, int] | None = None
    # Past the first prime >= d the family has one seed (L = 1): a GRR over g >= d
    # buckets, whose variance only grows with g.  So the search is bounded by d
    # whatever epsilon is (eps = 50 would otherwise loop to e^50).
    upper = max(5, 2 * math.ceil(math.exp(min(epsilon, 30.0)) + 1) + 8)
    first_prime_past_d = next(n for n in range(domain_size, 2 * domain_size + 3) if is_prime(n))
    upper = min(upper, first_prime_past_d)
    for g in range(2, upper + 1):
        if not is_prime(g):
            continue
        _, seeds, _ = family(g, domain_size)
        if seeds * g > MAX_COUNTERS:
            continue
        p, q = (float(x) for x in _channel(epsilon, g, domain_size))
        score = q * (1 - q) / (p - q) ** 2
        if best is None or score < best[0]:
            best = (score, g)
    if best is None:
        raise ValueError(f"domain_size {domain_size} needs more than {MAX_COUNTERS} OLH counters")
    return best[1]


class Hashed(Mechanism):
    """Hooks of local hashing, for both levels: reports (seed, bucket) over the exact
    projective family ``family``, with P[bucket kept] = ``bucket_keep``."""

    kind: ClassVar[Kind] = "frequency"

    @property
    def family(self) -> Projective:
        """The hash family (seeds, g, h_s); a two-level OLH shares its base's."""
        return projective(self.g, self.domain_size)

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
        return self.family.collision

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
        return self.family.bucket(seed, value)

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
        return self.family.support_counts(tallies)

    # -- vectorised hooks ----------------------------------------------------------

    def batch_counters(self, batch: Any) -> npt.NDArray[np.int64]:
        seeds, buckets = batch
        return seeds * self.g + buckets  # type: ignore[no-any-return]

    def output_distribution(self, value: int) -> npt.NDArray[np.float64]:
        import numpy as np

        keep = float(self.bucket_keep)
        g, seeds = self.g, self.num_seeds
        buckets = self.family.buckets_of(value)
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
            hashes = self.family.hashes
            return (y == hashes(seeds, zeros)) & (y != hashes(seeds, ones))

        return Design(0, 1, event, batch_event, ((1 - c) * keep, (1 - c) * (1 - keep) / (g - 1)))


@dataclass(frozen=True)
class OLH(Hashed, OverIndices):
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
        eps = check_mechanism_epsilon(epsilon)
        d = check_domain_size(domain_size)
        if g is None:
            g = choose_g(eps, d)
        elif isinstance(g, bool) or not isinstance(g, int) or not is_prime(g):
            raise ValueError(f"g must be a prime number of buckets, got {g!r}")
        length, seeds, _ = family(g, d)
        object.__setattr__(self, "declared_epsilon", eps)
        object.__setattr__(self, "size", d)
        object.__setattr__(self, "g", g)
        object.__setattr__(self, "length", length)
        object.__setattr__(self, "num_seeds", seeds)
        object.__setattr__(self, "keep", grr_keep_threshold(eps, g))
        check_separated(self.name, eps, self.channel)

    @classmethod
    def create(cls, params: dict[str, Any]) -> OLH:
        return cls(
            need(params, "epsilon", cls.name),
            need(params, "domain_size", cls.name),
            g=params.get("g"),
        )

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

    def _perturb(self, value: int | float, rng: Rng) -> tuple[int, int]:
        seed = rng.randrange(self.num_seeds)
        return seed, grr_step(self.bucket(seed, int(value)), self.keep, self.g, rng)

    def sample(self, values: npt.NDArray[Any], gen: Any) -> Any:
        seeds = gen.integers(0, self.num_seeds, size=len(values))
        hashed = self.family.hashes(seeds, values)
        return seeds, grr_steps(hashed, self.keep, self.g, gen)


MECHANISMS: tuple[type[Mechanism], ...] = (OLH,)
