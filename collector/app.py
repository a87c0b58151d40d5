"""The collector: a FastAPI service that keeps only randomised tallies in Redis.

Run it (settings from the environment, see ``collector.settings``):

    LDP_REDIS_URL=redis://127.0.0.1:6379/0 LDP_INGEST_KEYS=... LDP_ADMIN_KEYS=... \\
        uvicorn --factory collector.app:create_app --no-access-log

Endpoints (keys as ``Authorization: Bearer <key>``), one router per resource:

    GET  /healthz                 the process is up                          (no key)
    GET  /readyz                  Redis reachable, script loaded, memory below
                                  LDP_REDIS_MEMORY_HIGH_SHARE of maxmemory; else 503 (no key)
    GET  /metrics                 Prometheus text                             (no key)
    GET  /openapi.json            the OpenAPI 3.1 document (collector.openapi) (no key)
    GET  /v1/metrics              {"metrics": [spec_json, ...]} latest versions (ingest|admin)
    GET  /v1/metrics/{name}       spec_json; ?version=N for an older one       (ingest|admin)
    POST /v1/metrics              create: 201 new, 200 identical, 422 invalid  (admin)
    POST /v1/reports              a columnar batch (ldp_core.wire), <= 1000    (ingest)
    GET  /v1/tokens/key           the token issuer's public key               (ingest|admin)
    POST /v1/tokens               blind-sign report tokens (collector.tokens)  (ingest + device)
                                  device: LDP-Install-Key, or with LDP_DEVICE_AUTH=jwt
                                  LDP-Device-Token (collector.device_auth)
    POST /v1/installs/challenge   a proof-of-work challenge (routers.installs)  (ingest)
    POST /v1/installs             register an install, once, with a solved challenge
                                  (ingest + LDP-Install-Key)

``routers.health``, ``routers.metrics`` and ``routers.reports`` hold them;
``deps`` the typed dependencies (settings, store, runtime, role checks).

Per-report rejection codes (POST /v1/reports results): unknown_metric,
unknown_version, bad_epoch, epoch_in_future, epoch_expired, bad_report_id,
bad_token (malformed, or not signed for the report's unit), epoch_v1_only (a
version-2 token in an epoch open at the switch to version 2), and the mechanism's: payload_type,
bucket_out_of_range, seed_out_of_range, bitvector_length, payload_encoding,
bit_out_of_range; and implausible_report (more set bits than an honest unary
report has but with probability 1e-9: refused, and counted per metric-epoch,
``Store.read_flags``).

Batch-level problems are problem+json (RFC 9457) from the server kit's one
vocabulary (``ldp_server.problems.CODES``): 400 batch_shape, batch_size,
invalid_json, invalid_gzip, invalid_request; 401 missing_key, invalid_key; 403
wrong_role; 404 not_found, unknown_metric, unknown_version; 405
method_not_allowed; 413 body_too_large; 415 unsupported_encoding,
unsupported_media_type; 422 invalid_spec (with ``errors``: field -> message),
invalid_request; 429 rate_limited and 503 store_unavailable (both with
Retry-After).  Bad input never yields a 500.

CORS is closed by default: no Access-Control-Allow-Origin is ever sent unless
``LDP_CORS_ORIGINS`` lists origins (comma-separated), and then only to those.
Under ``LDP_ENV=prod`` unsafe settings (``collector.settings``) refuse to
start with one line naming the variables, never their values.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

import redis.exceptions
from fastapi import Depends, FastAPI, Request
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

from collector.deps import Runtime
from collector.device_auth import device_auth_from
from collector.headroom import Headroom
from collector.logs import configure, log_event
from collector.routers import health, installs, metrics, reports, tokens
from collector.settings import Settings
from collector.store import Store
from collector.telemetry import HttpMetrics, Telemetry
from collector.tokens import TokenService, V1Cutoff, cutoff_settled, load_token_key
from ldp_server.headers import API_HEADERS, install_security_headers
from ldp_server.keys import KeyRing
from ldp_server.problems import Problem, install_handlers, problem_response
from ldp_server.redis_client import install_store_handlers, raised_at
from ldp_server.settings import load_or_exit
from ldp_server.telemetry import TELEMETRY_OFF

__all__ = ["TELEMETRY_OFF", "create_app"]



def create_app(
    settings: Settings | None = None, *, clock: Callable[[], float] = time.time
) -> FastAPI:
    """The ASGI app (``uvicorn --factory collector.app:create_app``).

    ``settings`` defaults to the environment (refused settings exit with one
    line, see ``ldp_server.settings.load_or_exit``); ``clock`` (unix seconds) decides
    the current epoch and exists for tests.
    """
    settings = settings or load_or_exit(Settings, "collector")
    log = configure(settings.log_level)
    # Access logs would hold client addresses: off, whatever the uvicorn flags say.
    logging.getLogger("uvicorn.access").disabled = True
    runtime = Runtime(
        settings=settings,
        keys=KeyRing.from_keys(settings.keys_by_role()),
        telemetry=Telemetry(),
        log=log,
        clock=clock,
    )

    headroom = Headroom(settings.redis_memory_high_share)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = Store(
            settings.redis_client(),
            shards=settings.shards,
            retention_seconds=settings.retention_days * 86400 + 86400,
            acceptance_seconds=settings.acceptance_hours * 3600,
            tally_retention_seconds=settings.tally_retention_days * 86400,
            secret=settings.secret_bytes(),
        )
        app.state.store = store
        cutoff = V1Cutoff(store.client, runtime.clock, settings.token_ahead_hours * 3600)
        app.state.tokens = TokenService.of(
            await load_token_key(store.client, settings.token_key_file,
                                 dev=settings.env != "prod"),
            device_auth_from(settings, log), cutoff=cutoff)
        with suppress(redis.exceptions.RedisError, OSError):
            await cutoff.until()  # the first start decides (else the first request)
        ready = await store.ready()
        log_event(log, "collector_started", env=settings.env, redis=settings.redis_target,
                  redis_ready=ready, shards=settings.shards)
        watcher = asyncio.create_task(headroom.watch(store.client))
        try:
            yield
        finally:
            watcher.cancel()
            with suppress(asyncio.CancelledError):
                await watcher
            await store.close()
            log_event(log, "collector_stopped")

    # FastAPI's native OpenTelemetry off: we export nothing through it, and its
    # per-request look-up of the global providers was ~5 % of a single report.
    app = FastAPI(title="ldp-telemetry collector", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None, telemetry=TELEMETRY_OFF)
    app.state.runtime = runtime
    app.state.headroom = headroom
    app.add_middleware(HttpMetrics, telemetry=runtime.telemetry)
    install_security_headers(app, API_HEADERS)
    origins = settings.cors_origin_list()
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Content-Encoding", "LDP-Install-Key",
                           "LDP-Device-Token"],
            expose_headers=["Retry-After"],
            max_age=600,
        )
    _install_errors(app, runtime)
    for module in (health, metrics, tokens, installs):
        # The version-1 cut-off is settled before a metric is registered.
        settle = [Depends(cutoff_settled)] if module is metrics else []
        app.include_router(module.router, dependencies=settle)
    # A plain Starlette route, matched first: no dependency solving on the hot path.
    app.router.routes.insert(0, reports.route)
    return app


def _install_errors(app: FastAPI, runtime: Runtime) -> None:
    """problem+json everywhere; errors of POST /v1/reports are counted by code."""
    install_handlers(app)

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        if request.url.path == "/v1/reports":
            runtime.telemetry.record_error(exc.code)
        return problem_response(exc)

    def on_down(request: Request, exc: Exception) -> None:
        runtime.redis.mark_down(exc)
        if request.url.path == "/v1/reports":
            runtime.telemetry.record_error("store_unavailable")

    def on_unexpected(request: Request, exc: Exception) -> None:
        log_event(runtime.log, "internal_error", logging.ERROR, error=type(exc).__name__,
                  at=raised_at(exc))

    app.add_exception_handler(Problem, on_problem)
    install_store_handlers(app, on_down, on_unexpected)
