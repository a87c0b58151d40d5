"""Two-level strings: a memoised prefix-OLH report, then a fresh GRR of its bucket.

A device that reports the same string every epoch under ``prefix_olh`` averages
its noise away: each report draws a new level, seed and bucket.  Here the
permanent response is itself one ``prefix_olh`` report at ``epsilon_inf``,

    (j, s, B'),  j ~ shares,  s uniform in [0, S),  B' = GRR_g(h_s(prefix_j(x))) at eps_inf,

drawn from the HMAC_DRBG of (device secret, metric context, normalised value)
(``ldp_core.memo``: never stored, never keyed on the raw string, only on the
keyed digest HMAC(secret, label | context | code)).  Every report then sends
(j, s, GRR_g(B') at eps_2) from the OS CSPRNG: the same integer counter
(j S + s) g + y as ``prefix_olh``, so the collector keeps the same counters.

Channel.  On the g buckets the two GRR steps compose to a GRR (``grr_compose``):
p* = p1 p2 + (1 - p1) q2 and q*_g = (1 - p*)/(g - 1), with p2 the largest
threshold whose composed epsilon is <= the requested one (``TwoLevel.solve_keep``
on a two-level GRR over g).  One report: P[j, s, y | x] / P[j, s, y | x'] =
P[y | h_s(x)] / P[y | h_s(x')] <= p*/q*_g = e^eps_1.  Lifetime: every report is
a post-processing of (j, s, B'), a ``prefix_olh`` report at eps_inf, so any
number of them cost eps_inf per distinct (normalised) value.  Discovery reads
the counters as ``prefix_olh`` does with (p*, 1/g): q* = p*/g + (1 - 1/g) q*_g
= 1/g over the seed family, and p* - 1/g = (p1 - 1/g)(p2 - q2).

The price: (j, s), log2(m S) ~ 12.6 bits, is constant per device and value,
a cohort as in RAPPOR: two reports of one device share it, and two devices
share it with probability sum_j w_j^2 / S.  docs/privacy.md "Windows of memoised
(two-level) metrics" states the linkability it gives (bench_linkability.py).

Windows.  Two reports of one device and value share (j, s, B'): given them,
a report supports x with probability p2 if B' = h_s(x), q2 otherwise, and
P[B' = h_s(x)] = p1 for a holder of x, 1/g for another value (over s).  So
over a window of T epochs (``support_variance``, the argument of
``aggregator.estimate``), with c of the level's n_l reports holding x,

    Var[C(x)] <= V_1(c) + (T - 1)(p2 - q2)^2 [c p1(1-p1) + (n_l - c)(1/g)(1 - 1/g)],

and a device's reports all sit at its level, a cluster of up to T reports in
the level's sample (``level_cluster``).

>>> from ldp_core import longitudinal
>>> m = longitudinal("prefix_olh", epsilon=2.0, epsilon_inf=4.0)
>>> m.levels, m.g, m.cuts, m.epsilon <= 2.0 < m.epsilon_inf
(2, 29, (2, 4, 6), True)
>>> secret = bytes(range(32))
>>> first = m.randomize_memoised("Hello", secret, "search/1")
>>> first // m.g == m.randomize_memoised("hello", secret, "search/1") // m.g   # its cohort
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng, resolve
from ldp_core.base import Design, Mechanism, need
from ldp_core.epsilon import check_mechanism_epsilon, check_separated
from ldp_core.mechanisms.grr import GRR, LongitudinalGRR, grr_step, grr_steps
from ldp_core.mechanisms.prefix import PrefixOLH
from ldp_core.mechanisms.prefix_hash import DEFAULT_SEEDS
from ldp_core.memo import HmacDrbg, permanent_seed

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MECHANISMS", "LongitudinalPrefixOLH"]


@dataclass(frozen=True)
class LongitudinalPrefixOLH(PrefixOLH):
    """Memoised (level, seed, permanent bucket), then a fresh GRR of the bucket.

    ``keep`` is the instantaneous threshold (P[keep B'] = keep / 2**32);
    ``base`` is the permanent level, a one-level ``prefix_olh`` at eps_inf over
    the same layout and prime; ``buckets`` the two GRR steps over g.
    """

    levels: ClassVar[int] = 2
    auto_candidate: ClassVar[bool] = False
    epsilon_inf: float = field(init=False)
    base: PrefixOLH = field(init=False, repr=False)
    buckets: LongitudinalGRR = field(init=False, repr=False)

    def __init__(
        self,
        epsilon: float,
        epsilon_inf: float,
        max_length: int = 6,
        alphabet: str = "a-z",
        casefold: bool = True,
        cuts: tuple[int, ...] | None = None,
        shares: tuple[int, ...] | None = None,
        seeds: int = DEFAULT_SEEDS,
        g: int | None = None,
    ) -> None:
        eps = check_mechanism_epsilon(epsilon)
        eps_inf = check_mechanism_epsilon(epsilon_inf, "epsilon_inf")
        if not eps < eps_inf:
            raise ValueError(
                f"epsilon {eps} must be below epsilon_inf {eps_inf} "
                "(one report cannot cost more than the lifetime bound)"
            )
        # g: the one-level prime at eps, the composed channel being a GRR at eps_1 ~ eps.
        self._lay_out(eps, max_length, alphabet, casefold, cuts, shares, seeds, g)
        base = PrefixOLH(
            eps_inf, max_length, alphabet, casefold, self.cuts, self.shares, self.seeds, self.g
        )
        permanent = GRR(eps_inf, self.g)
        assert permanent.keep == base.keep
        buckets = LongitudinalGRR(
            base=permanent,
            declared_epsilon=eps,
            epsilon_inf=eps_inf,
            keep=LongitudinalGRR.solve_keep(permanent, eps),
        )
        object.__setattr__(self, "declared_epsilon", eps)
        object.__setattr__(self, "epsilon_inf", eps_inf)
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "buckets", buckets)
        object.__setattr__(self, "keep", buckets.keep)
        check_separated(self.name, eps, self.channel)

    @classmethod
    def create(cls, params: dict[str, Any]) -> Mechanism:
        extra = {k: params[k] for k in ("max_length", "alphabet", "casefold") if k in params}
        return cls(
            need(params, "epsilon", cls.name), need(params, "epsilon_inf", cls.name), **extra
        )

    # -- the channel ------------------------------------------------------------------

    @property
    def permanent(self) -> PrefixOLH:
        """The permanent level: what infinitely many reports of one value reveal."""
        return self.base

    @property
    def instantaneous_keep(self) -> Fraction:
        """p2: P[the instantaneous GRR keeps the permanent bucket B']."""
        return Fraction(self.keep, WORD)

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        """(p*, 1/g): P[a report supports its own prefix], P[it supports another]."""
        return self.buckets.channel[0], Fraction(1, self.g)

    @property
    def epsilon(self) -> float:
        """eps_1: one report, from the exact composed channel, rounded up."""
        return self.epsilon_actual

    @property
    def epsilon_actual(self) -> float:
        return self.buckets.epsilon_actual

    def describe(self) -> dict[str, object]:
        out = super().describe()
        out.update(
            levels=2,
            epsilon_requested=self.declared_epsilon,
            epsilon_inf=self.epsilon_inf,
            epsilon_inf_actual=self.base.epsilon_actual,
            instantaneous_keep=float(self.instantaneous_keep),
            # The exact thresholds, for SDKs in other languages.
            instantaneous_threshold=self.keep,
            permanent_keep=self.base.keep,
        )
        return out

    def unit_text(self) -> str:
        """The two units of privacy this mechanism states."""
        return (
            f"eps_1={self.epsilon:.4g} per device, per metric, per report; "
            f"eps_inf={self.epsilon_inf:.4g} per device, per metric, per distinct "
            "normalised string, lifetime"
        )

    # -- the device -------------------------------------------------------------------

    def _perturb(self, value: int | float, rng: Rng) -> int:
        raise ValueError(
            "two-level 'prefix_olh' randomises only through randomize_memoised(value, "
            "secret, context): without a device secret every call would draw a fresh "
            "permanent response, and repeated reports would average the noise away"
        )

    def memo_key(self, value: object, secret: bytes, context: str) -> int:
        """The code of the normalised string: one permanent response, one lifetime
        charge per string after NFC and case folding ("Hello" and "hello" share one)."""
        return self.check_value(value)

    def permanent_response(self, value: object, secret: bytes, context: str) -> int:
        """(j S + s) g + B': a ``prefix_olh`` report at eps_inf, a deterministic
        function of (secret, context, code) (draws: level, seed, then the GRR's two)."""
        code = self.check_value(value)
        return self.base._perturb(code, HmacDrbg(permanent_seed(secret, context, code)))

    def _instant(self, permanent: int, rng: Rng) -> int:
        row, bucket = divmod(permanent, self.g)
        return row * self.g + grr_step(bucket, self.keep, self.g, rng)

    def randomize_memoised(
        self, value: object, secret: bytes, context: str, rng: Rng | None = None
    ) -> int:
        """The device path: (j, s, B') memoised, then B' through a fresh GRR (OS CSPRNG)."""
        return self._instant(self.permanent_response(value, secret, context), resolve(rng))

    # -- server-side hooks ------------------------------------------------------------

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.int64]:
        # A fresh permanent response per report (one report per device), then the GRR.
        return self.instant_batch(self.base.sample(values, gen), gen)

    def instant_batch(self, permanent: Any, gen: Any) -> npt.NDArray[np.int64]:
        """``_instant`` over an array of permanent responses (simulated devices)."""
        import numpy as np

        rows, buckets = np.divmod(np.asarray(permanent, dtype=np.int64), self.g)
        return rows * self.g + grr_steps(buckets, self.keep, self.g, gen)

    def simulate_window(
        self, codes: npt.NDArray[np.int64], epochs: int, gen: Any
    ) -> npt.NDArray[np.int64]:
        """The tallies of a fleet whose device i holds ``codes[i]`` and reports it in
        each of ``epochs`` epochs: one permanent response per device, then a fresh
        instantaneous draw per epoch, summed (the window ``discover(epochs=)`` reads)."""
        import numpy as np

        permanent = self.base.sample(np.asarray(codes, dtype=np.int64), gen)
        out = np.zeros(self.num_counters, dtype=np.int64)
        for _ in range(epochs):
            out += np.bincount(self.instant_batch(permanent, gen), minlength=self.num_counters)
        return out

    def output_distribution(self, value: int) -> npt.NDArray[np.float64]:
        import numpy as np

        # The permanent level's distribution, each bucket moved by the instantaneous GRR.
        p2, g = float(self.instantaneous_keep), self.g
        move = np.full((g, g), (1 - p2) / (g - 1))
        np.fill_diagonal(move, p2)
        one = self.base.output_distribution(value).reshape(-1, g)
        return np.asarray((one @ move).ravel(), dtype=np.float64)

    def audit_design(self) -> Design:
        # E = {the report supports "a" and not "b"} as for one level, with the composed
        # GRR over the buckets: P[E | a] = apart p*, P[E | b] = apart q*_g.
        one = self.base.audit_design()
        p1 = self.base.channel[0]
        q1 = (1 - p1) / (self.g - 1)
        apart = one.probabilities[0] / p1
        assert apart == one.probabilities[1] / q1
        p_star, q_star = self.buckets.channel
        return Design(
            one.x, one.x_prime, one.event, one.batch_event, (apart * p_star, apart * q_star)
        )

    def variance_terms(self) -> tuple[float, float, float]:
        """(p*, 1/g, family): as ``prefix_olh``'s with the composed p*."""
        p, q = float(self.channel[0]), 1 / self.g
        q0 = float(self.buckets.channel[1])
        return p, q, (p - q0) ** 2 * q * (1 - q) / self.seeds

    def support_variance(self, c: Any, n_level: int, squares: float, epochs: int = 1) -> Any:
        """Var[C(x)] bound over ``epochs`` epochs: the one-report variance plus (T - 1)
        times the covariance of two reports of one device (module docstring)."""
        one = super().support_variance(c, n_level, squares)
        p1, q = float(self.base.keep / WORD), 1 / self.g
        p2 = float(self.instantaneous_keep)
        shift = (p2 - (1 - p2) / (self.g - 1)) ** 2
        pair = shift * (c * p1 * (1 - p1) + (n_level - c) * q * (1 - q))
        return one + (epochs - 1) * pair

    def level_cluster(self, epochs: int) -> int:
        """A device keeps its level: up to ``epochs`` of its reports share it."""
        return epochs


MECHANISMS: tuple[type[Mechanism], ...] = (LongitudinalPrefixOLH,)
