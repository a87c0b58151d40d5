"""Operations: /healthz (the process), /readyz (Redis), /metrics (Prometheus), /openapi.json,
/docs (a plain HTML page of it).

None of these needs a client key, and none says anything about a client.
/metrics needs ``LDP_METRICS_KEY`` when one is set, and is off in prod without
one (``collector.telemetry.scrape_allowed``).
"""

from __future__ import annotations

from fastapi import APIRouter, Header, Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from collector.deps import RuntimeDep, StoreDep
from collector.headroom import Headroom
from collector.openapi import openapi_document
from collector.telemetry import CONTENT_TYPE, scrape_allowed
from ldp_core.version import package_version
from ldp_server.docs_page import docs_html
from ldp_server.problems import RETRY_AFTER_SECONDS, Problem, json_response

__all__ = ["MEMORY_RETRY_AFTER_SECONDS", "memory_low", "router"]

#: Retry-After of store_memory_low: memory frees as issuer records and epochs expire.
MEMORY_RETRY_AFTER_SECONDS = 60

router = APIRouter(tags=["health"])
_DOCUMENT = openapi_document()
_DOCS = docs_html(_DOCUMENT)


@router.get("/healthz")
async def healthz() -> Response:
    """The process is up (does not touch Redis), and which release it runs."""
    return json_response({"status": "ok", "service": "collector", "version": package_version()})


@router.get("/readyz")
async def readyz(request: Request, store: StoreDep, runtime: RuntimeDep) -> Response:
    """Redis answers, the ingest script is loaded and the digest secret known, and its
    memory is below ``LDP_REDIS_MEMORY_HIGH_SHARE`` of maxmemory (``collector.headroom``,
    read once a second: 503 ``store_memory_low`` before Redis refuses writes); else 503."""
    if not await store.ready():
        return json_response({"ready": False}, 503, {"Retry-After": str(RETRY_AFTER_SECONDS)})
    runtime.redis.mark_up()
    headroom: Headroom = request.app.state.headroom
    if headroom.low:
        raise memory_low(headroom)
    return json_response({"ready": True})


def memory_low(headroom: Headroom) -> Problem:
    """503 store_memory_low, naming the share of maxmemory in use."""
    return Problem(503, "store_memory_low",
                   f"Redis holds {headroom.used / headroom.cap:.0%} of its maxmemory, above "
                   f"LDP_REDIS_MEMORY_HIGH_SHARE={headroom.share:g}",
                   headers={"Retry-After": str(MEMORY_RETRY_AFTER_SECONDS)})


@router.get("/metrics")
async def prometheus(runtime: RuntimeDep, store: StoreDep,
                     authorization: str | None = Header(None)) -> Response:
    """Prometheus text: every worker's counters summed (``collector.telemetry``), and
    Redis's memory against its cap read now (``ldp_server.telemetry.sample_redis``)."""
    settings = runtime.settings
    allowed = scrape_allowed(settings.metrics_key_value(), settings.env, authorization)
    if allowed == 404:
        raise Problem(404, "not_found", "/metrics is off: set LDP_METRICS_KEY to serve it")
    if allowed == 401:
        raise Problem(401, "invalid_key", "/metrics needs 'Authorization: Bearer' with "
                      "LDP_METRICS_KEY", headers={"WWW-Authenticate": "Bearer"})
    await runtime.telemetry.sample_redis(store.client)
    return PlainTextResponse(runtime.telemetry.render(), media_type=CONTENT_TYPE)


@router.get("/docs")
async def docs() -> Response:
    """The API as one plain HTML page (no script, no CDN)."""
    return HTMLResponse(_DOCS)


@router.get("/openapi.json")
async def openapi() -> Response:
    """The OpenAPI 3.1 document (``collector.openapi``)."""
    return json_response(_DOCUMENT)
