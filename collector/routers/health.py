"""Operations: /healthz (the process), /readyz (Redis), /metrics (Prometheus), /openapi.json,
/docs (a plain HTML page of it).

None of these needs a client key, and none says anything about a client.
/metrics needs ``LDP_METRICS_KEY`` when one is set, and is off in prod without
one (``collector.telemetry.scrape_allowed``).
"""

from __future__ import annotations

from fastapi import APIRouter, Header
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from collector.deps import RuntimeDep, StoreDep
from collector.openapi import openapi_document
from collector.telemetry import CONTENT_TYPE, scrape_allowed
from ldp_core.version import package_version
from ldp_server.docs_page import docs_html
from ldp_server.problems import RETRY_AFTER_SECONDS, Problem, json_response

__all__ = ["router"]

router = APIRouter(tags=["health"])
_DOCUMENT = openapi_document()
_DOCS = docs_html(_DOCUMENT)


@router.get("/healthz")
async def healthz() -> Response:
    """The process is up (does not touch Redis), and which release it runs."""
    return json_response({"status": "ok", "service": "collector", "version": package_version()})


@router.get("/readyz")
async def readyz(store: StoreDep, runtime: RuntimeDep) -> Response:
    """Redis answers, the ingest script is loaded and the digest secret known; else 503."""
    if await store.ready():
        runtime.redis.mark_up()
        return json_response({"ready": True})
    return json_response({"ready": False}, 503, {"Retry-After": str(RETRY_AFTER_SECONDS)})


@router.get("/metrics")
async def prometheus(runtime: RuntimeDep, authorization: str | None = Header(None)) -> Response:
    """Prometheus text: every worker's counters summed (``collector.telemetry``)."""
    settings = runtime.settings
    allowed = scrape_allowed(settings.metrics_key_value(), settings.env, authorization)
    if allowed == 404:
        raise Problem(404, "not_found", "/metrics is off: set LDP_METRICS_KEY to serve it")
    if allowed == 401:
        raise Problem(401, "invalid_key", "/metrics needs 'Authorization: Bearer' with "
                      "LDP_METRICS_KEY", headers={"WWW-Authenticate": "Bearer"})
    return PlainTextResponse(runtime.telemetry.render(), media_type=CONTENT_TYPE)


@router.get("/docs")
async def docs() -> Response:
    """The API as one plain HTML page (no script, no CDN)."""
    return HTMLResponse(_DOCS)


@router.get("/openapi.json")
async def openapi() -> Response:
    """The OpenAPI 3.1 document (``collector.openapi``)."""
    return json_response(_DOCUMENT)
