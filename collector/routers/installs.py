"""Install registration: POST /v1/installs/challenge and POST /v1/installs (``collector.installs``).

A new install (``LDP-Install-Key``, as the token issuer knows it) registers
once, paying a memory-hard proof of work (``ldp_core.pow``; the spec an SDK
implements is docs/token-protocol.md "Install registration"):

    POST /v1/installs/challenge      (ingest key)
    -> 200 {"challenge": "<base64url, 45 bytes>", "expires": <unix s>,
            "pow": {"alg": "scrypt", "n": 2048, "r": 8, "p": 1, "bits": 8}}

    POST /v1/installs                (ingest key + LDP-Install-Key)
         {"challenge": "<base64url>", "nonce": <int in [0, 2^53)>}
    -> 201 {"status": "registered", "day": <UTC day>}   registered now
    -> 200 {"status": "registered", "day": <UTC day>}   already registered (the
           body may then be empty: no new work is asked of a registered install)

Problems (problem+json, stable codes): 400 invalid_json / invalid_request (the
body's shape), 400 challenge_invalid (not minted here: length, version, MAC),
400 challenge_expired, 400 pow_invalid (the nonce does not solve the challenge
for this install key), 403 install_unregistered (no proof sent and the install
has not registered), 429 registration_limited (the network's registrations of
the hour are spent; Retry-After; loopback is not counted in dev, as on the token
issuer's new-install limit: ``collector.installs.dev_loopback``), 429
rate_limited (this process verifies ``VERIFYING`` proofs at once and queues at
most ``QUEUED``), 401
invalid_device (no valid LDP-Install-Key), and those of every ingest route.

The token issuer's gate is ``require_registration`` (``RegisteredInstall``, a
dependency of ``POST /v1/tokens``): with ``LDP_INSTALL_REGISTRATION_REQUIRED``
(the default) and install-key device auth, an install that has not registered
is answered 403 ``install_unregistered``, unless the request carries its proof
in ``LDP-Install-Proof: <challenge base64url>.<nonce decimal>``: then it is
registered as by ``POST /v1/installs`` (same checks, same problems) and served,
one request instead of two (a simulated fleet's devices register this way).

Order of the checks: the cheap ones first (body, challenge MAC and expiry,
already registered?), then the network's registration budget is taken, and
only then the one scrypt evaluation runs, in a worker thread: a flood of
bogus proofs from one network costs the server at most its hourly budget of
evaluations, and never holds the event loop.
"""

from __future__ import annotations

import asyncio
import math
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from collector.deps import (
    IngestKey,
    Runtime,
    RuntimeDep,
    StoreDep,
    client_address,
    network_of,
)
from collector.ingest import read_limited
from collector.installs import (
    REGISTER_LUA,
    dev_loopback,
    mint_challenge,
    open_challenge,
    registration_key,
)
from collector.routers.metrics import parse_json
from collector.store import Store
from collector.tokens import INSTALL_HEADER, InstallKeyAuth, TokenService
from ldp_core.pow import PowParams, install_digest, verify
from ldp_core.tokens import TokenError, b64url, unb64url
from ldp_server.problems import Problem, json_response

__all__ = ["PROOF_HEADER", "QUEUED", "VERIFYING", "RegisteredInstall", "require_registration",
           "router"]

router = APIRouter(tags=["installs"])

#: Proofs one process verifies at once (each one scrypt evaluation, ~4 ms and 2 MiB at
#: the defaults), and how many more may wait for a turn (beyond: 429 rate_limited).
VERIFYING = 2
QUEUED = 64
MAX_BODY = 4096
#: A proof whose scrypt holds at most this much memory (N = 512 at r = 8: ~0.1 ms, a
#: dev difficulty) is checked on the event loop: the worker-thread hop costs more.
INLINE_BYTES = 64 << 10
#: A proof sent with the token request itself (``<challenge>.<nonce>``): registers and asks
#: in one request (the checks and problems of ``POST /v1/installs``).
PROOF_HEADER = "ldp-install-proof"
_DAY = 86400


class _Gate:
    """``VERIFYING`` slots and a count of the requests waiting for one."""

    def __init__(self) -> None:
        self.slots = asyncio.Semaphore(VERIFYING)
        self.waiting = 0

    def full(self) -> bool:
        return self.slots.locked() and self.waiting >= QUEUED


def _gate(request: Request) -> _Gate:
    gate: _Gate | None = getattr(request.app.state, "pow_gate", None)
    if gate is None:
        gate = request.app.state.pow_gate = _Gate()
    return gate


async def require_registration(request: Request) -> None:
    """The token issuer's gate (with ``LDP_INSTALL_REGISTRATION_REQUIRED`` and install-key
    device auth): 403 ``install_unregistered`` unless the install has registered.  A
    dependency of ``POST /v1/tokens``, after its ingest-key check."""
    runtime: Runtime = request.app.state.runtime
    service: TokenService = request.app.state.tokens
    if not runtime.settings.install_registration_required \
            or not isinstance(service.auth, InstallKeyAuth):
        return  # an account (LDP_DEVICE_AUTH=jwt) is its own Sybil bound
    store: Store = request.app.state.store
    subject = await service.auth.subject(request, await store.digest_key())
    key = registration_key(subject)
    if await store.client.exists(key):
        return
    proof = request.headers.get(PROOF_HEADER)
    if proof is None:
        raise Problem(403, "install_unregistered", "this install has not registered: ask "
                      "POST /v1/installs/challenge, solve it, POST /v1/installs, then ask again")
    text, _, nonce = proof.partition(".")
    challenge, number = _proof({"challenge": text,
                                "nonce": int(nonce) if nonce.isdigit() else nonce})
    await _register(request, store, runtime, key, challenge, number)


RegisteredInstall = Annotated[None, Depends(require_registration)]


@router.post("/v1/installs/challenge")
async def install_challenge(_: IngestKey, store: StoreDep, runtime: RuntimeDep) -> Response:
    """A fresh stateless challenge and the difficulty (see the module docstring)."""
    settings = runtime.settings
    params = settings.install_pow_params()
    now = runtime.clock()
    ttl = settings.install_challenge_ttl_seconds
    challenge = mint_challenge(await store.digest_key(), params, now=now, ttl=ttl)
    return json_response({"challenge": b64url(challenge), "expires": int(now) + ttl,
                          "pow": params.to_json()})


@router.post("/v1/installs")
async def register_install(
    _: IngestKey, request: Request, store: StoreDep, runtime: RuntimeDep
) -> Response:
    """Register this install once its proof of work checks (see the module docstring)."""
    subject = await InstallKeyAuth().subject(request, await store.digest_key())
    key = registration_key(subject)
    raw = await read_limited(request.stream(), MAX_BODY, request.headers.get("content-length"))
    body = parse_json(raw) if raw.strip() else {}
    if not isinstance(body, dict):
        raise Problem(400, "invalid_request", "the body must be a JSON object")
    known = await store.client.get(key)
    if known is not None:
        return _registered(known, 200)
    if "challenge" not in body and "nonce" not in body:
        raise Problem(403, "install_unregistered", "this install has not registered: ask POST "
                      "/v1/installs/challenge, solve it, and send {challenge, nonce}")
    challenge, nonce = _proof(body)
    day, fresh = await _register(request, store, runtime, key, challenge, nonce)
    return _registered(day, 201 if fresh else 200)


async def _register(request: Request, store: Store, runtime: Runtime, key: str,
                    challenge: bytes, nonce: int) -> tuple[bytes | int, int]:
    """Check the proof (cheap checks, then the network's budget, then one scrypt) and
    write the registration: (its day, 1 if this call registered the install)."""
    settings = runtime.settings
    now = runtime.clock()
    params = open_challenge(await store.digest_key(), challenge, now=now)
    gate = _gate(request)
    if gate.full():  # before the network's budget is taken: this refusal costs it nothing
        raise Problem(429, "rate_limited", "too many proofs being checked; retry",
                      headers={"Retry-After": "1"})
    per_hour = settings.install_registrations_per_prefix_per_hour
    address = client_address(request)
    if per_hour and not dev_loopback(settings.env, address):
        wait = await store.take(f"register|{network_of(address)}",
                                per_hour / 3600, per_hour)
        if wait > 0:
            raise Problem(429, "registration_limited", "too many new installs from this "
                          f"network this hour ({per_hour} allowed)",
                          headers={"Retry-After": str(max(1, math.ceil(wait)))})
    digest = install_digest(_install_key(request))
    if params.memory_bytes * params.p <= INLINE_BYTES:  # a dev difficulty: microseconds
        ok = verify(challenge, digest, nonce, params)
    else:
        ok = await _verify_in_thread(gate, challenge, digest, nonce, params)
    if not ok:
        raise Problem(400, "pow_invalid", f"nonce {nonce} does not solve this challenge for "
                      "this LDP-Install-Key")
    day, fresh = await store.client.eval(REGISTER_LUA, 1, key, int(now) // _DAY,
                                         settings.install_registration_days * _DAY)
    return day, int(fresh)


async def _verify_in_thread(gate: _Gate, challenge: bytes, digest: bytes, nonce: int,
                            params: PowParams) -> bool:
    gate.waiting += 1
    try:
        await gate.slots.acquire()
    finally:
        gate.waiting -= 1
    try:
        ok: bool = await run_in_threadpool(verify, challenge, digest, nonce, params)
    finally:
        gate.slots.release()
    return ok


def _registered(day: bytes | str | int, status: int) -> Response:
    return json_response({"status": "registered", "day": int(day)}, status)


def _install_key(request: Request) -> bytes:
    """The raw install key (``InstallKeyAuth.subject`` has checked it: 32 bytes)."""
    return unb64url(request.headers.get(INSTALL_HEADER, ""))


def _proof(body: dict[str, Any]) -> tuple[bytes, int]:
    text, nonce = body.get("challenge"), body.get("nonce")
    try:
        challenge = unb64url(text) if type(text) is str else None
    except TokenError:
        challenge = None
    if challenge is None:
        raise Problem(400, "invalid_request", "challenge must be the base64url string "
                      "POST /v1/installs/challenge gave")
    if type(nonce) is not int or not 0 <= nonce < 1 << 53:
        raise Problem(400, "invalid_request", f"nonce must be an integer in [0, 2^53), "
                      f"got {str(nonce)[:40]!r}")
    return challenge, nonce
