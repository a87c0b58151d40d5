"""What the routes compute: a metric's estimate over a window, and comparisons.

Kept apart from HTTP so that the JSON API and the dashboard page share it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from aggregator.decide import decide
from aggregator.paging import DEFAULT_BOUND, Page, ReadBound, ReadCost, plan_page, too_costly
from aggregator.poisoning import Policy, estimate_signals
from aggregator.problems import Problem
from aggregator.views import EstimateOptions, estimate_json, metric_facts
from aggregator.window import (
    TallyReader,
    WindowTallies,
    WindowTooLarge,
    epochs_in_window,
    read_window,
)
from collector.store import SUM_Z_FLAG, count_sum_z
from ldp_core.metric import NAME_PATTERN, MetricSpec

__all__ = [
    "MetricReader",
    "compare",
    "estimate_response",
    "load_spec",
    "poisoning",
    "read_cost",
    "signals_json",
]


class MetricReader(TallyReader, Protocol):
    """The whole read side of ``collector.store.Store`` used here."""

    async def list_metrics(self) -> list[MetricSpec]: ...

    async def get_metric(self, name: str, version: int | None = None) -> MetricSpec | None: ...

    async def read_flags(self, spec: MetricSpec, epochs: Iterable[int]) -> dict[int, int]: ...

    async def read_stored(self, spec: MetricSpec, epochs: Iterable[int]) -> dict[int, int]: ...


async def load_spec(store: MetricReader, name: str, version: int | None) -> MetricSpec:
    """The metric (latest version unless asked), else 404 ``unknown_metric``."""
    if not NAME_PATTERN.match(name):
        raise Problem(404, "unknown_metric", "no metric has that name")
    spec = await store.get_metric(name, version)
    if spec is None:
        which = f"{name!r}" if version is None else f"{name!r} version {version}"
        raise Problem(404, "unknown_metric", f"no metric {which}")
    return spec


async def read_cost(store: MetricReader, spec: MetricSpec, epochs: Sequence[int]) -> ReadCost:
    """What reading ``epochs`` costs: the counters stored over each epoch's shards
    (``read_stored``, one pipelined round trip).  Not the declared width: a string
    metric declares 325,632 counters and stores far fewer, and a dense metric of
    width d stores up to d in each of its shards (LDP_SHARDS, up to 256), all read."""
    return ReadCost.stored(await store.read_stored(spec, epochs), epochs)


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
    bound: ReadBound = DEFAULT_BOUND,
    limit: int | None = None,
    cursor: int | None = None,
    tail: int | None = None,
) -> dict[str, Any]:
    """The JSON of GET /v1/estimates/{name}: the window's estimate, and with ``series``
    one page of per-epoch points (``limit`` epochs from ``cursor``, or the last
    ``tail``); ``page`` says where the next page starts.

    Bounded work (``bound``): a window estimate reads the counters stored in its
    epochs (``read_cost``), refused past the bound (422 ``window_too_costly``)
    unless a series is asked: then the first page says why the window's estimate
    is withheld (``suppressed``) and the points are still served, page by page.
    Pages after the first (``cursor``) carry the points only.  The arithmetic
    runs in a worker thread.
    """
    _check_window(start, end)
    try:
        epochs = await epochs_in_window(store, spec, start, end, max_epochs)
    except WindowTooLarge as exc:
        raise Problem(422, "window_too_large", str(exc)) from None
    cost = await read_cost(store, spec, epochs)
    whole = bound.fits(cost)
    if not series and not whole:
        raise Problem(422, "window_too_costly", too_costly(bound, cost))
    page: Page | None = None
    if series:
        most = bound.page_limit(cost, limit)
        page = (
            Page(tuple(epochs[-min(tail, most):]), None) if tail else
            plan_page(epochs, cursor, most)
        )
    points = set(page.epochs) if page else set()
    out = metric_facts(spec)
    out["window"] = _window_json(start, end, epochs)
    out["confidence"] = options.confidence
    out["target"] = options.target
    if cursor is None and whole:
        robust = Policy()
        each = len(epochs) <= robust.robust_max_epochs and (
            spec.build().num_counters * len(epochs) <= robust.robust_max_cells
        )
        read = await read_window(store, spec, epochs, set(epochs) if each else points)
        out["window"] = _window_json(start, end, read.epochs)
        refused = sum((await store.read_flags(spec, read.epochs)).values()) if read.epochs else 0
        out.update(await run_in_threadpool(_window_body, spec, read, options, refused, each))
        kept = [row for row in read.kept if row[0] in points]
    else:
        if cursor is None:
            n = sum((await store.read_counts(spec, epochs)).values())
            out.update(n=n, suppressed=True, estimate=None, poisoning=None,
                       reason="not computed: " + too_costly(bound, cost))
        read = await read_window(store, spec, sorted(points), points)
        kept = list(read.kept)
    if page is not None:
        out["series"] = await run_in_threadpool(_points, spec, kept, options)
        out["page"] = {
            "limit": bound.page_limit(cost, limit),
            "cursor": cursor,
            "epochs": len(page.epochs),
            "next_cursor": page.next_cursor,
        }
    return out


def _window_json(start: int | None, end: int | None, epochs: Sequence[int]) -> dict[str, Any]:
    return {
        "start": start,
        "end": end,
        "epochs": len(epochs),
        "first_epoch": epochs[0] if epochs else None,
        "last_epoch": epochs[-1] if epochs else None,
    }


def _window_body(
    spec: MetricSpec, read: WindowTallies, options: EstimateOptions, refused: int, each: bool
) -> dict[str, Any]:
    """The window's estimate and poisoning signals (CPU: run in a worker thread)."""
    total = tuple(int(x) for x in read.total)
    # The whole window: a memoised metric's stderr counts the epochs with data.
    out = estimate_json(spec, total, read.n, options, epochs=len(read.epochs))
    out["poisoning"] = signals_json(
        spec, read.total, read.n, refused,
        per_epoch=read.kept if each else (), latest=read.latest, epochs=len(read.epochs),
    )
    return out


def _points(
    spec: MetricSpec,
    rows: Sequence[tuple[int, Sequence[int] | Any, int]],
    options: EstimateOptions,
) -> list[dict[str, Any]]:
    """One estimate per epoch (CPU: run in a worker thread)."""
    return [
        {
            "epoch": epoch,
            "start_time": epoch * spec.epoch_seconds,
            **estimate_json(spec, tuple(int(x) for x in vector), n, options),
        }
        for epoch, vector, n in rows
    ]


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

    Reads the implausible-report flags of ``epochs``, then ``signals_json``.
    """
    refused = sum((await store.read_flags(spec, epochs)).values()) if epochs else 0
    return signals_json(spec, total, n, refused, per_epoch=per_epoch)


def signals_json(
    spec: MetricSpec,
    total: Sequence[int] | Any,
    n: int,
    refused: int,
    *,
    per_epoch: Sequence[tuple[int, Sequence[int] | Any, int]] = (),
    latest: tuple[Any, int] | None = None,
    epochs: int = 1,
) -> dict[str, Any]:
    """The ``poisoning`` member of an estimate.

    ``implausible_reports`` (``refused``): reports the collector refused
    because no honest device produces them (e.g. far too many set bits in a
    unary report).  ``tally_sum_z``: for unary encodings, the z-score of the
    total number of set bits against the honest law; crafted reports that
    pass the per-report check still shift it.  The estimate's own signals
    (impossible shares, drift of the latest epoch, robust estimate;
    ``aggregator.poisoning``) come from ``per_epoch`` (the window's (epoch,
    tallies, n)), or from ``latest`` and the count of ``epochs`` (no robust
    estimate), or from the total alone.  ``flagged`` when any fires.
    """
    z = count_sum_z(spec.build(), [int(x) for x in total], n) if n else None
    flagged = refused > 0 or (z is not None and abs(z) > SUM_Z_FLAG)
    out: dict[str, Any] = {"implausible_reports": refused, "tally_sum_z": z}
    out.update(estimate_signals(spec, total, n, per_epoch, refused, latest=latest, epochs=epochs))
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
    bound: ReadBound = DEFAULT_BOUND,
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
        bound=bound,
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
