"""The metric registry: list, read and create specs (GET/POST /v1/metrics).

A spec is validated once, here at the boundary, by ``MetricSpec.from_json``
(422 invalid_spec with ``errors``: field -> message); the collector assigns
the version and resolves the mechanism parameters.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from collector.deps import AdminKey, ReaderKey, RuntimeDep, StoreDep
from collector.ingest import inflate, read_limited
from collector.logs import log_event
from ldp_core.metric import NAME_PATTERN, MetricSpec, SpecError
from ldp_server.problems import Problem, json_response

__all__ = ["parse_json", "router", "spec_from_json"]

router = APIRouter(tags=["metrics"])


def only_query(request: Request, *allowed: str) -> None:
    """422 invalid_request for a query parameter the route does not take."""
    unknown = sorted(set(request.query_params) - set(allowed))
    if unknown:
        raise Problem(422, "invalid_request", f"unknown query parameters: {', '.join(unknown)}",
                      extra={"errors": dict.fromkeys(unknown, "unknown parameter")})


def parse_json(body: bytes) -> Any:
    """The JSON value of a body, or 400 invalid_json."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise Problem(400, "invalid_json", "the body is not valid JSON") from None


def spec_from_json(data: Any) -> MetricSpec:
    """MetricSpec.from_json, or Problem 422 invalid_spec naming every bad field."""
    if isinstance(data, dict):
        if "version" in data:
            raise Problem(422, "invalid_spec", "the collector assigns the version",
                          extra={"errors": {"version": "assigned by the collector; omit it"}})
        data = {k: v for k, v in data.items() if k != "params"}
    try:
        return MetricSpec.from_json(data)
    except SpecError as exc:
        detail = "; ".join(f"{k}: {v}" if k else v for k, v in exc.errors.items())
        raise Problem(422, "invalid_spec", detail, extra={"errors": exc.errors}) from None


async def check_quotas(spec: MetricSpec, store: Any, max_metrics: int, max_bytes: int) -> None:
    """409 quota_exceeded when ``spec`` would pass the number of metrics or make the
    catalog every device fetches (GET /v1/metrics) larger than ``max_bytes``."""
    latest = {s.name: s for s in await store.list_metrics()}
    if spec.name not in latest and len(latest) >= max_metrics:
        raise Problem(409, "quota_exceeded", f"the registry holds {max_metrics} metrics already")
    latest[spec.name] = spec
    size = len(orjson.dumps({"metrics": [s.to_json() for s in latest.values()]}))
    if size > max_bytes:
        raise Problem(409, "quota_exceeded",
                      f"the catalog would be {size} bytes, over {max_bytes}")


@router.get("/v1/metrics")
async def list_metrics(_: ReaderKey, request: Request, store: StoreDep) -> Response:
    """The latest version of every metric."""
    only_query(request)
    specs = await store.list_metrics()
    return json_response({"metrics": [s.to_json() for s in specs]})


@router.get("/v1/metrics/{name}")
async def get_metric(
    _: ReaderKey, request: Request, store: StoreDep, name: str, version: int | None = None
) -> Response:
    """One metric: its latest version, or ``?version=N``."""
    only_query(request, "version")
    if not NAME_PATTERN.match(name):
        raise Problem(404, "unknown_metric", "no metric has that name")
    spec = await store.get_metric(name, version)
    if spec is None:
        if version is not None and await store.get_metric(name) is not None:
            raise Problem(404, "unknown_version", f"metric {name!r} has no version {version}")
        raise Problem(404, "unknown_metric", f"no metric named {name!r}")
    return json_response(spec.to_json())


@router.post("/v1/metrics")
async def create_metric(
    _: AdminKey, request: Request, store: StoreDep, runtime: RuntimeDep
) -> Response:
    """Register a spec: 201 a new version, 200 identical to the latest, 422 invalid."""
    limit = runtime.settings.max_spec_bytes
    raw = await read_limited(request.stream(), limit, request.headers.get("content-length"))
    body = inflate(raw, request.headers.get("content-encoding"), limit)
    # Validating builds the mechanism (OLH's search for g, a unary encoding's
    # plausibility limit): bounded, but never on the event loop.
    spec = await run_in_threadpool(spec_from_json, parse_json(body))
    await check_quotas(spec, store, runtime.settings.max_metrics,
                       runtime.settings.max_catalog_bytes)
    stored, created = await store.create_metric(spec)
    if created:
        log_event(runtime.log, "metric_created", metric=stored.name, version=stored.version,
                  mechanism=stored.mechanism)
    return json_response(stored.to_json(), 201 if created else 200)
