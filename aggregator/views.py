"""Estimates as the API returns them: labelled, suppressed when too few reports.

One function turns (spec, tallies, n) into the JSON of an estimate; the route
adds the window, the series and the metric's facts.  Unbiased values are
returned as they are (they may be negative or above 1); the consistent ones,
when asked, are a separate field.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aggregator.distribution import DEFAULT_QUANTILES, distribution_json
from aggregator.estimate import FrequencyEstimate, check_target, estimate
from ldp_core.mechanisms.prefix import PrefixOLH
from ldp_core.metric import MetricSpec

__all__ = [
    "EstimateOptions",
    "discovered_json",
    "estimate_json",
    "metric_facts",
    "stderr_basis",
    "suppression_reason",
]


@dataclass(frozen=True)
class EstimateOptions:
    """Query options shared by every estimate of one request."""

    confidence: float = 0.95
    consistent: bool = False
    simultaneous: bool = False
    #: A distribution metric's quantiles and histogram buckets.
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    buckets: int = 16
    #: Whom the intervals are about: "reporters" (the reporting users' own values) or
    #: "population" (the law they were drawn from; ``aggregator.estimate``).
    target: str = "reporters"

    def __post_init__(self) -> None:
        check_target(self.target)


def _num(x: Any) -> float | None:
    """A JSON number (NaN and infinities become null)."""
    value = float(x)
    return value if math.isfinite(value) else None


def metric_facts(spec: MetricSpec) -> dict[str, Any]:
    """What every estimate response says about its metric and its privacy."""
    facts: dict[str, Any] = {
        "metric": spec.name,
        "version": spec.version,
        "kind": spec.kind,
        "mechanism": spec.mechanism,
        "epsilon": spec.epsilon,
        "unit": spec.unit_text(),
        "epoch_length": spec.epoch,
        "epoch_seconds": spec.epoch_seconds,
        "min_reports": spec.min_reports,
    }
    if spec.epsilon_inf is not None:
        facts["epsilon_inf"] = spec.epsilon_inf
    if spec.kind == "categorical":
        facts["domain"] = list(spec.domain)
    if spec.kind == "numeric":
        facts["lo"], facts["hi"] = spec.lo, spec.hi
    if spec.kind == "string":
        facts["max_length"], facts["alphabet"] = spec.max_length, spec.alphabet
        facts["normalisation"] = "NFC" + (", casefold" if spec.casefold else "")
    return facts


def suppression_reason(spec: MetricSpec, n: int) -> str | None:
    """Why an estimate over ``n`` reports is withheld, or None."""
    if n == 0:
        return "no reports in the window"
    if n < spec.min_reports:
        return f"{n} reports in the window, below the metric's minimum of {spec.min_reports}"
    return None


def stderr_basis(levels: int, epochs: int, target: str = "reporters") -> str:
    """How the stderr treats the reports of one device, and whom it is about, in words.

    >>> stderr_basis(2, 7)
    'memoised: correlated reports of one device over 7 epochs with data (bound)'
    >>> stderr_basis(1, 3, "population")
    'independent reports; population: plus the spread between people over 3 epochs (bound)'
    """
    if levels == 1:
        basis = "independent reports"
    elif epochs == 1:
        basis = "memoised: one epoch, one report per device"
    else:
        basis = f"memoised: correlated reports of one device over {epochs} epochs with data (bound)"
    if check_target(target) == "reporters":
        return basis
    if epochs == 1:
        return basis + "; population: plus the spread between people"
    return basis + f"; population: plus the spread between people over {epochs} epochs (bound)"


#: Candidates listed below the discovery cut, to fill a top list (``confident`` false).
STRING_TOP = 20


def discovered_json(
    m: PrefixOLH, tallies: Sequence[int], confidence: float, epochs: int = 1,
    target: str = "reporters",
) -> dict[str, Any]:
    """The strings a ``prefix_olh`` metric discovered: one row each (``category`` is the
    string, ``value`` its share of the reports, with stderr and interval; ``confident``
    when above the discovery cut), and what it could not see: ``detection_threshold``,
    the least share found with probability ``detection_power`` (and in reports).

    ``epochs``: the epochs with data the tallies sum; the memoised form's intervals
    and threshold widen with it (one device's reports are correlated).

    ``target="population"`` widens each found string's interval by the spread between
    people, f (1 - f) / n per epoch (``aggregator.estimate``); discovery is unchanged."""
    import numpy as np

    from aggregator.estimate import z_value

    found = m.discover(
        np.asarray(tallies, dtype=np.int64), confidence=confidence, top=STRING_TOP, epochs=epochs
    )
    z = z_value(confidence)

    def spread(f: Any) -> tuple[float, float, float]:
        """(stderr, ci_low, ci_high) for the target."""
        if check_target(target) == "reporters":
            return float(f.stderr), float(f.ci_low), float(f.ci_high)
        share = min(max(float(f.estimate), 0.0), 1.0)
        se = math.sqrt(float(f.stderr) ** 2 + epochs * share * (1 - share) / found.n)
        return se, float(f.estimate) - z * se, float(f.estimate) + z * se

    return {
        "values": [
            {
                "category": f.value,
                "value": _num(f.estimate),
                "stderr": _num(spread(f)[0]),
                "ci_low": _num(spread(f)[1]),
                "ci_high": _num(spread(f)[2]),
                "count": _num(f.count),
                "confident": f.confident,
            }
            for f in found.found
        ],
        "detection_threshold": _num(found.threshold),
        "detection_threshold_reports": _num(found.threshold * found.n),
        "detection_power": found.power,
        "level_reports": list(found.level_reports),
        "candidates": list(found.candidates),
    }


def estimate_json(
    spec: MetricSpec,
    tallies: tuple[int, ...],
    n: int,
    options: EstimateOptions,
    epochs: int | None = None,
) -> dict[str, Any]:
    """{"n", "suppressed", "reason", "estimate"}; ``estimate`` is None when suppressed.

    A metric that serves a distribution or quantiles adds them to the estimate
    of a window (``epochs`` given; ``aggregator.distribution``); the points of a
    series (``epochs`` None: one epoch each) carry the mean only, so a request
    runs one EM whatever its number of epochs.

    ``epochs``: how many epochs with data ``tallies`` sums; a memoised
    (two-level) metric's stderr grows with it (``aggregator.estimate``), and
    its estimate says so in ``stderr_basis``.
    """
    window = epochs is not None
    epochs = 1 if epochs is None else epochs
    reason = suppression_reason(spec, n)
    out: dict[str, Any] = {"n": n, "suppressed": reason is not None, "reason": reason}
    if reason is not None:
        out["estimate"] = None
        return out
    m = spec.build()
    if isinstance(m, PrefixOLH):
        out["estimate"] = discovered_json(m, tallies, options.confidence, epochs,
                                          options.target)
        out["estimate"]["stderr_basis"] = stderr_basis(m.levels, epochs, options.target)
        out["estimate"]["target"] = options.target
        out["confidence"] = options.confidence
        out["target"] = options.target
        out["simultaneous"] = False
        return out
    e = estimate(
        m,
        list(tallies),
        n,
        confidence=options.confidence,
        consistent=options.consistent,
        simultaneous=options.simultaneous,
        epochs=epochs,
        target=options.target,
    )
    if isinstance(e, FrequencyEstimate):
        consistent = e.consistent
        out["estimate"] = {
            "values": [
                {
                    "category": label,
                    "value": _num(e.value[i]),
                    "stderr": _num(e.stderr[i]),
                    "ci_low": _num(e.ci_low[i]),
                    "ci_high": _num(e.ci_high[i]),
                    **({"consistent": _num(consistent[i])} if consistent is not None else {}),
                }
                for i, label in enumerate(spec.domain)
            ],
        }
    else:
        out["estimate"] = {
            "value": _num(e.value),
            "stderr": _num(e.stderr),
            "ci_low": _num(e.ci_low),
            "ci_high": _num(e.ci_high),
            "quantity": "mean" if spec.kind == "numeric" else "proportion of true",
        }
        if window and spec.serves_distribution:
            out["estimate"].update(distribution_json(
                spec.statistics, m, tallies, n, options.confidence, options.quantiles,
                options.buckets, options.target))
    out["estimate"]["stderr_basis"] = stderr_basis(m.levels, epochs, options.target)
    out["estimate"]["target"] = options.target
    out["confidence"] = options.confidence
    out["target"] = options.target
    out["simultaneous"] = options.simultaneous and m.kind == "frequency"
    return out
