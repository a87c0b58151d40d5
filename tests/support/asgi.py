"""Drive an ASGI app in-process with its lifespan running (real Redis behind it).

>>> async with asgi_client(create_app(settings)) as client:      # doctest: +SKIP
...     (await client.get("/healthz")).json()
{'status': 'ok'}
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

__all__ = ["asgi_client"]


@asynccontextmanager
async def asgi_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client wired to ``app`` through ASGITransport, inside its lifespan."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://collector.test") as c:
            yield c
