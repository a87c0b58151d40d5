"""GET /v1/metrics (analyst key): the registered metrics, latest versions."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from aggregator.deps import AnalystDep, StoreDep

__all__ = ["router"]

router = APIRouter(prefix="/v1/metrics", tags=["metrics"])


@router.get("")
async def list_metrics(_: AnalystDep, store: StoreDep) -> dict[str, Any]:
    """Every metric's latest spec, with its unit of privacy in words."""
    specs = await store.list_metrics()
    return {"metrics": [{**s.to_json(), "unit_text": s.unit_text()} for s in specs]}
