"""The record path shared by ``Client`` and ``Fleet`` devices, and the privacy report.

``record_into`` is the whole device path for one value: spec lookup, domain
check, sampling, the budget ledger, randomisation, the queue.  The value is a
local of this call and of ``DeviceState.prepare`` only.

>>> Sampler(1.0).keep("m", None), Sampler(0.0).keep("m", None)
(True, False)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from client_sdk._catalog import Catalog
from client_sdk._device import DeviceState
from client_sdk._errors import ConfigError
from client_sdk._pipeline import Pipeline
from client_sdk._results import LifetimeSpend, PrivacyReport, RecordResult, UnitSpend
from ldp_core._rng import SYSTEM_RNG, Rng
from ldp_core.epsilon import adversary_accuracy

__all__ = ["Sampler", "build_report", "record_into"]


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


def _threshold(rate: float) -> int | None:
    return None if rate >= 1 else math.floor(rate * (1 << 32))


def record_into(
    pipeline: Pipeline,
    device: DeviceState,
    metric: str,
    value: object,
    *,
    sampler: Sampler,
    budgets: Mapping[str, float],
    lifetime_budgets: Mapping[str, float],
    now: float,
    rng: Rng | None,
    persist_charge: bool,
) -> RecordResult:
    """The record path shared by ``Client`` and ``Fleet`` devices."""
    spec = pipeline.catalog.get(metric)
    if spec is None:
        pipeline.refused("unknown_metric")
        return RecordResult("unknown_metric", metric)
    index = pipeline.catalog.index_of(spec, value)
    if not sampler.keep(metric, rng):
        pipeline.refused("sampled_out")
        return RecordResult("sampled_out", metric)
    epoch = spec.epoch_at(now)
    prepared = device.prepare(
        spec, index, epoch, budget=budgets.get(metric, spec.epsilon),
        lifetime_budget=lifetime_budgets.get(metric), persist_charge=persist_charge, rng=rng,
    )
    if isinstance(prepared, str):
        pipeline.refused(prepared)
        return RecordResult(prepared, metric, epoch)  # type: ignore[arg-type]
    status = pipeline.enqueue(prepared.row, prepared.lifetime)
    if status != "queued":
        device.refund(prepared.unit, prepared.charge, prepared.lifetime)
        return RecordResult(status, metric, epoch)  # type: ignore[arg-type]
    key = (metric, epoch)
    result = _QUEUED.get(key)
    if result is None:
        if len(_QUEUED) > 4096:
            _QUEUED.clear()
        result = _QUEUED[key] = RecordResult("queued", metric, epoch)
    return result


#: Immutable "queued" results, shared (a RecordResult holds no value).
_QUEUED: dict[tuple[str, int], RecordResult] = {}


_GENERIC_UNIT = "per device, per metric, per epoch"


def build_report(device: DeviceState, catalog: Catalog, budgets: Mapping[str, float],
                 lifetime_budgets: Mapping[str, float]) -> PrivacyReport:
    units = []
    for (metric, version, epoch), spent in sorted(device.spent.items()):
        spec = catalog.get(metric)
        same = spec is not None and spec.version == version
        unit = spec.unit_text() if spec is not None and same else _GENERIC_UNIT
        budget = budgets.get(metric, spec.epsilon if spec is not None and same else None)
        units.append(UnitSpend(
            metric=metric, version=version, epoch=epoch,
            epoch_start=float(epoch * spec.epoch_seconds) if spec is not None and same else None,
            unit=unit, reports=device.reports.get((metric, version, epoch), 0), spent=spent,
            budget=budget, adversary_accuracy=adversary_accuracy(spent) if spent > 0 else 0.5,
        ))
    lifetime = []
    counts: dict[tuple[str, int], int] = {}
    for metric, version, _key in device.memo_keys:
        counts[(metric, version)] = counts.get((metric, version), 0) + 1
    for (metric, version), n in sorted(counts.items()):
        spent = device.lifetime_spent.get((metric, version), 0.0)
        lifetime.append(LifetimeSpend(
            metric=metric, version=version, memoised_values=n, epsilon_inf=spent / n,
            spent=spent, budget=lifetime_budgets.get(metric),
            adversary_accuracy=adversary_accuracy(spent) if spent > 0 else 0.5,
        ))
    return PrivacyReport(tuple(units), tuple(lifetime))
