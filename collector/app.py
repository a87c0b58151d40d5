"""The collector: a FastAPI service that keeps only randomised tallies in Redis.

Run it (settings from the environment, see ``collector.settings``):

    LDP_REDIS_URL=redis://127.0.0.1:6379/0 LDP_INGEST_KEYS=... LDP_ADMIN_KEYS=... \\
        uvicorn --factory collector.app:create_app --no-access-log

Endpoints (keys as ``Authorization: Bearer <key>``):

    GET  /healthz                 the process is up                          (no key)
    GET  /readyz                  Redis reachable and script loaded; else 503 (no key)
    GET  /metrics                 Prometheus text                             (no key)
    GET  /openapi.json            the OpenAPI 3.1 document (collector.openapi) (no key)
    GET  /v1/metrics              {"metrics": [spec_json, ...]} latest versions (ingest|admin)
    GET  /v1/metrics/{name}       spec_json; ?version=N for an older one       (ingest|admin)
    POST /v1/metrics              create: 201 new, 200 identical, 422 invalid  (admin)
    POST /v1/reports              a columnar batch (ldp_core.wire), <= 1000    (ingest)

POST /v1/reports answers 200 with one result per report, in order:
``{"accepted": a, "duplicates": d, "rejected": r, "results": [{"status":
"accepted"|"duplicate"|"rejected", "code": null|"<reason>"}, ...]}``.  The
good reports of a batch are stored even when others are rejected: a device
retries only what failed for a transient reason, and a bad report (which no
honest device sends) must not hold back the good ones.  A ``duplicate`` is a
report id already counted (a retry): the device treats it as delivered.

Per-report rejection codes: unknown_metric, unknown_version, bad_epoch,
epoch_in_future, epoch_expired, bad_report_id, bad_token, token_reused, and the
mechanism's: payload_type, bucket_out_of_range, seed_out_of_range,
bitvector_length, payload_encoding, bit_out_of_range; and implausible_report
(more set bits than an honest unary report has but with probability 1e-9:
refused, and counted per metric-epoch, ``Store.read_flags``).

Batch-level problems (problem+json, RFC 9457, member ``code``):
400 batch_shape, batch_size, invalid_json, invalid_gzip, invalid_request;
401 missing_key, invalid_key; 403 wrong_role; 404 not_found, unknown_metric,
unknown_version; 405 method_not_allowed; 413 body_too_large; 415
unsupported_encoding, unsupported_media_type; 422 invalid_spec (with
``errors``: field -> message), invalid_request; 429 rate_limited and 503
redis_unavailable (both with Retry-After).  Bad input never yields a 500.

CORS is closed by default: no Access-Control-Allow-Origin is ever sent unless
``LDP_CORS_ORIGINS`` lists origins (comma-separated), and then only to those.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import PlainTextResponse, Response

from collector.auth import KeyRing, RateLimiter, bearer_key, key_digest
from collector.ingest import (
    EpochWindow,
    inflate,
    metric_keys,
    parse_columns,
    read_limited,
    validate,
)
from collector.logs import configure, log_event
from collector.openapi import openapi_document
from collector.problems import Problem, json_response, problem_response
from collector.settings import DEFAULT_REDIS_URL, Role, Settings
from collector.store import REDIS_ERRORS, Store, make_client
from collector.telemetry import Telemetry
from ldp_core.metric import NAME_PATTERN, MetricSpec, SpecError

__all__ = ["create_app"]

RETRY_AFTER_SECONDS = 1

_ACCEPTED: dict[str, Any] = {"status": "accepted", "code": None}
_DUPLICATE: dict[str, Any] = {"status": "duplicate", "code": None}


def create_app(
    settings: Settings | None = None, *, clock: Callable[[], float] = time.time
) -> FastAPI:
    """The ASGI app (``uvicorn --factory collector.app:create_app``).

    ``settings`` defaults to the environment; ``clock`` (unix seconds) decides
    the current epoch and exists for tests.
    """
    settings = settings or Settings()
    log = configure(settings.log_level)
    # Access logs would hold client addresses: off, whatever the uvicorn flags say.
    logging.getLogger("uvicorn.access").disabled = True
    redis_down = [False]  # log transitions only, not every refused request
    keys = KeyRing.from_keys(settings.keys_by_role())
    limiter = RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst)
    telemetry = Telemetry()
    retention_seconds = settings.retention_days * 86400

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = make_client(
            None if settings.redis_cluster_nodes else (settings.redis_url or DEFAULT_REDIS_URL),
            settings.cluster_nodes() or None,
            settings.redis_timeout_seconds,
        )
        store = Store(
            client,
            shards=settings.shards,
            retention_seconds=retention_seconds + 86400,
            secret=settings.secret_bytes(),
        )
        app.state.store = store
        ready = await store.ready()
        log_event(log, "collector_started", env=settings.env, redis=settings.redis_target,
                  redis_ready=ready, shards=settings.shards)
        try:
            yield
        finally:
            await store.close()
            log_event(log, "collector_stopped")

    app = FastAPI(
        title="ldp-telemetry collector",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    origins = settings.cors_origin_list()
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Content-Encoding"],
            expose_headers=["Retry-After"],
            max_age=600,
        )

    def store_of(request: Request) -> Store:
        store: Store = request.app.state.store
        return store

    def authorize(request: Request, *roles: Role) -> None:
        key = bearer_key(request.headers.get("authorization"))
        if key is None:
            raise Problem(401, "missing_key", "send the API key as 'Authorization: Bearer <key>'",
                          headers={"WWW-Authenticate": "Bearer"})
        role = keys.role_of(key)
        if role is None:
            raise Problem(401, "invalid_key", "the API key is not valid",
                          headers={"WWW-Authenticate": "Bearer"})
        if role not in roles:
            raise Problem(403, "wrong_role", f"this needs an {' or '.join(roles)} key, "
                          f"not an {role} key")
        wait = limiter.take(key_digest(key))
        if wait > 0:
            raise Problem(429, "rate_limited", "too many requests for this key",
                          headers={"Retry-After": str(max(1, math.ceil(wait)))})

    # -- errors --------------------------------------------------------------------------

    @app.exception_handler(Problem)
    async def on_problem(request: Request, exc: Problem) -> Response:
        if request.url.path == "/v1/reports":
            telemetry.record_error(exc.code)
        return problem_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return problem_response(Problem(exc.status_code, code, str(exc.detail)))

    @app.exception_handler(RequestValidationError)
    async def on_validation(request: Request, exc: RequestValidationError) -> Response:
        fields = {".".join(str(p) for p in e.get("loc", ())): str(e.get("msg"))
                  for e in exc.errors()}
        return problem_response(
            Problem(422, "invalid_request", "the request is not valid", extra={"errors": fields})
        )

    def mark_up() -> None:
        if redis_down[0]:
            redis_down[0] = False
            log_event(log, "redis_recovered")

    async def on_redis_down(request: Request, exc: Exception) -> Response:
        if not redis_down[0]:
            redis_down[0] = True
            log_event(log, "redis_unavailable", logging.WARNING, error=type(exc).__name__)
        if request.url.path == "/v1/reports":
            telemetry.record_error("redis_unavailable")
        return problem_response(Problem(
            503, "redis_unavailable", "storage is unreachable; retry later",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        ))

    for error in REDIS_ERRORS:
        app.add_exception_handler(error, on_redis_down)

    async def on_client_bug(request: Request, exc: Exception) -> Response:
        # redis-py sometimes fails inside itself while it reconnects (e.g. an
        # AttributeError on a connection whose writer is gone, seen on a Redis Cluster
        # while a master restarts).  That is storage being unavailable: 503, retry.
        if _raised_in_redis_client(exc):
            return await on_redis_down(request, exc)
        return await on_unexpected(request, exc)

    for error in _CLIENT_BUGS:
        app.add_exception_handler(error, on_client_bug)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log_event(log, "internal_error", logging.ERROR, error=type(exc).__name__)
        return problem_response(Problem(500, "internal", "internal error"))

    # -- operations ----------------------------------------------------------------------

    @app.get("/healthz")
    async def healthz() -> Response:
        return json_response({"status": "ok"})

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        if await store_of(request).ready():
            mark_up()
            return json_response({"ready": True})
        return json_response({"ready": False}, 503, {"Retry-After": str(RETRY_AFTER_SECONDS)})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(telemetry.render(), media_type="text/plain; version=0.0.4")

    document = openapi_document()

    @app.get("/openapi.json")
    async def openapi() -> Response:
        return json_response(document)

    # -- metric registry -------------------------------------------------------------------

    def only_query(request: Request, *allowed: str) -> None:
        unknown = sorted(set(request.query_params) - set(allowed))
        if unknown:
            raise Problem(422, "invalid_request", "unknown query parameters",
                          extra={"errors": dict.fromkeys(unknown, "unknown parameter")})

    @app.get("/v1/metrics")
    async def list_metrics(request: Request) -> Response:
        authorize(request, "ingest", "admin")
        only_query(request)
        specs = await store_of(request).list_metrics()
        return json_response({"metrics": [s.to_json() for s in specs]})

    @app.get("/v1/metrics/{name}")
    async def get_metric(request: Request, name: str, version: int | None = None) -> Response:
        authorize(request, "ingest", "admin")
        only_query(request, "version")
        if not NAME_PATTERN.match(name):
            raise Problem(404, "unknown_metric", "no metric has that name")
        spec = await store_of(request).get_metric(name, version)
        if spec is None:
            if version is not None and await store_of(request).get_metric(name) is not None:
                raise Problem(404, "unknown_version", f"metric {name!r} has no version {version}")
            raise Problem(404, "unknown_metric", f"no metric named {name!r}")
        return json_response(spec.to_json())

    @app.post("/v1/metrics")
    async def create_metric(request: Request) -> Response:
        authorize(request, "admin")
        raw = await read_limited(request.stream(), settings.max_spec_bytes,
                                 request.headers.get("content-length"))
        body = inflate(raw, request.headers.get("content-encoding"), settings.max_spec_bytes)
        data = _json(body)
        if not isinstance(data, dict):
            raise Problem(422, "invalid_spec", "the spec must be a JSON object",
                          extra={"errors": {"": "must be a JSON object"}})
        if "version" in data:
            raise Problem(422, "invalid_spec", "the collector assigns the version",
                          extra={"errors": {"version": "assigned by the collector; omit it"}})
        data.pop("params", None)
        spec = _spec_from_json(data)
        stored, created = await store_of(request).create_metric(spec)
        if created:
            log_event(log, "metric_created", metric=stored.name, version=stored.version,
                      mechanism=stored.mechanism)
        return json_response(stored.to_json(), 201 if created else 200)

    # -- ingest ----------------------------------------------------------------------------

    @app.post("/v1/reports")
    async def post_reports(request: Request) -> Response:
        started = time.perf_counter()
        authorize(request, "ingest")
        media = request.headers.get("content-type", "application/json").split(";")[0].strip()
        if media.lower() not in ("application/json", ""):
            raise Problem(415, "unsupported_media_type", "send Content-Type: application/json")
        raw = await read_limited(request.stream(), settings.max_body_bytes,
                                 request.headers.get("content-length"))
        body = inflate(raw, request.headers.get("content-encoding"), settings.max_inflated_bytes)
        cols = parse_columns(_json(body))
        store = store_of(request)
        pairs = metric_keys(cols)
        specs = await store.get_metrics(pairs)
        distinct = {name for name in cols.metric if type(name) is str}
        names = {name for name in distinct if NAME_PATTERN.match(name)}
        found = {name for name, _ in specs}
        known_names = found | await store.known_names(names - found)
        window = EpochWindow(clock(), retention_seconds, settings.clock_skew_epochs)
        verdict = validate(cols, specs, known_names, window)
        outcomes = await store.ingest(verdict.valid)
        await store.record_implausible(verdict.implausible)
        mark_up()
        results: list[dict[str, Any]] = [_ACCEPTED] * len(cols)
        rejected: Counter[str] = Counter(verdict.rejected.values())
        for position, code in verdict.rejected.items():
            results[position] = {"status": "rejected", "code": code}
        duplicates = 0
        for position, outcome in zip(verdict.positions, outcomes, strict=True):
            if outcome == "duplicate":
                results[position] = _DUPLICATE
                duplicates += 1
            elif outcome == "token_reused":
                results[position] = {"status": "rejected", "code": "token_reused"}
                rejected["token_reused"] += 1
        accepted = len(cols) - duplicates - sum(rejected.values())
        seconds = time.perf_counter() - started
        telemetry.record_batch(accepted=accepted, duplicates=duplicates, rejected=rejected,
                               seconds=seconds)
        if log.isEnabledFor(logging.DEBUG):
            log_event(log, "batch", logging.DEBUG, accepted=accepted, duplicates=duplicates,
                      rejected=dict(rejected), ms=round(seconds * 1000, 3))
        return json_response({
            "accepted": accepted,
            "duplicates": duplicates,
            "rejected": sum(rejected.values()),
            "results": results,
        })

    return app


#: Exceptions that redis-py has been seen to raise from inside itself while Redis is
#: going away or coming back; answered 503 when (and only when) raised in redis-py.
_CLIENT_BUGS: tuple[type[Exception], ...] = (
    AttributeError, TypeError, IndexError, KeyError, RuntimeError,
)
_REDIS_PACKAGE = str(Path(redis.__file__).resolve().parent)


def _raised_in_redis_client(exc: BaseException) -> bool:
    """True if the innermost frame of the exception's traceback is redis-py code."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and str(Path(frames[-1].filename).resolve()).startswith(_REDIS_PACKAGE)


#: Spec fields that must be strings; MetricSpec.from_json looks them up in a dict.
_TEXT_FIELDS = ("name", "kind", "mechanism", "epoch", "unit")


def _spec_from_json(data: dict[str, Any]) -> MetricSpec:
    """MetricSpec.from_json, or Problem 422 invalid_spec naming every bad field."""
    wrong = {f: "must be a string" for f in _TEXT_FIELDS if f in data
             and not isinstance(data[f], str)}
    cleaned = {k: (None if k in wrong else v) for k, v in data.items()}
    try:
        spec = MetricSpec.from_json(cleaned)
    except SpecError as exc:
        errors = {**exc.errors, **wrong}
    except (TypeError, ValueError) as exc:  # a shape from_json did not foresee
        errors = {**wrong, "": str(exc)}
    except ArithmeticError:  # e.g. epsilon = 1e308: exp() overflows building the mechanism
        errors = {**wrong, "epsilon": "too large: the mechanism's parameters overflow"}
    else:
        if not wrong:
            return spec
        errors = wrong
    detail = "; ".join(f"{k}: {v}" if k else v for k, v in errors.items())
    raise Problem(422, "invalid_spec", detail, extra={"errors": errors})


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise Problem(400, "invalid_json", "the body is not valid JSON") from None
