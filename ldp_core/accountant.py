"""The privacy-budget accountant: what a device's reports add up to, and per what.

Every figure is a frozen ``Guarantee`` that carries its unit of privacy: the
default is one device, one metric, one epoch; a device reporting k epochs is
covered over those k epochs; a two-level (memoised) metric also has a lifetime
bound per device, metric and distinct value.

- ``sequential``: eps adds up (basic composition), deltas add up.
- ``parallel``: reports on disjoint partitions of the data cost the max.
- ``compose(eps, k, delta_prime)``: k reports at eps each, the better of basic
  (k eps, 0) and advanced composition (Dwork, Rothblum, Vadhan 2010):
      eps' = sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1),  delta = delta'.
  Advanced is worse than basic for small k (and for large eps), so the
  accountant computes both, takes the smaller and says which.

>>> g = compose(0.1, 365, delta_prime=1e-6)       # a year of daily reports
>>> g.bound, round(g.epsilon, 2), g.delta
('advanced', 13.88, 1e-06)
>>> compose(0.1, 3, delta_prime=1e-6).bound        # few reports: basic wins
'basic'
>>> compose(1.0, 365, delta_prime=1e-6).bound      # large eps: basic wins too
'basic'
>>> round(single(1.0).adversary_accuracy, 3)
0.731
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Literal

from ldp_core.base import Mechanism
from ldp_core.epsilon import adversary_accuracy, check_epsilon

__all__ = [
    "DEFAULT_UNIT",
    "Bound",
    "Guarantee",
    "YearBudget",
    "advanced_epsilon",
    "adversary_accuracy",
    "compose",
    "lifetime",
    "mechanism_guarantees",
    "parallel",
    "sequential",
    "single",
    "year_budget",
]

Bound = Literal["single", "basic", "advanced", "parallel", "lifetime"]

#: The default unit of privacy.
DEFAULT_UNIT = "per device, per metric, per epoch"


def _up(x: float) -> float:
    """The next float above ``x``: every float sum and product is rounded outward."""
    return math.nextafter(x, math.inf)


@dataclass(frozen=True)
class Guarantee:
    """(epsilon, delta)-LDP, per ``unit``, obtained by ``bound`` over ``reports`` reports.

    >>> single(1.0).text()
    'eps=1 (delta=0) per device, per metric, per epoch [single report]; adversary accuracy <= 73.1%'
    """

    epsilon: float
    delta: float = 0.0
    unit: str = DEFAULT_UNIT
    bound: Bound = "single"
    reports: int = 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise ValueError(f"epsilon must be a finite number >= 0, got {self.epsilon!r}")
        if not 0 <= self.delta < 1:
            raise ValueError(f"delta must be in [0, 1), got {self.delta!r}")
        if self.reports < 1:
            raise ValueError(f"reports must be >= 1, got {self.reports!r}")

    @property
    def adversary_accuracy(self) -> float:
        """Best accuracy of a membership guess with a fair prior, e^eps/(1+e^eps)
        (plus delta when delta > 0)."""
        if self.epsilon == 0:
            return 0.5 + self.delta / 2
        return min(1.0, adversary_accuracy(self.epsilon) + self.delta)

    def text(self) -> str:
        what = f"{self.bound}, {self.reports} reports"
        if self.bound == "single":
            what = "single report"
        elif self.bound == "lifetime":
            what = "lifetime: any number of reports"
        return (
            f"eps={self.epsilon:.4g} (delta={self.delta:.3g}) {self.unit} [{what}]; "
            f"adversary accuracy <= {100 * self.adversary_accuracy:.1f}%"
        )


def single(epsilon: float, unit: str = DEFAULT_UNIT) -> Guarantee:
    """One report at ``epsilon``."""
    return Guarantee(epsilon=check_epsilon(epsilon), unit=unit)


def sequential(guarantees: Sequence[Guarantee], unit: str | None = None) -> Guarantee:
    """Basic composition over the same data: eps and delta add up.

    >>> sequential([single(0.5), single(1.0)]).epsilon
    1.5000000000000002
    """
    if not guarantees:
        raise ValueError("sequential composition needs at least one guarantee")
    eps = _up(math.fsum(g.epsilon for g in guarantees))
    delta = min(_up(math.fsum(g.delta for g in guarantees)), math.nextafter(1.0, 0.0))
    return Guarantee(
        epsilon=eps,
        delta=delta,
        unit=unit or guarantees[0].unit,
        bound="basic",
        reports=sum(g.reports for g in guarantees),
    )


def parallel(guarantees: Sequence[Guarantee], unit: str | None = None) -> Guarantee:
    """Reports on disjoint partitions of a person's data: the max of each.

    >>> parallel([single(0.5), single(1.0)]).epsilon
    1.0
    """
    if not guarantees:
        raise ValueError("parallel composition needs at least one guarantee")
    return Guarantee(
        epsilon=max(g.epsilon for g in guarantees),
        delta=max(g.delta for g in guarantees),
        unit=unit or guarantees[0].unit,
        bound="parallel",
        reports=sum(g.reports for g in guarantees),
    )


def advanced_epsilon(epsilon: float, k: int, delta_prime: float) -> float:
    """sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1), rounded up.

    Valid for k pure eps-LDP reports, with total delta = delta'.
    """
    eps = check_epsilon(epsilon)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not 0 < delta_prime < 1:
        raise ValueError(f"delta_prime must be in (0, 1), got {delta_prime!r}")
    first = _up(math.sqrt(_up(2 * k * _up(-math.log(delta_prime))))) * eps
    second = k * eps * _up(math.expm1(eps))
    # Each float operation is within half an ulp; a relative 1e-12 covers them all.
    return _up((first + second) * (1 + 1e-12))


def compose(
    epsilon: float, k: int, delta_prime: float = 1e-6, unit: str | None = None
) -> Guarantee:
    """k reports at ``epsilon`` each: min(basic, advanced), naming the bound it took."""
    eps = check_epsilon(epsilon)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    over = unit or f"per device, per metric, per {k} epochs"
    basic = Guarantee(epsilon=_up(k * eps), unit=over, bound="basic", reports=k)
    if k == 1:
        return replace(basic, epsilon=eps, bound="single", unit=unit or DEFAULT_UNIT)
    advanced = Guarantee(
        epsilon=advanced_epsilon(eps, k, delta_prime),
        delta=delta_prime,
        unit=over,
        bound="advanced",
        reports=k,
    )
    return advanced if advanced.epsilon < basic.epsilon else basic


def lifetime(
    epsilon_inf: float, unit: str = "per device, per metric, per distinct value, lifetime"
) -> Guarantee:
    """A two-level metric's bound over any number of reports of one value."""
    return Guarantee(epsilon=check_epsilon(epsilon_inf, "epsilon_inf"), unit=unit, bound="lifetime")


def mechanism_guarantees(m: Mechanism, unit: str = DEFAULT_UNIT) -> list[Guarantee]:
    """What a mechanism promises: one report, and for a two-level one the lifetime.

    >>> from ldp_core import longitudinal
    >>> m = longitudinal("oue", epsilon=1.0, epsilon_inf=4.0, domain_size=8)
    >>> [g.bound for g in mechanism_guarantees(m)]
    ['single', 'lifetime']
    """
    out = [Guarantee(epsilon=m.epsilon, unit=unit)]
    epsilon_inf = getattr(m, "epsilon_inf", None)
    if epsilon_inf is not None:
        out.append(lifetime(epsilon_inf))
    return out


@dataclass(frozen=True)
class YearBudget:
    """A device reporting once per epoch for ``reports`` epochs (default: daily, a year).

    ``effective`` is the bound that holds: ``chosen``, or for a two-level metric
    whose value took ``distinct_values`` values, eps_inf per distinct value if
    that is smaller (every report is a post-processing of the memoised ones).
    """

    per_report: Guarantee
    basic: Guarantee
    advanced: Guarantee
    chosen: Guarantee
    lifetime: Guarantee | None
    effective: Guarantee

    def text(self) -> str:
        """Several lines for the demo."""
        k = self.basic.reports
        lines = [
            f"one report:      {self.per_report.text()}",
            f"{k} reports, basic:    eps={self.basic.epsilon:.4g}",
            f"{k} reports, advanced: eps={self.advanced.epsilon:.4g} "
            f"(delta'={self.advanced.delta:.3g})",
            f"taken: {self.chosen.bound} -> {self.chosen.text()}",
        ]
        if self.lifetime is not None:
            lines.append(f"two-level lifetime bound: {self.lifetime.text()}")
            lines.append(f"effective: {self.effective.text()}")
        return "\n".join(lines)


def year_budget(
    epsilon: float,
    reports: int = 365,
    delta_prime: float = 1e-6,
    epsilon_inf: float | None = None,
    distinct_values: int = 1,
) -> YearBudget:
    """The composed budget of a device that reports daily for a year.

    With ``epsilon_inf`` (a two-level metric), also the lifetime bound per
    distinct value, which holds however many reports are sent.

    >>> y = year_budget(0.1, epsilon_inf=4.0)
    >>> y.chosen.bound, round(y.chosen.epsilon, 2), y.lifetime is not None and y.lifetime.epsilon
    ('advanced', 13.88, 4.0)
    >>> year_budget(1.0).chosen.bound                 # 365 at eps=1: advanced is worse
    'basic'
    >>> year_budget(1.0, epsilon_inf=4.0).effective.epsilon   # one value, memoised
    4.0
    """
    eps = check_epsilon(epsilon)
    unit = f"per device, per metric, per {reports} daily epochs"
    basic = Guarantee(epsilon=_up(reports * eps), unit=unit, bound="basic", reports=reports)
    advanced = Guarantee(
        epsilon=advanced_epsilon(eps, reports, delta_prime),
        delta=delta_prime,
        unit=unit,
        bound="advanced",
        reports=reports,
    )
    chosen = advanced if advanced.epsilon < basic.epsilon else basic
    life = None if epsilon_inf is None else lifetime(epsilon_inf)
    effective = chosen
    if life is not None:
        if isinstance(distinct_values, bool) or not isinstance(distinct_values, int):
            raise ValueError(f"distinct_values must be an integer >= 1, got {distinct_values!r}")
        if distinct_values < 1:
            raise ValueError(f"distinct_values must be an integer >= 1, got {distinct_values!r}")
        spent = distinct_values * life.epsilon
        if Fraction(spent) < distinct_values * Fraction(life.epsilon):  # rounded down: fix
            spent = _up(spent)
        if spent < chosen.epsilon:
            effective = Guarantee(
                epsilon=spent,
                unit=f"per device, per metric, {distinct_values} distinct value(s), lifetime",
                bound="lifetime",
                reports=reports,
            )
    return YearBudget(
        per_report=single(eps, "per device, per metric, per day"),
        basic=basic,
        advanced=advanced,
        chosen=chosen,
        lifetime=life,
        effective=effective,
    )
