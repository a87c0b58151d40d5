"""The record path shared by ``Client`` and ``Fleet`` devices, and the privacy report.

``record_into`` is the whole device path for one value: spec lookup, domain
check, the device's caps, sampling, the budget ledger, randomisation, the
queue.  The value is a local of this call and of ``DeviceState.prepare`` only.

Bad data never raises by default: a value that is not in the metric's domain
(a category not listed -- case matters --, not a boolean, not a finite number,
a wrong type) is refused as ``invalid_value``, counted, and logged once per
metric at WARNING without the value; a number outside [lo, hi] is clamped to
the nearest bound (the usual practice under LDP: the mechanism needs a bounded
input) and counted in ``tally["clamped"]``.  ``strict=True`` raises the
``ValueError`` (naming the value) instead, for tests.

>>> from ldp_core.metric import MetricSpec
>>> age = MetricSpec.from_json({"name": "age", "kind": "numeric", "lo": 0, "hi": 120,
...                             "epsilon": 1.0})
>>> clamp(age, 500), clamp(age, -1), clamp(age, float("nan")), clamp(age, "12")
(120.0, 0.0, None, None)
>>> why_invalid(MetricSpec.from_json({"name": "b", "kind": "categorical",
...     "domain": ["firefox", "chrome"], "epsilon": 1.0}), "Firefox")
'not one of the 2 categories (a category differs only in case)'

>>> Sampler(1.0).keep("m", None), Sampler(0.0).keep("m", None)
(True, False)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping

from client_sdk._catalog import Catalog
from client_sdk._config import PrivacyCaps
from client_sdk._device import DeviceState, Outcome
from client_sdk._errors import ConfigError
from client_sdk._ledger import LIFETIME_MULTIPLE, Ask, Spend, lifetime_cap
from client_sdk._pipeline import Pipeline
from client_sdk._results import LifetimeSpend, PrivacyReport, RecordResult, UnitSpend
from client_sdk._store import Row
from ldp_core._rng import SYSTEM_RNG, Rng
from ldp_core.epsilon import adversary_accuracy
from ldp_core.metric import MetricSpec

__all__ = ["Sampler", "build_report", "clamp", "lifetime_budgets_of", "record_into",
           "why_invalid"]


class Sampler:
    """``sample_rate`` as exact integer thresholds over 2**32, drawn from the CSPRNG."""

    __slots__ = ("_default", "_per_metric")

    def __init__(self, rate: float | Mapping[str, float]) -> None:
        rates = {} if not isinstance(rate, Mapping) else dict(rate)
        default = 1.0 if isinstance(rate, Mapping) else rate
        for name, r in [("sample_rate", default), *rates.items()]:
            if isinstance(r, bool) or not isinstance(r, int | float) or not 0 <= r <= 1:
                raise ConfigError(f"sample rate for {name!r} must be in [0, 1], got {r!r}")
        self._default = _threshold(default)
        self._per_metric = {k: _threshold(v) for k, v in rates.items()}

    def keep(self, metric: str, rng: Rng | None) -> bool:
        threshold = self._per_metric.get(metric, self._default)
        if threshold is None:
            return True
        return (rng or SYSTEM_RNG).getrandbits(32) < threshold


def lifetime_budgets_of(budgets: Mapping[str, float] | None) -> dict[str, float]:
    """``lifetime_budgets`` checked: each a number > 0; ``math.inf`` lifts a name's cap.

    >>> lifetime_budgets_of({"theme": 8, "page": math.inf})
    {'theme': 8.0, 'page': inf}
    """
    out = {}
    for name, cap in (budgets or {}).items():
        if isinstance(cap, bool) or not isinstance(cap, int | float) or not cap > 0:
            raise ConfigError(f"lifetime budget for {name!r} must be a number > 0"
                              f" (math.inf: no cap), got {cap!r}")
        out[name] = float(cap)
    return out


def _threshold(rate: float) -> int | None:
    return None if rate >= 1 else math.floor(rate * (1 << 32))


def record_into(
    pipeline: Pipeline,
    device: DeviceState,
    metric: str,
    value: object,
    *,
    sampler: Sampler,
    caps: PrivacyCaps,
    budgets: Mapping[str, float],
    lifetime_budgets: Mapping[str, float],
    now: float,
    rng: Rng | None,
    strict: bool = False,
    tally: Counter[str] | None = None,
) -> RecordResult:
    """The record path shared by ``Client`` and ``Fleet`` devices (see the module
    docstring for bad values; ``tally`` counts ``clamped`` values)."""
    catalog = pipeline.catalog
    spec = catalog.get(metric)
    if spec is None:
        pipeline.refused("unknown_metric", warn=(f"unknown|{metric}", (
            f"metric {metric}: no spec for it on this device (bundled, cached or fetched):"
            " not recorded, counted in counters().refused['unknown_metric']")))
        return RecordResult("unknown_metric", metric)
    if catalog.conflicted(metric):
        pipeline.refused("spec_conflict")
        return RecordResult("spec_conflict", metric)
    if not caps.allows(spec.epsilon, spec.epsilon_inf):
        pipeline.refused("spec_over_cap", warn=(f"cap|{metric}", (
            f"metric {metric}: epsilon {spec.epsilon:g}"
            + ("" if spec.epsilon_inf is None else f", epsilon_inf {spec.epsilon_inf:g}")
            + f" exceeds this device's caps (epsilon {caps.epsilon:g},"
            f" epsilon_inf {caps.epsilon_inf:g}): refused, no report")))
        return RecordResult("spec_over_cap", metric)
    try:
        index = catalog.index_of(spec, value)
    except (ValueError, TypeError):
        if strict:
            raise
        clamped = clamp(spec, value)
        if clamped is None:
            pipeline.refused("invalid_value", warn=(f"invalid|{metric}", (
                f"metric {metric}: a value was refused ({why_invalid(spec, value)}):"
                " not recorded, counted in counters().refused['invalid_value']")))
            return RecordResult("invalid_value", metric)
        index = clamped
        if tally is not None:
            tally["clamped"] += 1
        pipeline.warn_once(f"clamp|{metric}", (
            f"metric {metric}: a value outside [{spec.lo:g}, {spec.hi:g}] was clamped to"
            " the nearest bound (counted in counters().clamped)"))
    if not sampler.keep(metric, rng):
        pipeline.refused("sampled_out")
        return RecordResult("sampled_out", metric)
    fingerprint = catalog.fingerprint(spec)
    budget = budgets.get(metric, spec.epsilon)
    lifetime_budget = lifetime_budgets.get(metric)

    def prepare(spool: Callable[[Row], None] | None) -> Outcome:
        return device.prepare(spec, fingerprint, index, now, budget=budget,
                              lifetime_budget=lifetime_budget, spool=spool, rng=rng,
                              lifetime_multiple=caps.lifetime_multiple)

    outcome = pipeline.submit(prepare)
    if outcome.status == "spec_conflict":  # the ledger knew this version with other params
        pipeline.warn_once(f"conflict|{metric}|{spec.version}", (
            f"metric {metric} version {spec.version} differs from the spec this device was"
            " charged under: refused, no report until a new version"))
    if outcome.status != "queued":
        return RecordResult(outcome.status, metric, outcome.epoch)  # type: ignore[arg-type]
    key = (metric, outcome.epoch)
    result = _QUEUED.get(key)
    if result is None:
        if len(_QUEUED) > 4096:
            _QUEUED.clear()
        result = _QUEUED[key] = RecordResult("queued", metric, outcome.epoch)
    return result


def clamp(spec: MetricSpec, value: object) -> float | None:
    """A finite real number clamped to a numeric spec's [lo, hi]; None for anything
    else (a bool, a string, NaN, an infinity, another kind of metric)."""
    if (spec.kind != "numeric" or spec.lo is None or spec.hi is None
            or isinstance(value, bool) or not isinstance(value, int | float)):
        return None
    number = float(value)
    if not math.isfinite(number):
        return None
    return min(max(number, float(spec.lo)), float(spec.hi))


def why_invalid(spec: MetricSpec, value: object) -> str:
    """Why ``value`` is not in ``spec``'s domain, in words that never quote the value."""
    if spec.kind == "categorical":
        text = f"not one of the {len(spec.domain)} categories"
        if isinstance(value, str) and value.casefold() in {
                c.casefold() for c in spec.domain if isinstance(c, str)}:
            text += " (a category differs only in case)"
        elif not isinstance(value, str):
            text += f" (a {type(value).__name__}, not a str)"
        return text
    if spec.kind == "boolean":
        return f"not a boolean (a {type(value).__name__})"
    if spec.kind == "string":
        if not isinstance(value, str):
            return f"not a str (a {type(value).__name__})"
        return (f"not a string of at most {spec.max_length} symbols of {spec.alphabet}"
                f" after NFC{', casefold' if spec.casefold else ''}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"not a number (a {type(value).__name__})"
    return "not a finite number"


#: Immutable "queued" results, shared (a RecordResult holds no value).
_QUEUED: dict[tuple[str, int | None], RecordResult] = {}


_GENERIC_UNIT = "per device, per metric, per epoch"


def build_report(spend: Spend, catalog: Catalog, budgets: Mapping[str, float],
                 lifetime_budgets: Mapping[str, float],
                 lifetime_multiple: float = LIFETIME_MULTIPLE) -> PrivacyReport:
    """The privacy report of a ledger: per (name, epoch) and per name's lifetime (its
    budget: the app's, else ``lifetime_multiple`` x the epsilon_inf of the first draw)."""
    units = []
    for metric, epoch, spent, reports in spend.units:
        spec = catalog.get(metric)
        units.append(UnitSpend(
            metric=metric, epoch=epoch,
            epoch_start=None if spec is None else float(epoch * spec.epoch_seconds),
            unit=_GENERIC_UNIT if spec is None else spec.unit_text(), reports=reports,
            spent=spent, budget=budgets.get(metric, None if spec is None else spec.epsilon),
            adversary_accuracy=adversary_accuracy(spent) if spent > 0 else 0.5,
        ))
    lifetime = [
        LifetimeSpend(
            metric=metric, memoised_values=n, epsilon_inf=spent / n, spent=spent,
            budget=lifetime_cap(Ask(metric, 0, "", 1, 0.0, 0.0, 0.0, None, first,
                                    lifetime_budgets.get(metric), lifetime_multiple), first),
            first_epsilon_inf=first,
            adversary_accuracy=adversary_accuracy(spent) if spent > 0 else 0.5,
        )
        for metric, n, spent, first in spend.lifetime if n
    ]
    return PrivacyReport(tuple(units), tuple(lifetime))
