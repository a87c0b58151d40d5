"""Two-level OLH: a memoised GRR over the values, then a fresh OLH report of it.

No field of a report is constant per device: the permanent level u = GRR_d(v)
at eps_inf is memoised, and every report is a one-level OLH report of u with
a new seed from the OS CSPRNG.  The channel, eps_1 and the lifetime bound are
derived in ``LongitudinalOLH``'s docstring; the one-level hooks it shares
(seed, bucket, the projective family) are ``olh.Hashed``.

>>> from ldp_core import longitudinal
>>> m = longitudinal("olh", epsilon=1.0, epsilon_inf=4.0, domain_size=16)
>>> m.levels, m.g
(2, 5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng, resolve
from ldp_core.base import (
    Design,
    Mechanism,
    Report,
    check_domain_size,
    need,
)
from ldp_core.epsilon import check_mechanism_epsilon, log_up
from ldp_core.mechanisms._projective import (
    Projective,
    bucket_sizes,
    family,
    is_prime,
    projective,
    smallest_bucket,
)
from ldp_core.mechanisms.grr import GRR, grr_keep_threshold, grr_step, grr_steps
from ldp_core.mechanisms.olh import MAX_COUNTERS, Hashed
from ldp_core.memo import HmacDrbg, permanent_seed

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MECHANISMS", "LongitudinalOLH", "choose_memo_g"]


def _memo_ratio(p1: Fraction, q1: Fraction, p2: Fraction, g: int, d: int, n: int) -> Fraction:
    """P[s, y | v] / P[s, y | v'] when y = h_s(v) != h_s(v') and n values hash to y.

    P[s, y | v] = (1/S) sum_u P1[u | v] P2[y | h_s(u)] = (1/S) [q1 A + (p1 - q1) P2[y | h_s(v)]]
    with A = n p2 + (d - n) q2 the sum over all u, so only n and whether v, v'
    hash to y matter.
    """
    q2 = (1 - p2) / (g - 1)
    spread = d * q2 + n * (p2 - q2)
    return (q1 * spread + (p1 - q1) * p2) / (q1 * spread + (p1 - q1) * q2)


def _memo_variance(epsilon: float, p1: float, g: int, d: int) -> float:
    """Rare-value variance x n of the memoised OLH over g buckets, in floats (to choose g)."""
    q1 = (1 - p1) / (d - 1)
    collide = float(family(g, d)[2])
    p2 = grr_keep_threshold(epsilon, g) / WORD
    rest = collide * p2 + (1 - collide) * (1 - p2) / (g - 1)
    p, q = p1 * p2 + (1 - p1) * rest, q1 * p2 + (1 - q1) * rest
    return q * (1 - q) / (p - q) ** 2


def choose_memo_g(epsilon: float, p1: float, domain_size: int) -> int:
    """The prime g with the lowest rare-value variance of the memoised OLH at eps_2 = eps.

    Every prime up to the first one >= d (past it the family is one GRR over
    g >= d buckets, no better), within MAX_COUNTERS.

    >>> choose_memo_g(1.0, 0.8, 16), choose_memo_g(1.0, 0.0072, 1024)   # eps_inf ~ 4, ~ 2
    (5, 3)
    """
    best: tuple[float, int] | None = None
    first_prime_past_d = next(n for n in range(domain_size, 2 * domain_size + 3) if is_prime(n))
    for g in range(2, first_prime_past_d + 1):
        if not is_prime(g) or family(g, domain_size)[1] * g > MAX_COUNTERS:
            continue
        score = _memo_variance(epsilon, p1, g, domain_size)
        if best is None or score < best[0]:
            best = (score, g)
    if best is None or not math.isfinite(best[0]):
        raise ValueError(f"epsilon {epsilon} is too small for a two-level olh over {domain_size}")
    return best[1]


@dataclass(frozen=True)
class LongitudinalOLH(Hashed, Mechanism):
    """Memoised OLH with nothing constant per device on the wire.

    Permanent level: u = GRR_d(v) at eps_inf (``base``), memoised per (secret,
    context, value) exactly as two-level GRR's.  Instantaneous level: a fresh
    one-level OLH report of u at eps_2 = the requested epsilon, (s, GRR_g(h_s(u)))
    with s uniform from the OS CSPRNG and the bucket kept with probability
    P2 = keep / 2**32, keep = ``grr_keep_threshold(epsilon, g)``.  Every report
    draws a new seed and its bucket is a noisy function of u, so no field is
    constant per device; any number of reports is a post-processing of u:
    eps_inf per distinct value, lifetime.

    Why eps_2 is the requested epsilon and not larger: u is a per-device constant,
    and a report says as much about u as its instantaneous level lets it.  Solving
    eps_2 up until the composed channel costs eps_1 keeps the bucket almost surely
    when u is noisy (eps_inf = 2, d = 1024: P2 = 1 - 2**-32), and then two reports
    of one device share a hyperplane point that pins u: a pair test links them
    99% of the time.  With eps_2 <= eps, P[r1, r2 | one device] and
    P[r1] P[r2] (two devices, same law of u) are within a factor e^eps of each
    other (P[r2 | u] <= e^eps P[r2 | u'] for all u, u'), so no test links two
    reports with balanced accuracy above e^eps / (1 + e^eps).

    Channel (pure, on the support {y = h_s(v)}): u = v (p1) keeps the bucket
    with P2; u != v (1 - p1) collides with v with probability c (the family's
    exact rate), then keeps, else lands on v's bucket with q2 = (1-P2)/(g-1):
        p* = p1 P2 + (1 - p1)(c P2 + (1 - c) q2),
        q* = q1 P2 + (1 - q1)(c P2 + (1 - c) q2),   p* - q* = (p1 - q1)(1 - c)(P2 - q2).
    eps_1 (one report, about v, exact): P[s, y | v] = (1/S)[q1 A + (p1 - q1) P2(y | h_s(v))],
    A = N P2 + (d - N) q2 with N the number of values hashing to y under s.  The
    ratio between v, v' is 1 unless exactly one of them hashes to y, and then at
    most R(N) = (q1 A + (p1 - q1) P2) / (q1 A + (p1 - q1) q2), which falls as N
    grows; so eps_1 = ln R(N_min), N_min = ``smallest_bucket(g, d)`` (attained,
    hence exact), rounded up; eps_1 <= eps_2 (post-processing of u).  g is the
    prime with the lowest variance (``choose_memo_g``).

    >>> m = LongitudinalOLH.create({"epsilon": 1.0, "epsilon_inf": 8.0, "domain_size": 1024})
    >>> m.g, m.num_seeds, m.min_bucket, m.epsilon <= m.instantaneous_epsilon <= 1.0
    (3, 1093, 243, True)
    """

    name: ClassVar[str] = "olh"
    levels: ClassVar[int] = 2
    base: GRR
    declared_epsilon: float
    epsilon_inf: float
    g: int
    keep: int
    num_seeds: int = field(init=False)
    min_bucket: int = field(init=False)
    _eps_1: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Checked here so no hand-built object claims less than its levels implement.
        if isinstance(self.g, bool) or not isinstance(self.g, int) or not is_prime(self.g):
            raise ValueError(f"g must be a prime number of buckets, got {self.g!r}")
        if not -(-WORD // self.g) < self.keep < WORD:
            raise ValueError(f"instantaneous keep threshold {self.keep} out of range")
        if not self.base.epsilon_actual <= self.epsilon_inf:
            raise ValueError(
                f"epsilon_inf {self.epsilon_inf} is below the permanent level's "
                f"{self.base.epsilon_actual}"
            )
        if not self.instantaneous_epsilon <= self.declared_epsilon < self.epsilon_inf:
            raise ValueError(
                f"the instantaneous level costs {self.instantaneous_epsilon}: above the "
                f"declared epsilon {self.declared_epsilon} or not below epsilon_inf "
                f"{self.epsilon_inf}"
            )
        d = self.base.size
        object.__setattr__(self, "num_seeds", family(self.g, d)[1])
        object.__setattr__(self, "min_bucket", smallest_bucket(self.g, d))
        p1 = Fraction(self.base.keep, WORD)
        ratio = _memo_ratio(p1, (1 - p1) / (d - 1), self.instantaneous_keep, self.g, d,
                            self.min_bucket)
        object.__setattr__(self, "_eps_1", log_up(ratio))

    @classmethod
    def create(cls, params: dict[str, Any]) -> LongitudinalOLH:
        eps = check_mechanism_epsilon(need(params, "epsilon", cls.name))
        eps_inf = check_mechanism_epsilon(need(params, "epsilon_inf", cls.name), "epsilon_inf")
        if not eps < eps_inf:
            raise ValueError(
                f"epsilon {eps} must be below epsilon_inf {eps_inf} "
                "(one report cannot cost more than the lifetime bound)"
            )
        base = GRR(eps_inf, check_domain_size(need(params, "domain_size", cls.name)))
        g = params.get("g") or choose_memo_g(eps, float(base.channel[0]), base.size)
        return cls(base=base, declared_epsilon=eps, epsilon_inf=eps_inf, g=g,
                   keep=grr_keep_threshold(eps, g))

    @property
    def instantaneous_epsilon(self) -> float:
        """eps_2: the instantaneous level's epsilon about u, ln[P2 (g-1) / (1-P2)], rounded
        up: the bound on linking two reports of one device (class docstring)."""
        p2 = self.instantaneous_keep
        return log_up(p2 * (self.g - 1) / (1 - p2))

    # -- the channel ------------------------------------------------------------------

    @property
    def permanent(self) -> GRR:
        """The permanent level: what infinitely many reports of one value reveal."""
        return self.base

    @property
    def instantaneous_keep(self) -> Fraction:
        """P2: P[the instantaneous level keeps the bucket of u]."""
        return Fraction(self.keep, WORD)

    @property
    def bucket_keep(self) -> Fraction:
        return self.instantaneous_keep

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        p1, q1 = self.base.channel
        p2, c = self.instantaneous_keep, self.collision
        rest = c * p2 + (1 - c) * (1 - p2) / (self.g - 1)
        return p1 * p2 + (1 - p1) * rest, q1 * p2 + (1 - q1) * rest

    @property
    def epsilon(self) -> float:
        """eps_1: one report, from the exact composed channel, rounded up."""
        return self._eps_1

    @property
    def epsilon_actual(self) -> float:
        return self._eps_1

    @property
    def domain_size(self) -> int:
        return self.base.size

    @property
    def family(self) -> Projective:
        return projective(self.g, self.base.size)

    # -- randomisers -----------------------------------------------------------------

    def _perturb(self, value: int | float, rng: Rng) -> tuple[int, int]:
        raise ValueError(
            "two-level 'olh' randomises only through randomize_memoised(value, secret, "
            "context): without a device secret every call would draw a fresh permanent "
            "response, and repeated reports would average the noise away"
        )

    def memo_key(self, value: object, secret: bytes, context: str) -> int | float:
        """The checked value: one permanent response, one lifetime charge per value."""
        return self.check_value(value)

    def permanent_response(self, value: object, secret: bytes, context: str) -> int:
        """u = GRR_d(value) at eps_inf: a deterministic function of (secret, context, value)."""
        v = self.check_value(value)
        return self.base._perturb(v, HmacDrbg(permanent_seed(secret, context, v)))

    def _instant(self, permanent: int, rng: Rng) -> tuple[int, int]:
        # A one-level OLH draw of u (fresh seed, then the bucket's GRR), OLH._perturb's order.
        seed = rng.randrange(self.num_seeds)
        return seed, grr_step(self.bucket(seed, permanent), self.keep, self.g, rng)

    def randomize_memoised(
        self, value: object, secret: bytes, context: str, rng: Rng | None = None
    ) -> tuple[int, int]:
        """u (memoised), then a fresh OLH report of u from the OS CSPRNG."""
        return self._instant(self.permanent_response(value, secret, context), resolve(rng))

    def sample(self, values: npt.NDArray[Any], gen: Any) -> Any:
        # A fresh permanent response per report (one report per device), then OLH of u.
        permanent = self.base.sample(values, gen)
        seeds = gen.integers(0, self.num_seeds, size=len(values))
        hashed = self.family.hashes(seeds, permanent)
        return seeds, grr_steps(hashed, self.keep, self.g, gen)

    # -- hooks of the drivers ------------------------------------------------------------

    def output_distribution(self, value: int) -> npt.NDArray[np.float64]:
        import numpy as np

        p1, q1 = (float(x) for x in self.base.channel)
        p2 = float(self.instantaneous_keep)
        q2 = (1 - p2) / (self.g - 1)
        sizes = bucket_sizes(self.g, self.domain_size).astype(np.float64)
        table = q1 * (sizes * p2 + (self.domain_size - sizes) * q2) + (p1 - q1) * q2
        own = self.family.buckets_of(value)
        table[np.arange(self.num_seeds), own] += (p1 - q1) * (p2 - q2)
        flat = (table / self.num_seeds).ravel()
        return np.asarray(flat / flat.sum(), dtype=np.float64)

    def audit_design(self) -> Design:
        # E = {(s, h_s(x)): h_s(x') != h_s(x), N_s(h_s(x)) = N}, N the smallest bucket
        # holding x and not x': every such report has the ratio R(N) (``_memo_ratio``),
        # the largest any report has when N = N_min.  x, x' are chosen (among up to
        # 256 spread values) for the smallest N, then the most such seeds.
        import numpy as np

        d, g = self.domain_size, self.g
        sizes = bucket_sizes(g, d)
        rows = np.arange(self.num_seeds)
        candidates = sorted({round(i * (d - 1) / 255) for i in range(256)}) if d > 256 else \
            list(range(d))
        hashed = {v: self.family.buckets_of(v) for v in candidates}
        best: tuple[int, int, int, int] | None = None  # (N, -count, x, x')
        for x in candidates:
            own = sizes[rows, hashed[x]]
            for x_prime in candidates:
                if x_prime == x:
                    continue
                apart = hashed[x] != hashed[x_prime]
                n = int(own[apart].min())
                key = (n, -int(np.count_nonzero(apart & (own == n))), x, x_prime)
                best = key if best is None or key < best else best
        assert best is not None
        n, count, x, x_prime = best[0], -best[1], best[2], best[3]
        marked = np.zeros((self.num_seeds, g), dtype=bool)
        chosen = (hashed[x] != hashed[x_prime]) & (sizes[rows, hashed[x]] == n)
        marked[rows[chosen], hashed[x][chosen]] = True
        p1, q1 = self.base.channel
        p2 = self.instantaneous_keep
        q2 = (1 - p2) / (g - 1)
        common = q1 * (d * q2 + n * (p2 - q2))
        share = Fraction(count, self.num_seeds)

        def event(r: Report) -> bool:
            assert isinstance(r, tuple)
            return bool(marked[r[0], r[1]])

        def batch_event(batch: Any) -> Any:
            seeds, y = batch
            return marked[seeds, y]

        return Design(x, x_prime, event, batch_event,
                      (share * (common + (p1 - q1) * p2), share * (common + (p1 - q1) * q2)))

    def describe(self) -> dict[str, object]:
        out = Mechanism.describe(self)
        out.update(
            levels=2,
            epsilon_requested=self.declared_epsilon,
            epsilon_inf=self.epsilon_inf,
            epsilon_inf_actual=self.base.epsilon_actual,
            instantaneous_keep=float(self.instantaneous_keep),
            instantaneous_epsilon=self.instantaneous_epsilon,
            # The exact thresholds, for SDKs in other languages: the permanent GRR's
            # keep, the instantaneous bucket keep and the hash family of the reports.
            instantaneous_threshold=self.keep,
            permanent_keep=self.base.keep,
            g=self.g,
            num_seeds=self.num_seeds,
        )
        return out

    def unit_text(self) -> str:
        """The two units of privacy this mechanism states."""
        return (
            f"eps_1={self.epsilon:.4g} per device, per metric, per report; "
            f"eps_inf={self.epsilon_inf:.4g} per device, per metric, per distinct value, lifetime"
        )


MECHANISMS: tuple[type[Mechanism], ...] = (LongitudinalOLH,)
