"""The token issuer: GET /v1/tokens/key and POST /v1/tokens (``collector.tokens``).

``POST /v1/tokens`` (ingest key + the device credential, by default
``LDP-Install-Key``) takes blinded messages for up to
``LDP_TOKEN_UNITS_PER_REQUEST`` units:

    {"units": [{"metric": "browser", "version": 1, "epoch": 20421,
                "blinded": "<base64url, k bytes>"}, ...]}

and answers 200, one result per unit, in order:

    {"key_id": "<hex>", "results": [{"status": "issued", "blind_sig": "<base64url>"},
                                    {"status": "rejected", "code": "token_limit"}, ...]}

Per-unit codes: ``unknown_metric``, ``unknown_version``, ``bad_unit`` (not a
metric name, int version and int epoch), ``epoch_expired`` (the epoch no
longer accepts reports), ``epoch_in_future`` (more than
``LDP_TOKEN_AHEAD_HOURS`` ahead), ``bad_blinded`` (not k bytes below the
modulus), ``token_limit`` (this device already got a token for the unit, for
another blinded message).  Batch problems: 400 invalid_json /
invalid_request, 401 invalid_device, and those of every ingest route.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from collector.deps import IngestKey, ReaderKey, RuntimeDep, StoreDep
from collector.ingest import inflate, read_limited
from collector.routers.metrics import parse_json
from collector.store import STATE_MARGIN_SECONDS
from collector.tokens import ISSUE_LUA, TokenService, issue_args, subject_key
from ldp_core.metric import NAME_PATTERN
from ldp_core.tokens import TokenError, b64url, unb64url
from ldp_server.problems import Problem, json_response

__all__ = ["router"]

router = APIRouter(tags=["tokens"])


def _service(request: Request) -> TokenService:
    service: TokenService = request.app.state.tokens
    return service


@router.get("/v1/tokens/key")
async def token_key(_: ReaderKey, request: Request) -> Response:
    """The issuer's public key: {"token_type": 2, "n", "e", "key_id"}."""
    return json_response({"token_type": 2, **_service(request).key.public.to_json()})


@router.post("/v1/tokens")
async def issue_tokens(
    _: IngestKey, request: Request, store: StoreDep, runtime: RuntimeDep
) -> Response:
    """Blind-sign one token per (device, unit); see the module docstring."""
    settings = runtime.settings
    service = _service(request)
    subject = await service.auth.subject(request, await store.digest_key())
    raw = await read_limited(request.stream(), settings.max_body_bytes,
                             request.headers.get("content-length"))
    body = parse_json(inflate(raw, request.headers.get("content-encoding"),
                              settings.max_inflated_bytes))
    units = body.get("units") if isinstance(body, dict) else None
    limit = settings.token_units_per_request
    if not isinstance(units, list) or not 0 < len(units) <= limit:
        raise Problem(400, "invalid_request",
                      f"the body must be {{\"units\": [...]}} with 1 to {limit} units")
    public = service.key.public
    k = public.modulus_bytes
    now = runtime.clock()
    acceptance = settings.acceptance_hours * 3600
    ahead = settings.token_ahead_hours * 3600
    pairs = {(u.get("metric"), u.get("version")) for u in units if isinstance(u, dict)}
    keys = {(m, v) for m, v in pairs
            if type(m) is str and type(v) is int and NAME_PATTERN.match(m) and 0 < v < 1 << 31}
    specs = await store.get_metrics(keys)
    names = {m for m, _ in keys}
    known = {m for m, _ in specs} | await store.known_names(names - {m for m, _ in specs})
    results: list[dict[str, Any]] = []
    todo: list[tuple[int, str, int, int, bytes]] = []
    expire_at = 0
    for i, unit in enumerate(units):
        code, item = _check_unit(unit, specs, known, now, acceptance, ahead, k, public.n)
        if code is not None:
            results.append({"status": "rejected", "code": code})
            continue
        assert item is not None
        metric, version, epoch, blinded, end = item
        expire_at = max(expire_at, end + acceptance + STATE_MARGIN_SECONDS)
        todo.append((i, metric, version, epoch, blinded))
        results.append({})
    if todo:
        verdict = await store.client.eval(
            ISSUE_LUA, 1, subject_key(subject),
            *issue_args([t[1:] for t in todo], expire_at))
        signable = [t for t, c in zip(todo, verdict.decode(), strict=True) if c == "0"]
        for t, c in zip(todo, verdict.decode(), strict=True):
            if c != "0":
                results[t[0]] = {"status": "rejected", "code": "token_limit"}
        signatures = await run_in_threadpool(service.sign_all, [t[4] for t in signable])
        for t, sig in zip(signable, signatures, strict=True):
            results[t[0]] = {"status": "issued", "blind_sig": b64url(sig)}
    return json_response({"key_id": public.key_id.hex(), "results": results})


def _check_unit(
    unit: object,
    specs: dict[tuple[str, int], Any],
    known: set[str],
    now: float,
    acceptance: int,
    ahead: int,
    k: int,
    n: int,
) -> tuple[str | None, tuple[str, int, int, bytes, int] | None]:
    if not isinstance(unit, dict):
        return "bad_unit", None
    metric, version, epoch = unit.get("metric"), unit.get("version"), unit.get("epoch")
    if type(metric) is not str or type(version) is not int or type(epoch) is not int:
        return "bad_unit", None
    spec = specs.get((metric, version))
    if spec is None:
        return ("unknown_version" if metric in known else "unknown_metric"), None
    end = (epoch + 1) * spec.epoch_seconds
    if end + acceptance < now:
        return "epoch_expired", None
    if epoch * spec.epoch_seconds > now + ahead:
        return "epoch_in_future", None
    text = unit.get("blinded")
    try:
        blinded = unb64url(text) if type(text) is str else b""
    except TokenError:
        blinded = b""
    if len(blinded) != k or int.from_bytes(blinded, "big") >= n:
        return "bad_blinded", None
    return None, (metric, version, epoch, blinded, end)
