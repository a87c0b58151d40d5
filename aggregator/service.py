"""What the routes compute: a metric's estimate over a window, and comparisons.

Kept apart from HTTP so that the JSON API and the dashboard page share it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from aggregator.decide import decide
from aggregator.poisoning import estimate_signals
from aggregator.problems import Problem
from aggregator.views import EstimateOptions, estimate_json, metric_facts
from aggregator.window import TallyReader, WindowTooLarge, read_window
from collector.store import SUM_Z_FLAG, count_sum_z
from ldp_core.metric import NAME_PATTERN, MetricSpec

__all__ = ["MetricReader", "compare", "estimate_response", "load_spec", "poisoning"]


class MetricReader(TallyReader, Protocol):
    """The whole read side of ``collector.store.Store`` used here."""

    async def list_metrics(self) -> list[MetricSpec]: ...

    async def get_metric(self, name: str, version: int | None = None) -> MetricSpec | None: ...

    async def read_flags(self, spec: MetricSpec, epochs: Iterable[int]) -> dict[int, int]: ...


async def load_spec(store: MetricReader, name: str, version: int | None) -> MetricSpec:
    """The metric (latest version unless asked), else 404 ``unknown_metric``."""
    if not NAME_PATTERN.match(name):
        raise Problem(404, "unknown_metric", "no metric has that name")
    spec = await store.get_metric(name, version)
    if spec is None:
        which = f"{name!r}" if version is None else f"{name!r} version {version}"
        raise Problem(404, "unknown_metric", f"no metric {which}")
    return spec


def _check_window(start: int | None, end: int | None) -> None:
    if start is not None and end is not None and start >= end:
        raise Problem(422, "bad_window", f"start ({start}) must be below end ({end})")


async def estimate_response(
    store: MetricReader,
    spec: MetricSpec,
    *,
    start: int | None,
    end: int | None,
    options: EstimateOptions,
    series: bool,
    max_epochs: int,
) -> dict[str, Any]:
    """The JSON of GET /v1/estimates/{name}."""
    _check_window(start, end)
    try:
        window = await read_window(store, spec, start, end, max_epochs)
    except WindowTooLarge as exc:
        raise Problem(422, "window_too_large", str(exc)) from None
    out = metric_facts(spec)
    out["window"] = {
        "start": start,
        "end": end,
        "epochs": len(window.epochs),
        "first_epoch": window.epochs[0] if window.epochs else None,
        "last_epoch": window.epochs[-1] if window.epochs else None,
    }
    out["confidence"] = options.confidence
    # The whole window: a memoised metric's stderr counts the epochs with data.
    out.update(estimate_json(spec, window.total, window.n, options, epochs=len(window.epochs)))
    out["poisoning"] = await poisoning(
        store, spec, window.epochs, window.total, window.n, per_epoch=window.per_epoch
    )
    if series:
        out["series"] = [
            {
                "epoch": epoch,
                "start_time": epoch * spec.epoch_seconds,
                **estimate_json(spec, vector, n, options),
            }
            for epoch, vector, n in window.per_epoch
        ]
    return out


async def poisoning(
    store: MetricReader,
    spec: MetricSpec,
    epochs: Sequence[int],
    total: Sequence[int],
    n: int,
    *,
    per_epoch: Sequence[tuple[int, Sequence[int], int]] = (),
) -> dict[str, Any]:
    """Signs of lying clients in the window (local DP cannot stop them; it can show them).

    ``implausible_reports``: reports the collector refused because no honest
    device produces them (e.g. far too many set bits in a unary report).
    ``tally_sum_z``: for unary encodings, the z-score of the total number of set
    bits against the honest law; crafted reports that pass the per-report check
    still shift it.  The estimate's own signals (impossible shares, drift of
    the latest epoch, robust estimate; ``aggregator.poisoning``) are added from
    ``per_epoch`` (the window's (epoch, tallies, n)) or, without it, from the
    total alone.  ``flagged`` when any fires.
    """
    refused = sum((await store.read_flags(spec, epochs)).values()) if epochs else 0
    z = count_sum_z(spec.build(), list(total), n) if n else None
    flagged = refused > 0 or (z is not None and abs(z) > SUM_Z_FLAG)
    out: dict[str, Any] = {"implausible_reports": refused, "tally_sum_z": z}
    out.update(estimate_signals(spec, total, n, per_epoch, refused))
    out["flagged"] = flagged or out.pop("signals_flagged")
    return out


def _pick(spec: MetricSpec, body: dict[str, Any], label: str) -> dict[str, Any]:
    values = body["estimate"]["values"]
    try:
        return dict(values[spec.domain.index(label)])
    except ValueError:
        raise Problem(
            422, "unknown_category", f"{label!r} is not a category of metric {spec.name!r}"
        ) from None


async def compare(
    store: MetricReader,
    spec: MetricSpec,
    *,
    a: str | None,
    b: str | None,
    threshold: float | None,
    start: int | None,
    end: int | None,
    confidence: float,
    max_epochs: int,
) -> dict[str, Any]:
    """The JSON of GET /v1/estimates/{name}/compare."""
    categorical = spec.kind == "categorical"
    if categorical and (a is None or (b is None) == (threshold is None)):
        raise Problem(
            422,
            "bad_compare",
            "a categorical metric compares a=<category> with b=<category> or threshold=<share>",
        )
    if not categorical and (threshold is None or a is not None or b is not None):
        raise Problem(
            422,
            "bad_compare",
            f"a {spec.kind} metric compares its estimate with threshold=<number>",
        )
    body = await estimate_response(
        store,
        spec,
        start=start,
        end=end,
        options=EstimateOptions(confidence),
        series=False,
        max_epochs=max_epochs,
    )
    out: dict[str, Any] = {
        k: body[k]
        for k in (
            "metric",
            "version",
            "kind",
            "mechanism",
            "epsilon",
            "unit",
            "window",
            "n",
            "suppressed",
            "reason",
        )
    }
    out["confidence"] = confidence
    if body["suppressed"]:
        out.update(decision=None, answer="suppressed: " + str(body["reason"]))
        return out
    if categorical:
        assert a is not None
        left = _pick(spec, body, a)
        left_name = repr(a)
    else:
        left = body["estimate"]
        left_name = "the mean" if spec.kind == "numeric" else "the proportion of true"
    if b is not None:
        right = _pick(spec, body, b)
        right_name, right_value = repr(b), float(right["value"])
        # Var(a - b) <= (se_a + se_b)^2 whatever their correlation (see decide).
        stderr = float(left["stderr"]) + float(right["stderr"])
        out["b"] = {"category": b, **right}
        out["method"] = "difference of two values; stderr se_a + se_b (conservative)"
    else:
        assert threshold is not None
        right_name, right_value = f"the threshold {threshold:g}", threshold
        stderr = float(left["stderr"])
        out["threshold"] = threshold
        out["method"] = "estimate minus a fixed threshold; stderr of the estimate"
    out["a"] = {"category": a, **left} if categorical else left
    decision = decide(float(left["value"]) - right_value, stderr, confidence)
    out["decision"] = decision.to_json()
    out["answer"] = {
        "greater": f"{left_name} is larger than {right_name}",
        "less": f"{right_name} is larger than {left_name}",
        "too_close_to_call": "too close to call",
    }[decision.verdict]
    return out
