"""The reference for the ingest benchmark: the least a FastAPI ingest endpoint can do.

``POST /v1/reports`` parses the same columnar batch as the collector into a
pydantic model (lists of columns), then sends ONE pipeline of HINCRBY (one per
distinct payload, merged) to Redis.  No authentication, no validation of the
reports, no dedupe, no gzip: it is the ceiling of "Python + FastAPI + pydantic
+ redis-py" on this machine, against which the real collector is compared.

    uvicorn --factory benchmarks.minimal_endpoint:create_app   (LDP_REDIS_URL)
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio
from fastapi import FastAPI
from pydantic import BaseModel
from starlette.responses import JSONResponse, Response

__all__ = ["Batch", "create_app"]


class Batch(BaseModel):
    """The columnar batch, typed loosely (no per-report checks)."""

    metric: list[str]
    version: list[int]
    epoch: list[int]
    report_id: list[str]
    token: list[str]
    payload: list[Any]


def create_app() -> FastAPI:
    """The minimal app; Redis from LDP_REDIS_URL."""
    url = os.environ.get("LDP_REDIS_URL", "redis://127.0.0.1:6379/0")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.redis = redis.asyncio.Redis.from_url(url)
        try:
            yield
        finally:
            await app.state.redis.aclose()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @app.post("/v1/reports")
    async def reports(batch: Batch) -> Response:
        client: redis.asyncio.Redis = app.state.redis
        merged = Counter(str(p) for p in batch.payload)
        pipe = client.pipeline(transaction=False)
        key = f"min:{batch.metric[0]}:{batch.epoch[0]}"
        for field_name, count in merged.items():
            pipe.hincrby(key, field_name, count)
        await pipe.execute()
        return JSONResponse({"accepted": len(batch.payload)})

    return app
