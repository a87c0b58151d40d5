"""Ingest: POST /v1/reports, a columnar batch (``ldp_core.wire``) of <= 1000 reports.

The batch is JSON (``Content-Type: application/json``, the default) or the
binary layout of ``ldp_core.wire`` (``application/vnd.ldp.batch``); both
decode to the same columns and get the same checks and answer.

The answer is 200 with one result per report, in order:
``{"accepted": a, "duplicates": d, "rejected": r, "results": [{"status":
"accepted"|"duplicate"|"rejected", "code": null|"<reason>"}, ...]}``.  The
good reports of a batch are stored even when others are rejected; a
``duplicate`` is a report whose token was already spent in its metric: a retry of a
delivered report (or a token reused by another report, not counted either).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

from collector.deps import Runtime, requires
from collector.ingest import (
    EpochWindow,
    inflate,
    metric_keys,
    parse_binary,
    parse_columns,
    read_limited,
    validate,
)
from collector.logs import log_event
from collector.routers.metrics import parse_json
from collector.store import Store
from collector.tokens import TokenService
from ldp_core.metric import NAME_PATTERN
from ldp_core.wire import BINARY_MEDIA
from ldp_server.problems import Problem, json_response

__all__ = ["IngestRoute", "post_reports", "route"]

_ACCEPTED: dict[str, Any] = {"status": "accepted", "code": None}
_DUPLICATE: dict[str, Any] = {"status": "duplicate", "code": None}


_ingest_key = requires("ingest")


class IngestRoute(Route):
    """A plain Starlette route that names itself in the scope as FastAPI's routes do
    (``scope["route"]``: the HTTP metrics label a request by its template).

    >>> route.path, sorted(route.methods or ())
    ('/v1/reports', ['POST'])
    >>> scope = {"type": "http", "path": "/v1/reports", "method": "GET", "root_path": ""}
    >>> match, child = route.matches(scope)
    >>> match.name, child["route"] is route
    ('PARTIAL', True)
    """

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route"] = self
        return match, child


async def post_reports(request: Request) -> Response:
    """Validate a batch, store its good reports exactly once, answer per report.

    A plain ``request -> response`` endpoint: FastAPI's dependency solving was
    ~0.3 ms of a single-report request (``benchmarks/profile_single.py`` measures
    what is left).  The role check (``deps.requires``)
    runs first, as a dependency would; a ``Problem`` it or the body raises is
    answered by the app's exception handlers, as from any route.
    """
    state = request.app.state
    await _ingest_key(request)
    started = time.perf_counter()
    runtime: Runtime = state.runtime
    store: Store = state.store
    settings = runtime.settings
    media = request.headers.get("content-type", "application/json").split(";")[0].strip()
    media = media.lower()
    if media not in ("application/json", "", BINARY_MEDIA):
        raise Problem(415, "unsupported_media_type",
                      f"send Content-Type: application/json or {BINARY_MEDIA}, not {media!r}")
    raw = await read_limited(request.stream(), settings.max_body_bytes,
                             request.headers.get("content-length"))
    body = inflate(raw, request.headers.get("content-encoding"), settings.max_inflated_bytes)
    cols = parse_binary(body) if media == BINARY_MEDIA else parse_columns(parse_json(body))
    specs = await store.get_metrics(metric_keys(cols))
    distinct = {name for name in cols.metric if type(name) is str}
    names = {name for name in distinct if NAME_PATTERN.match(name)}
    found = {name for name, _ in specs}
    known_names = found | await store.known_names(names - found)
    window = EpochWindow(runtime.clock(), settings.retention_days * 86400,
                         settings.clock_skew_epochs, settings.acceptance_hours * 3600)
    verdict = validate(cols, specs, known_names, window)
    tokens: TokenService = state.tokens
    valid, positions, refused = await tokens.check(verdict.valid, verdict.positions)
    outcomes = await store.ingest_grouped(valid)
    await store.record_implausible(verdict.implausible)
    runtime.redis.mark_up()
    results: list[dict[str, Any]] = [_ACCEPTED] * len(cols)
    rejected: Counter[str] = Counter(verdict.rejected.values())
    for position, code in verdict.rejected.items():
        results[position] = {"status": "rejected", "code": code}
    for position, code in refused.items():
        results[position] = {"status": "rejected", "code": code}
        rejected[code] += 1
    duplicates = 0
    for position, outcome in zip(positions, outcomes, strict=True):
        if outcome == "duplicate":
            results[position] = _DUPLICATE
            duplicates += 1
    accepted = len(cols) - duplicates - sum(rejected.values())
    seconds = time.perf_counter() - started
    runtime.telemetry.record_batch(accepted=accepted, duplicates=duplicates, rejected=rejected,
                                   seconds=seconds)
    if runtime.log.isEnabledFor(logging.DEBUG):
        log_event(runtime.log, "batch", logging.DEBUG, accepted=accepted, duplicates=duplicates,
                  rejected=dict(rejected), ms=round(seconds * 1000, 3))
    if len(results) == 1 and results[0]["code"] is None:
        return _Prebuilt(_SINGLE[results[0]["status"]])
    return json_response({
        "accepted": accepted,
        "duplicates": duplicates,
        "rejected": sum(rejected.values()),
        "results": results,
    })


def _answer_bytes(outcome: dict[str, Any]) -> bytes:
    """The body of a 1-report batch whose report had ``outcome``.

    >>> _answer_bytes(_DUPLICATE)
    b'{"accepted":0,"duplicates":1,"rejected":0,"results":[{"status":"duplicate","code":null}]}'
    """
    accepted = outcome is _ACCEPTED
    return orjson.dumps({"accepted": int(accepted), "duplicates": int(not accepted), "rejected": 0,
                      "results": [outcome]})


#: Bodies of the two answers of a 1-report batch that name no reason, by status.
_SINGLE = {outcome["status"]: _answer_bytes(outcome) for outcome in (_ACCEPTED, _DUPLICATE)}


class _Prebuilt(Response):
    """A 200 JSON answer whose body was serialised once (most single-report answers).

    >>> response = _Prebuilt(_SINGLE["accepted"])
    >>> response.status_code, dict(response.headers)["content-type"]
    (200, 'application/json')
    """

    media_type = "application/json"

    def __init__(self, body: bytes) -> None:
        self.status_code = 200
        self.background = None
        self.body = body
        self.raw_headers = [(b"content-length", str(len(body)).encode()),
                            (b"content-type", b"application/json")]


#: ``POST /v1/reports``; ``create_app`` puts it first in the app's routes.
route = IngestRoute("/v1/reports", post_reports, methods=["POST"])
