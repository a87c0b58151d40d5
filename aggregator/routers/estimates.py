"""GET /v1/estimates/{name} and /compare (analyst key).

Windows: ``start``/``end`` as epoch numbers or UTC dates, or ``since=7d``
(``aggregator.dates``; 422 ``bad_date``).  The estimate is JSON, or CSV /
JSON lines with ``format=csv|jsonl`` or ``Accept: text/csv`` /
``application/x-ndjson`` (``aggregator.export``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from aggregator.dates import DATE_PATTERN, SINCE_PATTERN, BadDate, EpochWindow, window_epochs
from aggregator.deps import AnalystDep, SettingsDep, StoreDep
from aggregator.export import media_type, negotiate, to_csv, to_jsonl
from aggregator.paging import next_link
from aggregator.problems import Problem
from aggregator.service import compare, estimate_response, load_spec
from aggregator.views import EstimateOptions
from ldp_core.metric import MetricSpec
from ldp_server.problems import json_response

__all__ = ["End", "Since", "Start", "resolve_window", "router"]

router = APIRouter(prefix="/v1/estimates", tags=["estimates"])

Start = Annotated[
    str | None,
    Query(
        pattern=DATE_PATTERN,
        description="first epoch (inclusive): an epoch number or a UTC date "
        "YYYY-MM-DD[THH[:MM[:SS]]][Z]",
    ),
]
End = Annotated[
    str | None,
    Query(
        pattern=DATE_PATTERN,
        description="end of the window (exclusive): an epoch number or a UTC date",
    ),
]
Since = Annotated[
    str | None,
    Query(
        pattern=SINCE_PATTERN,
        description="the last N hours/days/weeks (e.g. 7d), current epoch included; "
        "instead of start",
    ),
]
Confidence = Annotated[float, Query(gt=0.5, lt=1.0, description="e.g. 0.95")]
Target = Annotated[
    Literal["reporters", "population"],
    Query(description="whom the intervals are about: the reporting users' own values "
          "(reporters, the default) or the law they were drawn from (population: adds "
          "the spread between people)"),
]
Version = Annotated[int | None, Query(ge=1, description="metric version; default latest")]
Limit = Annotated[
    int | None,
    Query(ge=1, description="series: most epochs per page (default and cap: what one "
          "request may read, LDP_SERIES_PAGE_EPOCHS)"),
]
Cursor = Annotated[
    int | None,
    # Bounded: the page echoes it back, and JSON integers past 64 bits cannot be written.
    Query(ge=0, le=2**31 - 1, description="series: the first epoch of the page (from the "
          "previous page's next link)"),
]
Format = Annotated[
    Literal["json", "csv", "jsonl"] | None,
    Query(description="json (default), csv or jsonl; else the Accept header decides"),
]
Quantiles = Annotated[
    str | None,
    Query(max_length=200, description="a distribution metric's quantiles, comma-separated "
          "in (0, 1), e.g. 0.5,0.9,0.99 (the default)"),
]
Buckets = Annotated[
    int | None,
    Query(description="a distribution metric's histogram buckets (default 16)"),
]
#: At most this many quantiles per request (each inverts the CDF on a fine grid).
MAX_QUANTILES = 20
MAX_BUCKETS = 64

_EXPORTS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the estimate: JSON, or CSV / JSON lines (aggregator.export.COLUMNS)",
        "content": {
            "text/csv": {"schema": {"type": "string"}},
            "application/x-ndjson": {"schema": {"type": "string"}},
        },
    }
}


def distribution_options(
    spec: MetricSpec, quantiles: str | None, buckets: int | None
) -> dict[str, Any]:
    """The quantiles and buckets asked, else 422 ``bad_quantiles``."""
    if quantiles is None and buckets is None:
        return {}
    if not spec.serves_distribution:
        raise Problem(422, "bad_quantiles",
                      f"metric {spec.name!r} serves no distribution or quantiles")
    out: dict[str, Any] = {}
    if quantiles is not None:
        try:
            asked = tuple(float(q) for q in quantiles.split(","))
        except ValueError:
            asked = ()
        if not asked or len(asked) > MAX_QUANTILES or not all(0 < q < 1 for q in asked):
            raise Problem(422, "bad_quantiles", f"quantiles must be 1 to {MAX_QUANTILES} "
                          f"comma-separated numbers in (0, 1), got {quantiles!r}")
        out["quantiles"] = asked
    if buckets is not None:
        if not 1 <= buckets <= MAX_BUCKETS:
            raise Problem(422, "bad_quantiles",
                          f"buckets must be in [1, {MAX_BUCKETS}], got {buckets}")
        out["buckets"] = buckets
    return out


def resolve_window(
    spec: MetricSpec, start: str | None, end: str | None, since: str | None
) -> EpochWindow:
    """The window in the metric's epochs, else 422 ``bad_date``."""
    try:
        return window_epochs(spec.epoch_seconds, start, end, since=since)
    except BadDate as exc:
        raise Problem(422, "bad_date", str(exc)) from None


@router.get("/{name}", response_model=None, responses=_EXPORTS)
async def get_estimate(
    name: str,
    request: Request,
    _: AnalystDep,
    store: StoreDep,
    settings: SettingsDep,
    start: Start = None,
    end: End = None,
    since: Since = None,
    confidence: Confidence = 0.95,
    consistent: bool = False,
    simultaneous: bool = False,
    quantiles: Quantiles = None,
    buckets: Buckets = None,
    target: Target = "reporters",
    series: Literal["epoch"] | None = None,
    version: Version = None,
    format: Format = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> dict[str, Any] | Response:
    """The estimate over epochs [start, end) (default: every epoch with data).

    With ``series=epoch`` the per-epoch points come in pages (``limit``,
    ``cursor``): the body's ``page.next`` and the ``Link: <...>; rel="next"``
    header (every format) give the next page; the last page has neither.
    """
    if (limit is not None or cursor is not None) and series != "epoch":
        raise Problem(422, "invalid_request", "limit and cursor page a series: add series=epoch")
    spec = await load_spec(store, name, version)
    window = resolve_window(spec, start, end, since)
    asked = distribution_options(spec, quantiles, buckets)  # a distribution metric's asks
    body = await estimate_response(
        store,
        spec,
        start=window.start,
        end=window.end,
        options=EstimateOptions(confidence, consistent, simultaneous, **asked, target=target),
        series=series == "epoch",
        max_epochs=settings.max_epochs,
        bound=settings.read_bound,
        limit=limit,
        cursor=cursor,
    )
    headers: dict[str, str] = {}
    if "page" in body:
        link = next_link(request.url.path, dict(request.query_params),
                         body["page"]["next_cursor"])
        body["page"]["next"] = link
        if link is not None:
            headers["Link"] = f'<{link}>; rel="next"'
    chosen = negotiate(format, request.headers.get("accept"))
    if chosen == "json":
        return json_response(body, headers=headers)
    text = to_csv(body) if chosen == "csv" else to_jsonl(body)
    filename = f"{spec.name}-v{spec.version}.{chosen}"
    headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return Response(text, media_type=media_type(chosen), headers=headers)


@router.get("/{name}/compare")
async def get_compare(
    name: str,
    _: AnalystDep,
    store: StoreDep,
    settings: SettingsDep,
    a: Annotated[str | None, Query(max_length=200)] = None,
    b: Annotated[str | None, Query(max_length=200)] = None,
    threshold: float | None = None,
    start: Start = None,
    end: End = None,
    since: Since = None,
    confidence: Confidence = 0.95,
    version: Version = None,
) -> dict[str, Any]:
    """Which is larger, only when the interval of the difference excludes 0."""
    spec = await load_spec(store, name, version)
    window = resolve_window(spec, start, end, since)
    return await compare(
        store,
        spec,
        a=a,
        b=b,
        threshold=threshold,
        start=window.start,
        end=window.end,
        confidence=confidence,
        max_epochs=settings.max_epochs,
        bound=settings.read_bound,
    )
