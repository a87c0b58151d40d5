"""The shape every two-level (longitudinal, memoised) mechanism shares.

A device that reports the same value every day under a one-level mechanism
leaks it: its reports average to the true value.  A two-level mechanism first
draws a *permanent* response B' from the value at the lifetime budget
``epsilon_inf`` and memoises it per (secret, context, value) (``ldp_core.memo``);
every report is then a fresh *instantaneous* randomisation of B'.  Any number
of reports is a post-processing of B', so their total leak is at most
``epsilon_inf`` per distinct value; one report alone is ``epsilon`` = eps_1.

The composed channel (p*, q*) is exact, so the generic estimator applies as is:

    p* = p1 p2 + (1 - p1) q2,      q* = q1 p2 + (1 - q1) q2

with (p1, q1) the permanent channel and (p2, q2) the instantaneous one.  The
instantaneous keep threshold K (P[keep] = K / 2**32) is the largest integer for
which the outward-rounded eps_1 is <= the requested epsilon, found by bisection
(eps_1 grows with K: a lower K is a garbling of a higher one).

Each family module defines its two-level class beside its one-level one; the
family's hooks (audit design, plausibility, output distribution) read only
``channel`` and the family's own properties, so they serve both levels.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ldp_core._rng import WORD, Rng, resolve
from ldp_core.base import Batch, Mechanism, Payload, Report, need
from ldp_core.epsilon import check_mechanism_epsilon
from ldp_core.memo import HmacDrbg, permanent_seed

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["TwoLevel"]

B = TypeVar("B", bound=Mechanism)


@dataclass(frozen=True)
class TwoLevel(Mechanism, Generic[B]):
    """A permanent level ``base`` (at ``epsilon_inf``) then an instantaneous one.

    ``keep`` is the instantaneous threshold: the permanent response is kept with
    probability keep / 2**32.  Tally layout, wire form and values are the base's.
    """

    levels: ClassVar[int] = 2
    #: The one-level class of the permanent level.
    base_class: ClassVar[type[Mechanism]]
    base: B
    declared_epsilon: float
    epsilon_inf: float
    keep: int
    _eps_1: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Built by ``create``; checked again here so no hand-built object can
        # claim less than its levels implement.
        if not self._lowest_keep(self.base) < self.keep < WORD:
            raise ValueError(f"instantaneous keep threshold {self.keep} out of range")
        if not self.base.epsilon_actual <= self.epsilon_inf:
            raise ValueError(
                f"epsilon_inf {self.epsilon_inf} is below the permanent level's "
                f"{self.base.epsilon_actual}"
            )
        eps_1 = self._epsilon_of(self.base, self._compose(self.base, self.keep))
        if not eps_1 <= self.declared_epsilon < self.epsilon_inf:
            raise ValueError(
                f"one report costs {eps_1}: above the declared epsilon {self.declared_epsilon} "
                f"or not below epsilon_inf {self.epsilon_inf}"
            )
        object.__setattr__(self, "_eps_1", eps_1)

    # -- what each design defines ------------------------------------------------

    @staticmethod
    @abstractmethod
    def _compose(base: B, keep: int) -> tuple[Fraction, Fraction]:
        """The exact one-report channel for an instantaneous threshold ``keep``."""

    @staticmethod
    @abstractmethod
    def _epsilon_of(base: B, channel: tuple[Fraction, Fraction]) -> float:
        """eps_1 of a composed channel, rounded up."""

    @staticmethod
    @abstractmethod
    def _lowest_keep(base: B) -> int:
        """The threshold at which the instantaneous level erases everything."""

    @abstractmethod
    def _instant(self, permanent: Report, rng: Rng) -> Report:
        """The instantaneous randomisation of a permanent response."""

    @abstractmethod
    def _instant_batch(self, permanent: Batch, gen: Any) -> Batch:
        """``_instant`` vectorised over a batch of permanent responses."""

    # -- construction ----------------------------------------------------------------

    @classmethod
    def create(cls, params: dict[str, Any]) -> Mechanism:
        eps = check_mechanism_epsilon(need(params, "epsilon", cls.name))
        eps_inf = check_mechanism_epsilon(need(params, "epsilon_inf", cls.name), "epsilon_inf")
        if not eps < eps_inf:
            raise ValueError(
                f"epsilon {eps} must be below epsilon_inf {eps_inf} "
                "(one report cannot cost more than the lifetime bound)"
            )
        base = cls._permanent_for(eps, eps_inf, params)
        return cls(
            base=base,
            declared_epsilon=eps,
            epsilon_inf=eps_inf,
            keep=cls.solve_keep(base, eps),
        )

    @classmethod
    def _permanent_for(cls, epsilon: float, epsilon_inf: float, params: dict[str, Any]) -> B:
        """The permanent level at ``epsilon_inf`` (a family may tune it for ``epsilon``)."""
        return cls.base_class.create({**params, "epsilon": epsilon_inf})  # type: ignore[return-value]

    @classmethod
    def solve_keep(cls, base: B, epsilon: float) -> int:
        """The largest K with eps_1(K) <= epsilon, by bisection on the integer K."""

        def ok(k: int) -> bool:
            return cls._epsilon_of(base, cls._compose(base, k)) <= epsilon

        lo, hi = cls._lowest_keep(base), WORD - 1  # eps_1(lo) = 0: always ok
        if ok(hi):
            return hi
        while hi - lo > 1:  # invariant: ok(lo), not ok(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        if lo == cls._lowest_keep(base):
            raise ValueError(f"epsilon {epsilon} is too small for a two-level {base.name}")
        return lo

    # -- Mechanism -------------------------------------------------------------------

    @property
    def instantaneous_keep(self) -> Fraction:
        """P[the instantaneous level keeps the permanent response (bit)]."""
        return Fraction(self.keep, WORD)

    @property
    def permanent(self) -> B:
        """The permanent level: what infinitely many reports of one value reveal."""
        return self.base

    @property
    def epsilon(self) -> float:
        """eps_1: one report, from the exact composed channel, rounded up."""
        return self.epsilon_actual

    @property
    def epsilon_actual(self) -> float:
        return self._eps_1

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        return self._compose(self.base, self.keep)

    @property
    def domain_size(self) -> int:
        return self.base.domain_size

    @property
    def num_counters(self) -> int:
        return self.base.num_counters

    @property
    def report_bits(self) -> float:
        return self.base.report_bits

    @property
    def direct_payload(self) -> int | None:
        return self.base.direct_payload

    def counters(self, report: Report) -> tuple[int, ...]:
        return self.base.counters(report)

    def encode(self, report: Report) -> Payload:
        return self.base.encode(report)

    def decode(self, payload: object) -> Report:
        return self.base.decode(payload)

    def check_value(self, value: object) -> int | float:
        return self.base.check_value(value)

    def support_counts(self, tallies: Any) -> list[int]:
        return self.base.support_counts(tallies)

    def sample(self, values: npt.NDArray[Any], gen: Any) -> Batch:
        # A fresh permanent response per report (one report per device), then
        # the instantaneous level: the law of one memoised report.
        return self._instant_batch(self.base.sample(values, gen), gen)

    def batch_counters(self, batch: Batch) -> npt.NDArray[np.int64]:
        return self.base.batch_counters(batch)

    def _perturb(self, value: int | float, rng: Rng) -> Report:
        raise ValueError(
            f"two-level {self.name!r} randomises only through randomize_memoised(value, "
            "secret, context): without a device secret every call would draw a fresh "
            "permanent response, and repeated reports would average the noise away"
        )

    def memo_key(self, value: object, secret: bytes, context: str) -> int | float:
        """What B' is a function of besides (secret, context): the checked value here,
        so one permanent response and one lifetime charge per distinct value (a family
        that rounds first, ``piecewise_memo``, keys on the rounded point)."""
        return self.check_value(value)

    def permanent_response(self, value: object, secret: bytes, context: str) -> Report:
        """B' for ``value``: a deterministic function of (secret, context, value)."""
        v = self.check_value(value)
        return self.base._perturb(v, HmacDrbg(permanent_seed(secret, context, v)))

    def randomize_memoised(
        self, value: object, secret: bytes, context: str, rng: Rng | None = None
    ) -> Report:
        """The device path with memoisation: B' (memoised) then a fresh instantaneous draw.

        ``context`` names the metric and its parameters, e.g. ``"app.theme/3f2a..."``.
        """
        return self._instant(self.permanent_response(value, secret, context), resolve(rng))

    def describe(self) -> dict[str, object]:
        out = super().describe()
        out.update(
            levels=2,
            epsilon_requested=self.declared_epsilon,
            epsilon_inf=self.epsilon_inf,
            epsilon_inf_actual=self.base.epsilon_actual,
            instantaneous_keep=float(self.instantaneous_keep),
        )
        # The exact thresholds, for SDKs in other languages: the instantaneous one,
        # and the permanent level's own ones prefixed "permanent_".
        out["instantaneous_threshold"] = self.keep
        common = Mechanism.describe(self.base)
        for key, value in self.base.describe().items():
            if key not in common:
                out[f"permanent_{key}"] = value
        return out

    def window_unit_variance(self, epochs: int) -> float:
        """Worst-case per-report variance of a device's mean over ``epochs`` reports.

        (V* + (T - 1) V1) / T with V* this channel's and V1 the permanent level's
        ``unit_variance`` (the covariance of two reports of one device is V1:
        ``aggregator.estimate``).  The sum of the two worst cases bounds the worst
        case of the sum; both are at the same value for the symmetric one-bit
        channels, where it is exact.  ``auto`` compares memoised means with it.
        """
        return (self.unit_variance() + (epochs - 1) * self.base.unit_variance()) / epochs

    def unit_text(self) -> str:
        """The two units of privacy this mechanism states."""
        return (
            f"eps_1={self.epsilon:.4g} per device, per metric, per report; "
            f"eps_inf={self.epsilon_inf:.4g} per device, per metric, per distinct value, lifetime"
        )
