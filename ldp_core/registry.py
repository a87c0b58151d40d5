"""One registry, built from the family modules: ``mechanism()``, ``longitudinal()``, auto.

>>> mechanism("grr", epsilon=2.0, domain_size=4).name
'grr'
>>> mechanism("auto", epsilon=1.0, domain_size=4).name    # d < 3 e^eps + 2
'grr'
>>> mechanism("auto", epsilon=1.0, domain_size=1024).name
'olh'
>>> auto_choice(2.0, 2, kind="mean").chosen       # lowest worst-case variance of a mean
'hybrid'
>>> names_for("binary")
('binary_rr', 'forced_response')
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ldp_core.base import Kind, Mechanism, check_domain_size
from ldp_core.epsilon import check_mechanism_epsilon
from ldp_core.mechanisms import (
    binary,
    grr,
    hadamard,
    hierarchical,
    hybrid,
    mean,
    olh,
    olh_memo,
    piecewise,
    piecewise_memo,
    prefix,
    prefix_memo,
    sketch,
    square_wave,
    unary,
)

__all__ = [
    "FAMILIES",
    "NAMES",
    "AutoChoice",
    "auto_choice",
    "classes",
    "longitudinal",
    "mechanism",
    "names_for",
    "resolve_auto",
]

#: Every family module; a new mechanism is one module and one entry here.
FAMILIES = (
    binary, grr, unary, olh, olh_memo, mean, hadamard, sketch, piecewise, hybrid, piecewise_memo,
    prefix, prefix_memo, square_wave, hierarchical,
)

_ONE: dict[str, type[Mechanism]] = {
    cls.name: cls for family in FAMILIES for cls in family.MECHANISMS if cls.levels == 1
}
_TWO: dict[str, type[Mechanism]] = {
    cls.name: cls for family in FAMILIES for cls in family.MECHANISMS if cls.levels == 2
}

#: Every name ``mechanism()`` takes, ``auto`` last.
NAMES = (*_ONE, "auto")

#: A smaller report is taken over the lowest variance when its variance is within
#: this factor (OLH's seed and bucket against OUE's d bits).
REPORT_SIZE_TOLERANCE = 1.05

#: Means: among the candidates whose worst-case variance is within this factor of
#: the lowest, the one with the lowest average variance (z uniform) is taken.  At
#: eps = 4 the Hybrid's worst case is 4% below the Piecewise's, its average 45%
#: above (its one-bit share flattens the worst case at the cost of every value).
WORST_CASE_TOLERANCE = 1.05

#: Memoised means are compared over a window of this many epochs (a month of daily
#: reports): one device's reports share its permanent response, so the permanent
#: level's variance weighs (W - 1) times (``TwoLevel.window_unit_variance``).
AUTO_WINDOW = 30


def classes(levels: int | None = None) -> tuple[type[Mechanism], ...]:
    """Every registered class (one level, two levels, or both)."""
    table = {1: list(_ONE.values()), 2: list(_TWO.values())}
    chosen = table[levels] if levels else table[1] + table[2]
    return tuple(chosen)


def names_for(kind: Kind, levels: int = 1) -> tuple[str, ...]:
    """The mechanism names that estimate ``kind`` (binary, frequency or mean)."""
    table = _ONE if levels == 1 else _TWO
    return tuple(name for name, cls in table.items() if cls.kind == kind)


@dataclass(frozen=True)
class AutoChoice:
    """What ``auto`` compared (rare-value variance x n, exact) and what it took."""

    chosen: str
    variances: dict[str, float]


def auto_choice(
    epsilon: float,
    domain_size: int,
    kind: Kind = "frequency",
    levels: int = 1,
    epsilon_inf: float | None = None,
) -> AutoChoice:
    """The lowest-variance candidate of ``kind`` for (d, eps); a d-bit report gives way
    to a compact one within ``REPORT_SIZE_TOLERANCE``.  Means compare the worst-case
    variance, then the average one within ``WORST_CASE_TOLERANCE``.  ``levels=2``
    weighs only mechanisms that have a two-level form; with ``epsilon_inf`` it weighs
    the two-level forms themselves (a memoised OLH is not a one-level OLH's
    variance), and a memoised mean compares them over ``AUTO_WINDOW`` epochs
    (``TwoLevel.window_unit_variance``).

    >>> auto_choice(1.0, 1024, levels=2, epsilon_inf=4.0).chosen
    'oue'
    >>> auto_choice(1.0, 2, "mean", levels=2, epsilon_inf=4.0).chosen
    'piecewise'
    >>> auto_choice(0.5, 2, "mean", levels=2, epsilon_inf=1.0).chosen
    'one_bit_mean'
    """
    eps, d = check_mechanism_epsilon(epsilon), check_domain_size(domain_size)
    if kind == "mean" and levels == 2 and epsilon_inf is not None:
        means = {name: longitudinal(name, epsilon=eps, epsilon_inf=epsilon_inf, lo=0.0, hi=1.0)
                 for name, cls in _TWO.items() if cls.kind == "mean"}
        scores = {name: m.window_unit_variance(AUTO_WINDOW)  # type: ignore[attr-defined]
                  for name, m in means.items()}
        return AutoChoice(chosen=min(scores, key=scores.__getitem__), variances=scores)
    params = {"epsilon": eps, "domain_size": d, "lo": 0.0, "hi": 1.0}
    two = levels == 2 and epsilon_inf is not None
    built = {
        name: (_TWO[name] if two else cls).create({**params, "epsilon_inf": epsilon_inf})
        for name, cls in _ONE.items()
        if cls.kind == kind and cls.auto_candidate and (levels == 1 or name in _TWO)
    }
    variances = {name: m.unit_variance() for name, m in built.items()}
    best = min(variances, key=variances.__getitem__)
    if kind == "mean":
        near = [name for name in variances
                if variances[name] <= WORST_CASE_TOLERANCE * variances[best]]
        average = {name: built[name].average_variance() for name in near}
        return AutoChoice(chosen=min(near, key=average.__getitem__), variances=variances)
    # A report of d bits or more (a unary encoding) gives way to a compact one
    # whose variance is within the tolerance.
    linear = built[best].report_bits >= built[best].domain_size
    near = [
        name
        for name in variances
        if linear
        and variances[name] <= REPORT_SIZE_TOLERANCE * variances[best]
        and built[name].report_bits < built[best].report_bits
    ]
    chosen = min(near, key=variances.__getitem__) if near else best
    return AutoChoice(chosen=chosen, variances=variances)


def resolve_auto(
    name: str,
    kind: Kind,
    epsilon: float,
    domain_size: int,
    levels: int = 1,
    epsilon_inf: float | None = None,
) -> str:
    """``name``, or what ``auto`` resolves to for a metric of ``kind``: the one place."""
    if name != "auto":
        return name
    return auto_choice(epsilon, domain_size, kind, levels, epsilon_inf).chosen


def _kind_of(params: dict[str, Any]) -> Kind:
    if params.get("lo") is not None and params.get("hi") is not None:
        return "mean"
    return "frequency" if params.get("domain_size") is not None else "binary"


def mechanism(
    name: str,
    *,
    epsilon: float | None = None,
    domain_size: int | None = None,
    lo: float | None = None,
    hi: float | None = None,
    p: float | Fraction | None = None,
    truth: float | Fraction | None = None,
    yes: float | Fraction | None = None,
    g: int | None = None,
    buckets: int | None = None,
    max_length: int | None = None,
    alphabet: str | None = None,
    casefold: bool | None = None,
) -> Mechanism:
    """Build a mechanism by name; every bad parameter is a ValueError naming it.

    - ``binary_rr``: ``epsilon=`` or ``p=`` (keep probability)
    - ``forced_response``: ``truth=`` and ``yes=`` (coins), or ``epsilon=``
    - ``grr``, ``sue``, ``oue``, ``olh`` (optional ``g=``), ``hadamard``, ``cms`` and
      ``hcms`` (optional ``buckets=``), ``auto``: ``epsilon=``, ``domain_size=``
    - ``one_bit_mean``, ``piecewise``, ``hybrid``, ``square_wave``, ``hierarchical``:
      ``epsilon=``, ``lo=``,
      ``hi=``
    - ``prefix_olh`` (strings): ``epsilon=``, optional ``max_length=`` (6),
      ``alphabet=`` ("a-z", or "bytes") and ``casefold=`` (True)
    """
    params = {
        key: value
        for key, value in (
            ("epsilon", epsilon), ("domain_size", domain_size), ("lo", lo), ("hi", hi),
            ("p", p), ("truth", truth), ("yes", yes), ("g", g), ("buckets", buckets),
            ("max_length", max_length), ("alphabet", alphabet), ("casefold", casefold),
        )
        if value is not None
    }
    if name == "auto":
        if epsilon is None or domain_size is None:
            raise ValueError("mechanism 'auto' needs epsilon= and domain_size=")
        name = auto_choice(epsilon, domain_size).chosen
    if name not in _ONE:
        raise ValueError(f"unknown mechanism {name!r}; known: {', '.join(NAMES)}")
    return _ONE[name].create(params)


def longitudinal(
    name: str,
    *,
    epsilon: float,
    epsilon_inf: float,
    domain_size: int | None = None,
    lo: float | None = None,
    hi: float | None = None,
    max_length: int | None = None,
    alphabet: str | None = None,
    casefold: bool | None = None,
) -> Mechanism:
    """A two-level mechanism: eps_1 <= ``epsilon`` per report, ``epsilon_inf`` per value.

    ``prefix_olh`` (strings) takes the string parameters of ``mechanism()``.

    ``name``: any registered two-level name, or ``auto`` (the two-level candidate of
    the kind the parameters imply with the lowest variance at (epsilon, epsilon_inf);
    a mean over ``AUTO_WINDOW`` epochs).  Every bad parameter is a ValueError naming it.
    """
    params: dict[str, Any] = {
        "epsilon": epsilon, "epsilon_inf": epsilon_inf,
        "domain_size": domain_size, "lo": lo, "hi": hi,
        "max_length": max_length, "alphabet": alphabet, "casefold": casefold,
    }
    params = {key: value for key, value in params.items() if value is not None}
    if name == "auto":
        kind = _kind_of(params)
        name = auto_choice(epsilon, domain_size or 2, kind, levels=2,
                           epsilon_inf=epsilon_inf).chosen
    if name not in _TWO:
        raise ValueError(
            f"no two-level version of mechanism {name!r}; known: {', '.join(_TWO)}, auto"
        )
    return _TWO[name].create(params)
