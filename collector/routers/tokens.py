"""The token issuer: GET /v1/tokens/key and POST /v1/tokens (``collector.tokens``).

``POST /v1/tokens`` (ingest key + the device credential, by default
``LDP-Install-Key``) takes blinded messages for up to 256 units (of which
``LDP_TOKEN_UNITS_PER_REQUEST``, by default the ahead window's, are signed), a
unit being an epoch of one length:

    {"units": [{"period": "day", "epoch": 20423,
                "blinded": "<base64url, k bytes>"}, ...]}

and answers 200, one result per unit, in order:

    {"key_id": "<hex>", "results": [{"status": "issued", "blind_sig": "<base64url>"},
                                    {"status": "rejected", "code": "token_limit"}, ...]}

One token per (device, period, epoch): a device attaches it to its reports of
every metric of that epoch length and epoch.  Per-unit codes: ``bad_unit``
(period not "hour" or "day", or epoch not an int >= 0), ``unit_retired`` (a
version-1 unit, {"metric", "version", "epoch", ...}: an SDK that asks for
those is told so without dropping its reports, which wait for its update),
``epoch_expired`` (the epoch no longer accepts reports), ``epoch_in_future``
(more than ``LDP_TOKEN_AHEAD_HOURS`` ahead), ``epoch_v1_only`` (an epoch
that version-1 tokens may cover: one that starts at or before the first
version-2 start + the ahead window, ``collector.tokens.V1Cutoff``; a second
token there would be a second report per metric), ``bad_blinded`` (not k bytes
below the modulus), ``token_limit`` (this device already got a token for the
unit, for another blinded message); and, to be asked again later,
``unit_limit`` (past the units one request gets signed) and ``rate_limited``
(each signature takes a token of the client's rate limit, the first paid by
the request itself).  Batch problems: 429 rate_limited (also: more new installs
from the client's /24 or /48 than ``LDP_INSTALLS_PER_PREFIX_PER_HOUR`` an
hour), 503 store_memory_low (a new install while Redis is near its maxmemory,
``collector.headroom``), 400 invalid_json /
invalid_request, 401 invalid_device (with a ``reason``: ``install_key_invalid``,
or with ``LDP_DEVICE_AUTH=jwt`` which check of the ``LDP-Device-Token`` failed,
``collector.device_auth``), 503 device_auth_unavailable (the JWKS cannot be
read), 403 install_unregistered (with ``LDP_INSTALL_REGISTRATION_REQUIRED``: this
install has not registered, ``collector.routers.installs``), and those of every
ingest route.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from collector.deps import (
    IngestKey,
    ReaderKey,
    RuntimeDep,
    StoreDep,
    client_address,
    network_of,
)
from collector.headroom import Headroom
from collector.ingest import inflate, read_limited
from collector.installs import dev_loopback
from collector.routers.health import memory_low
from collector.routers.installs import RegisteredInstall
from collector.routers.metrics import parse_json
from collector.settings import Settings
from collector.store import STATE_MARGIN_SECONDS, Store
from collector.tokens import ISSUE_LUA, TokenService, V1Cutoff, issue_args, subject_key
from ldp_core.metric import EPOCH_SECONDS
from ldp_core.tokens import TokenError, b64url, unb64url
from ldp_server.problems import Problem, json_response

__all__ = ["router"]

router = APIRouter(tags=["tokens"])

#: A request may list this many units (the SDKs send at most as many), of which
#: ``Settings.units_per_request`` are signed.
LISTED_UNITS = 256


def _service(request: Request) -> TokenService:
    service: TokenService = request.app.state.tokens
    return service


@router.get("/v1/tokens/key")
async def token_key(_: ReaderKey, request: Request) -> Response:
    """The issuer's public key: {"token_type": 2, "n", "e", "key_id"}."""
    return json_response({"token_type": 2, **_service(request).key.public.to_json()})


@router.post("/v1/tokens")
async def issue_tokens(
    _: IngestKey, _registered: RegisteredInstall, request: Request, store: StoreDep,
    runtime: RuntimeDep,
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
    cap = settings.units_per_request()
    limit = max(cap, LISTED_UNITS)
    if not isinstance(units, list) or not 0 < len(units) <= limit:
        raise Problem(400, "invalid_request",
                      f"the body must be {{\"units\": [...]}} with 1 to {limit} units")
    public = service.key.public
    k = public.modulus_bytes
    now = runtime.clock()
    acceptance = settings.acceptance_hours * 3600
    ahead = settings.token_ahead_hours * 3600
    until = await service.cutoff.until()
    results: list[dict[str, Any]] = []
    todo: list[tuple[int, str, int, bytes]] = []
    expire_at = 0
    for i, unit in enumerate(units):
        code, item = _check_unit(unit, now, acceptance, ahead, k, public.n, until)
        if code is not None:
            results.append({"status": "rejected", "code": code})
            continue
        assert item is not None
        if len(todo) == cap:
            results.append({"status": "rejected", "code": "unit_limit"})
            continue
        period, epoch, blinded, end = item
        expire_at = max(expire_at, end + acceptance + STATE_MARGIN_SECONDS)
        todo.append((i, period, epoch, blinded))
        results.append({})
    if todo:
        todo = await _charge(request, store, settings, subject, todo, results)
        verdict = await store.client.eval(
            ISSUE_LUA, 1, subject_key(subject),
            *issue_args([t[1:] for t in todo], expire_at))
        signable = [t for t, c in zip(todo, verdict.decode(), strict=True) if c == "0"]
        for t, c in zip(todo, verdict.decode(), strict=True):
            if c != "0":
                results[t[0]] = {"status": "rejected", "code": "token_limit"}
        signatures = await run_in_threadpool(service.sign_all, [t[3] for t in signable])
        for t, sig in zip(signable, signatures, strict=True):
            results[t[0]] = {"status": "issued", "blind_sig": b64url(sig)}
    return json_response({"key_id": public.key_id.hex(), "results": results})


async def _charge(
    request: Request, store: Store, settings: Settings, subject: bytes,
    todo: list[tuple[int, str, int, bytes]], results: list[dict[str, Any]],
) -> list[tuple[int, str, int, bytes]]:
    """The units this request may have signed: a new install (no issuer record yet)
    only while Redis has room (503 store_memory_low) and its network's hourly
    installs last (429 rate_limited; loopback is not counted in dev); then one rate-limit
    token per signature (the request's own take paid the first; units past the
    client's tokens are ``rate_limited``, asked again later)."""
    address = client_address(request)
    if not await store.client.exists(subject_key(subject)):
        headroom: Headroom = request.app.state.headroom
        if headroom.low:
            raise memory_low(headroom)
        per_hour = settings.installs_per_prefix_per_hour
        if per_hour and not dev_loopback(settings.env, address):
            wait = await store.take(f"install|{network_of(address)}", per_hour / 3600,
                                    per_hour)
            if wait > 0:
                raise Problem(429, "rate_limited", "too many new installs from this network",
                              headers={"Retry-After": str(max(1, math.ceil(wait)))})
    taken, _ = await store.take_many(address, settings.rate_limit_per_second,
                                     settings.rate_limit_burst, len(todo) - 1)
    for t in todo[1 + taken:]:
        results[t[0]] = {"status": "rejected", "code": "rate_limited"}
    return todo[:1 + taken]


def _check_unit(
    unit: object, now: float, acceptance: int, ahead: int, k: int, n: int,
    until: float | None,
) -> tuple[str | None, tuple[str, int, bytes, int] | None]:
    if not isinstance(unit, dict):
        return "bad_unit", None
    period, epoch = unit.get("period"), unit.get("epoch")
    if period is None and "metric" in unit:
        return "unit_retired", None
    if type(period) is not str or period not in EPOCH_SECONDS or type(epoch) is not int \
            or not 0 <= epoch < 1 << 40:
        return "bad_unit", None
    seconds = EPOCH_SECONDS[period]
    end = (epoch + 1) * seconds
    if end + acceptance < now:
        return "epoch_expired", None
    if epoch * seconds > now + ahead:
        return "epoch_in_future", None
    if V1Cutoff.v1_only(until, seconds, epoch):
        return "epoch_v1_only", None
    text = unit.get("blinded")
    try:
        blinded = unb64url(text) if type(text) is str else b""
    except TokenError:
        blinded = b""
    if len(blinded) != k or int.from_bytes(blinded, "big") >= n:
        return "bad_blinded", None
    return None, (period, epoch, blinded, end)
