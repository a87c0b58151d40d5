"""The aggregator service: ``uvicorn --factory aggregator.app:create_app``.

Read-only: it reads specs and tallies through ``collector.store`` and never
writes Redis.  The Redis client is created by the lifespan and closed with it.
Every error is problem+json; Redis down is 503 with Retry-After.  Every
response carries the security headers below (the dashboard needs nothing
from outside the server: no script, no CDN).  CORS is closed unless
``LDP_CORS_ORIGINS`` lists origins, and then opens GET with an analyst key to
those only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Header, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import HTMLResponse, PlainTextResponse

from aggregator.auth import analyst_ring
from aggregator.openapi_doc import install_openapi
from aggregator.routers import dashboard, estimates, health, metrics
from aggregator.settings import Settings
from collector.store import Store
from ldp_core.version import package_version
from ldp_server.docs_page import docs_html
from ldp_server.headers import PAGE_HEADERS, install_security_headers
from ldp_server.problems import Problem, install_handlers
from ldp_server.redis_client import install_store_handlers, raised_at
from ldp_server.settings import load_or_exit
from ldp_server.telemetry import (
    CONTENT_TYPE,
    TELEMETRY_OFF,
    HttpMetrics,
    ServiceMetrics,
    scrape_allowed,
)

__all__ = ["SECURITY_HEADERS", "create_app"]

log = logging.getLogger("aggregator")

SECURITY_HEADERS = PAGE_HEADERS

_QUERY = re.compile(r"\?[^ \"]*")


class _RedactQuery(logging.Filter):
    """Keep keys and addresses out of uvicorn's access log.

    Query strings (``?key=``) are redacted and the client address is dropped;
    ``ldp up`` runs uvicorn with ``--no-access-log`` anyway.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            args = [_QUERY.sub("?<redacted>", a) if isinstance(a, str) else a for a in record.args]
            if len(args) == 5:  # client_addr, method, path, http version, status
                args[0] = "-"
            record.args = tuple(args)
        return True


def _warm_up() -> None:
    """What the first estimate would otherwise import (run in a worker thread)."""
    import numpy.ma  # noqa: F401  (np.median, the robust estimate)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The ASGI app; settings from the environment unless given."""
    settings = settings or load_or_exit(Settings, "aggregator")
    access_log = logging.getLogger("uvicorn.access")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redactor = _RedactQuery()
        access_log.addFilter(redactor)
        app.state.store = Store(settings.redis_client())
        # The first use of the worker threads imports anyio's thread backend (on the
        # event loop) and numpy.ma (np.median): at start, not on a request's time.
        await run_in_threadpool(_warm_up)
        try:
            yield
        finally:
            await app.state.store.close()
            access_log.removeFilter(redactor)

    app = FastAPI(
        title="ldp-telemetry aggregator",
        version=package_version(),
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        telemetry=TELEMETRY_OFF,  # as the collector: see ldp_server.telemetry
    )
    app.state.settings = settings
    app.state.keyring = analyst_ring(settings.keys())
    origins = settings.cors_origin_list()
    if origins:
        # Read-only API: GET with an analyst key; no cookies cross-origin.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET"],
            allow_headers=["Authorization"],
            expose_headers=["Retry-After"],
            max_age=600,
        )
    install_handlers(app)

    def on_redis_error(_: Request, exc: Exception) -> None:
        log.warning("redis unavailable: %s", type(exc).__name__)

    def on_unexpected(_: Request, exc: Exception) -> None:
        log.error("unexpected error: %s at %s", type(exc).__name__, raised_at(exc))

    install_store_handlers(app, on_redis_error, on_unexpected)

    install_security_headers(app, SECURITY_HEADERS)

    for module in (health, metrics, estimates, dashboard):
        app.include_router(module.router)
    install_openapi(app)
    _install_ops(app, settings)
    return app


def _install_ops(app: FastAPI, settings: Settings) -> None:
    """GET /metrics (Prometheus, see ``ldp_server.telemetry``), GET /docs (plain HTML),
    and the HTTP latency of every request."""
    telemetry = ServiceMetrics("aggregator")
    app.state.telemetry = telemetry
    app.add_middleware(HttpMetrics, telemetry=telemetry)
    page: list[str] = []

    @app.get("/metrics", include_in_schema=False)
    async def prometheus(authorization: str | None = Header(None)) -> Response:
        allowed = scrape_allowed(settings.metrics_key_value(), settings.env, authorization)
        if allowed == 404:
            raise Problem(404, "not_found", "/metrics is off: set LDP_METRICS_KEY to serve it")
        if allowed == 401:
            raise Problem(401, "invalid_key", "/metrics needs 'Authorization: Bearer' with "
                          "LDP_METRICS_KEY", headers={"WWW-Authenticate": "Bearer"})
        return PlainTextResponse(telemetry.render(), media_type=CONTENT_TYPE)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> Response:
        if not page:
            page.append(docs_html(app.openapi()))
        return HTMLResponse(page[0])
