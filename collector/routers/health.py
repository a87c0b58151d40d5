"""Operations: /healthz (the process), /readyz (Redis), /metrics (Prometheus), /openapi.json.

None of these needs a key, and none says anything about a client.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import PlainTextResponse, Response

from collector.deps import RuntimeDep, StoreDep
from collector.openapi import openapi_document
from ldp_server.problems import RETRY_AFTER_SECONDS, json_response

__all__ = ["router"]

router = APIRouter(tags=["health"])
_DOCUMENT = openapi_document()


@router.get("/healthz")
async def healthz() -> Response:
    """The process is up (does not touch Redis)."""
    return json_response({"status": "ok"})


@router.get("/readyz")
async def readyz(store: StoreDep, runtime: RuntimeDep) -> Response:
    """Redis answers, the ingest script is loaded and the digest secret known; else 503."""
    if await store.ready():
        runtime.redis.mark_up()
        return json_response({"ready": True})
    return json_response({"ready": False}, 503, {"Retry-After": str(RETRY_AFTER_SECONDS)})


@router.get("/metrics")
async def prometheus(runtime: RuntimeDep) -> Response:
    """Prometheus text of this process's counters."""
    return PlainTextResponse(runtime.telemetry.render(), media_type="text/plain; version=0.0.4")


@router.get("/openapi.json")
async def openapi() -> Response:
    """The OpenAPI 3.1 document (``collector.openapi``)."""
    return json_response(_DOCUMENT)
