"""Liveness and readiness: /healthz (the process) and /readyz (Redis answers)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from aggregator.deps import StoreDep
from ldp_core.version import package_version
from ldp_server.problems import store_unavailable

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, Any]:
    """The process is up (does not touch Redis), and which release it runs."""
    return {"status": "ok", "service": "aggregator", "version": package_version()}


@router.get("/readyz")
async def readyz(store: StoreDep) -> dict[str, Any]:
    """Redis answers a PING; else 503 ``store_unavailable``."""
    try:
        ok = await store.ping()
    except Exception:  # any failure means not ready
        ok = False
    if not ok:
        raise store_unavailable("Redis does not answer")
    return {"status": "ready"}
