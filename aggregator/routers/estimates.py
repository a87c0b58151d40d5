"""GET /v1/estimates/{name} and /compare (analyst key)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from aggregator.deps import AnalystDep, SettingsDep, StoreDep
from aggregator.service import compare, estimate_response, load_spec
from aggregator.views import EstimateOptions

__all__ = ["router"]

router = APIRouter(prefix="/v1/estimates", tags=["estimates"])

Start = Annotated[int | None, Query(ge=0, description="first epoch number (inclusive)")]
End = Annotated[int | None, Query(ge=1, description="epoch number after the window")]
Confidence = Annotated[float, Query(gt=0.5, lt=1.0, description="e.g. 0.95")]
Version = Annotated[int | None, Query(ge=1, description="metric version; default latest")]


@router.get("/{name}")
async def get_estimate(
    name: str,
    _: AnalystDep,
    store: StoreDep,
    settings: SettingsDep,
    start: Start = None,
    end: End = None,
    confidence: Confidence = 0.95,
    consistent: bool = False,
    simultaneous: bool = False,
    series: Literal["epoch"] | None = None,
    version: Version = None,
) -> dict[str, Any]:
    """The estimate over epochs [start, end) (default: every epoch with data)."""
    spec = await load_spec(store, name, version)
    return await estimate_response(
        store,
        spec,
        start=start,
        end=end,
        options=EstimateOptions(confidence, consistent, simultaneous),
        series=series == "epoch",
        max_epochs=settings.max_epochs,
    )


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
    confidence: Confidence = 0.95,
    version: Version = None,
) -> dict[str, Any]:
    """Which is larger, only when the interval of the difference excludes 0."""
    spec = await load_spec(store, name, version)
    return await compare(
        store,
        spec,
        a=a,
        b=b,
        threshold=threshold,
        start=start,
        end=end,
        confidence=confidence,
        max_epochs=settings.max_epochs,
    )
