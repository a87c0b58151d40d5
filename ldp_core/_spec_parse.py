"""A metric spec's JSON form, field by field: the vocabulary, the limits, the checks.

``MetricSpec.from_json`` (``ldp_core.metric``) is the public door.  This module
turns the raw JSON object into the fields of a ``MetricSpec`` and names every
bad field at once, so the collector answers one 422 that lists them all:

>>> fields = parse_fields({"name": "plan", "kind": "categorical",
...     "domain": ["free", "pro"], "epsilon": 1.0})
>>> fields["domain"], fields["mechanism"], fields["epoch"], fields["statistics"]
(('free', 'pro'), 'auto', 'day', ())

>>> parse_fields({"name": "Plan", "kind": "numeric", "lo": 5, "hi": 1, "epsilon": 1.0,
...     "colour": "red"})
Traceback (most recent call last):
...
ldp_core.metric.SpecError: colour: unknown field; name: must match ^[a-z][a-z0-9_.-]{0,63}$, \
got 'Plan'; lo: lo must be < hi, got lo=5, hi=1

A spec whose fields are each valid may still ask too much of the collector once
its mechanism is built; ``check_cost`` says so (``MetricSpec.from_json`` calls it).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Literal, TypedDict

from ldp_core.base import Kind, Mechanism
from ldp_core.epsilon import check_epsilon
from ldp_core.mechanisms._alphabet import Alphabet
from ldp_core.mechanisms.mean import check_bounds
from ldp_core.registry import NAMES, names_for

__all__ = [
    "DISTRIBUTIONAL",
    "DISTRIBUTION_MECHANISM",
    "EPOCH_SECONDS",
    "KIND_ESTIMATE",
    "MAX_CATEGORIES",
    "MAX_COUNTERS_PER_REPORT",
    "MAX_COUNTER_EPOCHS",
    "MAX_SPEC_EPSILON",
    "MAX_SPEC_EPSILON_INF",
    "NAME_PATTERN",
    "STATISTICS",
    "MetricKind",
    "SpecError",
    "SpecFields",
    "check_cost",
    "parse_fields",
    "unprintable",
]

MetricKind = Literal["boolean", "categorical", "numeric", "string"]
EPOCH_SECONDS = {"hour": 3600, "day": 86400}
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MAX_CATEGORIES = 1 << 16
#: The largest epsilon a spec may ask per report, and over a lifetime.  At eps = 10
#: one report already lets an observer guess a yes/no answer right 99.995% of the
#: time: past it the randomisation is a formality.  (Devices cap lower by default.)
MAX_SPEC_EPSILON = 10.0
MAX_SPEC_EPSILON_INF = 20.0
#: Counters one report may set on average: beyond it a 1 MiB batch merges millions of
#: increments (an OUE report over 65,536 values sets ~18,000); olh and hadamard fit.
MAX_COUNTERS_PER_REPORT = 1024
#: Counters x epochs of one metric over 31 days (hourly OLH at d = 65,536 is 73M).
MAX_COUNTER_EPOCHS = 1 << 24

#: What a numeric metric can serve; ``DISTRIBUTIONAL`` ones need ``DISTRIBUTION_MECHANISM``.
STATISTICS = ("mean", "distribution", "quantiles")
DISTRIBUTIONAL = frozenset({"distribution", "quantiles"})
DISTRIBUTION_MECHANISM = "square_wave"

#: The estimate each metric kind asks of its mechanism.
KIND_ESTIMATE: dict[str, Kind] = {
    "boolean": "binary",
    "categorical": "frequency",
    "numeric": "mean",
    "string": "string",
}
_ALLOWED: dict[str, tuple[str, ...]] = {
    metric_kind: (*names_for(kind), "auto") for metric_kind, kind in KIND_ESTIMATE.items()
}
_FIELDS = frozenset(
    {
        "name",
        "kind",
        "domain",
        "lo",
        "hi",
        "epsilon",
        "mechanism",
        "epoch",
        "unit",
        "longitudinal",
        "min_reports",
        "version",
        "params",
        "max_length",
        "alphabet",
        "casefold",
        "statistics",
    }
)

#: Unicode categories a label may not hold: controls (NUL included), format
#: characters (the bidi overrides and isolates, zero-width joiners), surrogates,
#: private use, unassigned, and line or paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


class SpecError(ValueError):
    """A bad metric spec; ``errors`` maps each bad field to what is wrong with it.

    >>> error = SpecError({"epoch": "must be 'hour' or 'day', got 'week'"})
    >>> error.errors["epoch"], str(error)
    ("must be 'hour' or 'day', got 'week'", "epoch: must be 'hour' or 'day', got 'week'")
    """

    __module__ = "ldp_core.metric"  # its public home, as tracebacks and doctests name it

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


class SpecFields(TypedDict):
    """The validated fields of a ``MetricSpec`` (its constructor's keywords)."""

    name: str
    kind: MetricKind
    epsilon: float
    mechanism: str
    domain: tuple[str, ...]
    lo: float | None
    hi: float | None
    epoch: Literal["hour", "day"]
    unit: str
    epsilon_inf: float | None
    min_reports: int
    version: int
    max_length: int | None
    alphabet: str | None
    casefold: bool
    statistics: tuple[str, ...]


def unprintable(text: str) -> bool:
    r"""Whether ``text`` holds a character that can hide or reorder what is shown.

    >>> unprintable("chrome"), unprintable("evil\u202eexe.txt"), unprintable("a\x00")
    (False, True, True)
    """
    return any(unicodedata.category(ch) in _UNPRINTABLE for ch in text)


def check_cost(built: Mechanism, epoch: str) -> None:
    """SpecError for a mechanism too costly to keep (see the MAX_* bounds above).

    >>> from ldp_core.registry import mechanism
    >>> check_cost(mechanism("olh", epsilon=1.0, domain_size=65536), "day")  # fits
    >>> check_cost(mechanism("oue", epsilon=1.0, domain_size=65536), "day")
    Traceback (most recent call last):
    ...
    ldp_core.metric.SpecError: mechanism: oue sets 17626 counters per report on average \
over 65536 values (at most 1024); olh or hadamard keep a large domain cheap
    """
    law = built.tally_sum_law()
    if law is not None and law[0] > MAX_COUNTERS_PER_REPORT:
        raise SpecError(
            {
                "mechanism": (
                    f"{built.name} sets {law[0]:.0f} counters per report on average over "
                    f"{built.domain_size} values (at most {MAX_COUNTERS_PER_REPORT}); "
                    "olh or hadamard keep a large domain cheap"
                )
            }
        )
    epochs = 31 * 86400 // EPOCH_SECONDS[epoch]
    if built.num_counters * epochs > MAX_COUNTER_EPOCHS:
        raise SpecError(
            {
                "epoch": (
                    f"{built.num_counters} counters x {epochs} epochs a month is over "
                    f"{MAX_COUNTER_EPOCHS}; use a daily epoch or a smaller domain"
                )
            }
        )


def parse_fields(data: dict[str, Any]) -> SpecFields:
    """The fields of a JSON spec; ``SpecError`` names every bad field at once.

    Errors are listed in the order the fields are checked.  The mechanism stays
    as asked (``auto`` included): resolving it needs the built mechanism.
    """
    errors: dict[str, str] = {}
    for key in data:
        if key not in _FIELDS:
            errors[key] = "unknown field"
    name = data.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        errors["name"] = f"must match {NAME_PATTERN.pattern}, got {name!r}"
    kind = _text(data.get("kind"))
    if kind not in _ALLOWED:
        errors["kind"] = (
            f"must be one of boolean, categorical, numeric, string, got {data.get('kind')!r}"
        )
    epsilon = _epsilon(data.get("epsilon"), errors)
    mech = _text(data.get("mechanism", "auto"))
    if mech not in NAMES:
        errors["mechanism"] = f"unknown mechanism {data.get('mechanism')!r}"
    elif kind in _ALLOWED and mech not in _ALLOWED[kind]:
        errors["mechanism"] = f"{mech!r} does not fit a {kind} metric"
    domain, lo, hi = _values(kind, data, errors)
    max_length, alphabet, casefold = _string_form(kind, data, errors)
    statistics = _statistics(kind, data.get("statistics"), errors)
    if (
        DISTRIBUTIONAL & set(statistics)
        and "mechanism" not in errors
        and mech not in ("auto", DISTRIBUTION_MECHANISM)
    ):
        errors["mechanism"] = (
            f"{mech!r} serves only the mean; a distribution or quantiles need "
            f"{DISTRIBUTION_MECHANISM!r} (or 'auto')"
        )
    epoch = _text(data.get("epoch", "day"))
    if epoch not in EPOCH_SECONDS:
        errors["epoch"] = f"must be 'hour' or 'day', got {data.get('epoch')!r}"
    unit = data.get("unit", "device")
    if not isinstance(unit, str) or not 0 < len(unit) <= 64 or unprintable(unit):
        errors["unit"] = f"must be a short text such as 'device', got {unit!r}"
    epsilon_inf = _longitudinal(data.get("longitudinal"), epsilon, errors)
    min_reports = data.get("min_reports", 100)
    if isinstance(min_reports, bool) or not isinstance(min_reports, int) or min_reports < 0:
        errors["min_reports"] = f"must be an integer >= 0, got {min_reports!r}"
    version = data.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        errors["version"] = f"must be an integer >= 1, got {version!r}"
    if errors:
        raise SpecError(errors)
    return SpecFields(
        name=name,  # type: ignore[typeddict-item]
        kind=kind,  # type: ignore[typeddict-item]
        epsilon=epsilon,
        mechanism=str(mech),
        domain=domain,
        lo=lo,
        hi=hi,
        epoch=epoch,  # type: ignore[typeddict-item]
        unit=unit,
        epsilon_inf=epsilon_inf,
        min_reports=min_reports,
        version=version,
        max_length=max_length if kind == "string" else None,
        alphabet=alphabet if kind == "string" else None,
        casefold=casefold,
        statistics=statistics,
    )


def _text(value: object) -> str | None:
    """A JSON string field, or None for anything else (lists and objects included)."""
    return value if isinstance(value, str) else None


def _epsilon(raw: object, errors: dict[str, str]) -> float:
    """The per-report epsilon (at most MAX_SPEC_EPSILON); 1.0 after a named error."""
    try:
        epsilon = check_epsilon(raw)  # type: ignore[arg-type]
        if epsilon > MAX_SPEC_EPSILON:
            raise ValueError(f"epsilon must be at most {MAX_SPEC_EPSILON:g}, got {epsilon}")
    except ValueError as exc:
        errors["epsilon"] = str(exc)
        epsilon = 1.0
    return epsilon


def _values(
    kind: str | None, data: dict[str, Any], errors: dict[str, str]
) -> tuple[tuple[str, ...], float | None, float | None]:
    """A categorical metric's domain, a numeric metric's (lo, hi); empty for the rest."""
    domain: tuple[str, ...] = ()
    lo = hi = None
    if kind == "categorical":
        raw = data.get("domain")
        if (
            not isinstance(raw, list)
            or not 2 <= len(raw) <= MAX_CATEGORIES
            or not all(isinstance(x, str) and 0 < len(x) <= 200 for x in raw)
        ):
            errors["domain"] = f"must be a list of 2 to {MAX_CATEGORIES} non-empty strings"
        elif len(set(raw)) != len(raw):
            errors["domain"] = "categories must be distinct"
        elif (bad := next((i for i, x in enumerate(raw) if unprintable(x)), None)) is not None:
            errors["domain"] = (
                f"category {bad} holds a control, format (bidi) or unassigned character"
            )
        else:
            domain = tuple(raw)
    elif kind == "numeric":
        try:
            lo, hi = check_bounds(data.get("lo"), data.get("hi"))
        except ValueError as exc:
            errors["lo" if "lo" in str(exc).split()[0] else "hi"] = str(exc)
    return domain, lo, hi


def _string_form(
    kind: str | None, data: dict[str, Any], errors: dict[str, str]
) -> tuple[Any, Any, Any]:
    """A string metric's (max_length, alphabet, casefold), defaults filled in."""
    max_length, alphabet, casefold = data.get("max_length"), data.get("alphabet"), True
    if kind == "string":
        max_length = data.get("max_length", 8)
        alphabet = data.get("alphabet", "a-z")
        casefold = data.get("casefold", True)
        if not isinstance(casefold, bool):
            errors["casefold"] = f"must be true or false, got {casefold!r}"
        else:
            try:
                Alphabet.parse(alphabet, max_length, casefold)
            except ValueError as exc:
                errors["max_length" if "max_length" in str(exc) else "alphabet"] = str(exc)
    elif any(key in data for key in ("max_length", "alphabet", "casefold")):
        errors["kind"] = "max_length, alphabet and casefold belong to a string metric"
    return max_length, alphabet, casefold


def _statistics(kind: str | None, raw: object, errors: dict[str, str]) -> tuple[str, ...]:
    """A numeric metric's statistics (default ("mean",)); a named error otherwise."""
    if kind != "numeric":
        if raw is not None:
            errors["statistics"] = "only a numeric metric serves statistics"
        return ()
    if raw is None:
        return ("mean",)
    if (
        not isinstance(raw, list)
        or not raw
        or not all(isinstance(x, str) and x in STATISTICS for x in raw)
    ):
        errors["statistics"] = (
            f"must be a non-empty list drawn from {', '.join(STATISTICS)}, got {raw!r}"
        )
        return ()
    if len(set(raw)) != len(raw):
        errors["statistics"] = "statistics must be distinct"
        return ()
    return tuple(raw)


def _longitudinal(raw: object, epsilon: float, errors: dict[str, str]) -> float | None:
    """The lifetime epsilon_inf of ``{"epsilon_inf": x}`` (None when absent)."""
    epsilon_inf = None
    if raw is not None:
        if not isinstance(raw, dict) or set(raw) != {"epsilon_inf"}:
            errors["longitudinal"] = 'must be {"epsilon_inf": <number>} or absent'
        else:
            try:
                epsilon_inf = check_epsilon(raw["epsilon_inf"], "epsilon_inf")
                if epsilon_inf > MAX_SPEC_EPSILON_INF:
                    raise ValueError(
                        f"epsilon_inf must be at most {MAX_SPEC_EPSILON_INF:g}, got {epsilon_inf}"
                    )
                if epsilon_inf <= epsilon:
                    errors["longitudinal"] = (
                        f"epsilon_inf {epsilon_inf} must exceed the per-report epsilon {epsilon}"
                    )
            except ValueError as exc:
                errors["longitudinal"] = str(exc)
    return epsilon_inf
