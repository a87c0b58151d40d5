"""Install registration through a real collector on loopback (uvicorn + redis-server).

Issue 34 item 1: a fresh random install key must cost a proof of work, once.
Each test starts its own collector over the flushed session Redis with a known
``LDP_SERVER_SECRET`` (so a test can mint an expired challenge the way the
server would) and a cheap difficulty (N=16, r=1, 6 bits: 64 evaluations of
~20 us) except the first, which solves the default difficulty for real.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from client_sdk._register import Registrar
from client_sdk._transport import UrllibTransport
from collector.installs import mint_challenge, open_challenge
from collector.settings import Settings
from ldp_core.pow import DEFAULT_PARAMS, PowParams, install_digest, solve, verify
from ldp_core.tokens import b64url, unb64url
from ldp_server.redis_server import RedisServer
from tests.support.servers import (
    ADMIN_KEY,
    INGEST_KEY,
    ServiceProcess,
    auth,
    flushed_collector,
)

SECRET = bytes(range(32))
CHEAP = PowParams(n=16, r=1, p=1, bits=6)
CHEAP_ENV = {"LDP_INSTALL_POW_N": "16", "LDP_INSTALL_POW_R": "1", "LDP_INSTALL_POW_BITS": "6"}
INGEST = auth(INGEST_KEY)


def start(redis_server: RedisServer, tmp_path: Path, **env: str) -> Any:
    return flushed_collector(redis_server, log_dir=tmp_path / "collector",
                             extra_env={"LDP_SERVER_SECRET": SECRET.hex(), **env})


@pytest.fixture()
def cheap(redis_server: RedisServer, tmp_path: Path) -> Iterator[ServiceProcess]:
    with start(redis_server, tmp_path, **CHEAP_ENV) as service:
        yield service


def new_key() -> bytes:
    return secrets.token_bytes(32)


def headers(key: bytes) -> dict[str, str]:
    return {**INGEST, "LDP-Install-Key": b64url(key)}


def challenge(url: str) -> tuple[bytes, PowParams]:
    r = httpx.post(f"{url}/v1/installs/challenge", headers=INGEST)
    assert r.status_code == 200, r.text
    body = r.json()
    p = body["pow"]
    assert p["alg"] == "scrypt"
    return unb64url(body["challenge"]), PowParams(n=p["n"], r=p["r"], p=p["p"], bits=p["bits"])


def register(url: str, key: bytes, chal: bytes | None = None,
             nonce: int | None = None, *, forwarded: str | None = None) -> httpx.Response:
    body = {} if chal is None else {"challenge": b64url(chal), "nonce": nonce}
    extra = {} if forwarded is None else {"X-Forwarded-For": forwarded}
    return httpx.post(f"{url}/v1/installs", headers={**headers(key), **extra}, json=body)


def solved(url: str, key: bytes) -> tuple[bytes, int, PowParams]:
    chal, params = challenge(url)
    nonce = solve(chal, install_digest(key), params)
    assert nonce is not None
    return chal, nonce, params


def assert_problem(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["code"] == code, r.text


def test_the_default_difficulty_registers_once_then_200_without_work(
        redis_server: RedisServer, tmp_path: Path) -> None:
    defaults = {"LDP_INSTALL_POW_N": str(DEFAULT_PARAMS.n),  # test collectors run cheap
                "LDP_INSTALL_POW_R": str(DEFAULT_PARAMS.r),
                "LDP_INSTALL_POW_BITS": str(DEFAULT_PARAMS.bits)}
    with start(redis_server, tmp_path, **defaults) as service:
        chal, params = challenge(service.url)
        assert params == DEFAULT_PARAMS == Settings().install_pow_params()
        key = new_key()
        assert_problem(register(service.url, key), 403, "install_unregistered")
        nonce = solve(chal, install_digest(key), params)
        assert nonce is not None
        r = register(service.url, key, chal, nonce)
        assert r.status_code == 201, r.text
        assert r.json()["status"] == "registered"
        again = register(service.url, key)  # no proof: a registered install pays nothing
        assert again.status_code == 200 and again.json() == r.json()
        assert register(service.url, key, chal, nonce).status_code == 200


def test_a_solution_does_not_register_another_install(cheap: ServiceProcess) -> None:
    key, other = new_key(), new_key()
    chal, nonce, params = solved(cheap.url, key)
    # Exact, not probabilistic: this nonce is checked to be no solution for the other key.
    while verify(chal, install_digest(other), nonce, params):
        other = new_key()
    assert_problem(register(cheap.url, other, chal, nonce), 400, "pow_invalid")
    assert_problem(register(cheap.url, other), 403, "install_unregistered")
    assert register(cheap.url, key, chal, nonce).status_code == 201


def test_an_expired_challenge_is_refused(cheap: ServiceProcess) -> None:
    past = mint_challenge(SECRET, CHEAP, now=time.time() - 700, ttl=600)
    assert open_challenge(SECRET, past, now=time.time() - 650) == CHEAP  # well formed, ours
    key = new_key()
    nonce = solve(past, install_digest(key), CHEAP)
    assert_problem(register(cheap.url, key, past, nonce), 400, "challenge_expired")


def test_a_forged_challenge_is_refused(cheap: ServiceProcess) -> None:
    key = new_key()
    chal, _, _ = solved(cheap.url, key)
    easy = PowParams(n=16, r=1, p=1, bits=0)
    lowered = chal[:4] + bytes([0]) + chal[5:]  # bits byte set to 0, MAC kept
    forged = mint_challenge(hashlib.sha256(b"not the server secret").digest(), easy,
                            now=time.time(), ttl=600)
    for bad in (lowered, forged, chal[:-1], b"\x02" + chal[1:]):
        assert_problem(register(cheap.url, key, bad, 0), 400, "challenge_invalid")
    assert_problem(register(cheap.url, key, chal, -1), 400, "invalid_request")
    assert_problem(register(cheap.url, key), 403, "install_unregistered")


def test_the_21st_registration_from_one_network_is_refused(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """A real network (through a trusted proxy: the dev host itself is not limited, as on
    the token issuer's new-install limit, so test fleets on loopback register freely)."""
    with start(redis_server, tmp_path, LDP_INSTALL_REGISTRATIONS_PER_PREFIX_PER_HOUR="20",
               LDP_TRUSTED_PROXIES="127.0.0.1/32", **CHEAP_ENV) as service:
        keys = [new_key() for _ in range(21)]
        proofs = [solved(service.url, k) for k in keys]
        for i, (key, (chal, nonce, _)) in enumerate(zip(keys[:20], proofs[:20], strict=True)):
            r = register(service.url, key, chal, nonce, forwarded=f"203.0.113.{i + 1}")
            assert r.status_code == 201, r.text
        r = register(service.url, keys[20], proofs[20][0], proofs[20][1],
                     forwarded="203.0.113.200")
        assert_problem(r, 429, "registration_limited")
        assert int(r.headers["retry-after"]) >= 1
        assert register(service.url, keys[0]).status_code == 200  # the registered still are
        r = register(service.url, keys[20], proofs[20][0], proofs[20][1],
                     forwarded="198.51.100.1")  # another network has its own budget
        assert r.status_code == 201, r.text
        more = [new_key() for _ in range(25)]  # loopback in dev: not limited
        for key in more:
            chal, nonce, _ = solved(service.url, key)
            assert register(service.url, key, chal, nonce).status_code == 201


def test_redis_holds_neither_the_address_nor_the_install_key(
        cheap: ServiceProcess, redis_server: RedisServer) -> None:
    keys = [new_key() for _ in range(3)]
    for key in keys:
        chal, nonce, _ = solved(cheap.url, key)
        assert register(cheap.url, key, chal, nonce).status_code == 201
    forbidden = [b"127.0.0.1", b"127.0.0.0", b"127.0.0.0/24"]
    for key in keys:
        forbidden += [key, b64url(key).encode(), key.hex().encode(), install_digest(key),
                      install_digest(key).hex().encode()]
    seen = 0
    with redis.Redis(port=redis_server.port) as client:
        for name in client.scan_iter(count=1000):
            blobs = [name, *dump_values(client, name)]
            seen += 1
            for blob in blobs:
                for bad in forbidden:
                    assert bad not in blob, (name, bad)
    registered = sum(1 for n in redis.Redis(port=redis_server.port).scan_iter("ldp:{i:*}:r"))
    assert registered == 3 and seen > 3


def dump_values(client: redis.Redis, name: bytes) -> list[bytes]:
    kind = client.type(name)
    if kind == b"string":
        return [client.get(name) or b""]
    if kind == b"hash":
        return [b for kv in client.hgetall(name).items() for b in kv]
    if kind == b"set":
        return list(client.smembers(name))
    if kind == b"list":
        return list(client.lrange(name, 0, -1))
    if kind == b"zset":
        return [m for m, _ in client.zrange(name, 0, -1, withscores=True)]
    return [client.dump(name) or b""]


def test_the_python_sdk_registers_once_per_install(cheap: ServiceProcess) -> None:
    calls: list[bytes] = []

    def counting(chal: bytes, digest: bytes, params: PowParams) -> int | None:
        calls.append(chal)
        return solve(chal, digest, params)

    registrar = Registrar(UrllibTransport(use_env_proxies=False), cheap.url, lambda: INGEST,
                          solver=counting)
    install = b64url(new_key())
    assert registrar.ensure(install).status == "registered"
    assert registrar.ensure(install).status == "registered" and len(calls) == 1
    fresh = Registrar(UrllibTransport(use_env_proxies=False), cheap.url, lambda: INGEST,
                      solver=counting)  # a restarted process: asks, pays nothing
    assert fresh.ensure(install).status == "registered" and len(calls) == 1
    down = Registrar(UrllibTransport(use_env_proxies=False), "http://127.0.0.1:9", lambda: {})
    assert down.ensure(install).status == "busy"  # never raises


def test_prod_refuses_a_difficulty_of_zero_bits() -> None:
    assert any("LDP_INSTALL_POW_BITS is 0" in p for p in Settings(install_pow_bits=0).unsafe())
    assert not any("LDP_INSTALL_POW" in p for p in Settings().unsafe())
    with pytest.raises(ValueError, match=r"power of two.*got 1000"):
        Settings(install_pow_n=1000)


@pytest.mark.anyio
@pytest.mark.parametrize("required", [True, False])
async def test_the_issuer_gate_lets_only_registered_installs_through(
        redis_url: str, required: bool) -> None:
    """``require_registration`` (the dependency POST /v1/tokens takes) on a probe route of
    a real app over the real Redis: 403 until the install registers, when required."""
    from fastapi import Depends
    from starlette.responses import Response

    from collector.app import create_app
    from collector.routers.installs import require_registration
    from tests.collector.test_api import settings
    from tests.support.asgi import asgi_client

    app = create_app(settings(redis_url, install_pow_n=16, install_pow_r=1,
                              install_pow_bits=6, install_registration_required=required))

    async def probe() -> Response:
        return Response(status_code=204)

    app.add_api_route("/probe", probe, methods=["POST"],
                      dependencies=[Depends(require_registration)])
    key = new_key()
    async with asgi_client(app) as c:
        r = await c.post("/probe", headers=headers(key))
        if not required:
            assert r.status_code == 204
            return
        assert_problem(r, 403, "install_unregistered")
        body = (await c.post("/v1/installs/challenge", headers=INGEST)).json()
        chal = unb64url(body["challenge"])
        nonce = solve(chal, install_digest(key), CHEAP)
        r = await c.post("/v1/installs", headers=headers(key),
                         json={"challenge": body["challenge"], "nonce": nonce})
        assert r.status_code == 201, r.text
        assert (await c.post("/probe", headers=headers(key))).status_code == 204
        assert_problem(await c.post("/probe", headers=headers(new_key())), 403,
                       "install_unregistered")
        assert_problem(await c.post("/probe", headers=INGEST), 401, "invalid_device")


GATED = {**CHEAP_ENV, "LDP_INSTALL_REGISTRATION_REQUIRED": "true"}


def ask_token(url: str, key: bytes) -> httpx.Response:
    from ldp_core.tokens import PublicKey, prepare

    public = PublicKey.from_json(httpx.get(f"{url}/v1/tokens/key", headers=INGEST).json())
    epoch = int(time.time() // 86400)
    pending = prepare(public, "day", epoch)
    return httpx.post(f"{url}/v1/tokens", headers=headers(key), json={"units": [
        {"period": "day", "epoch": epoch, "blinded": b64url(pending.blinded)}]})


def test_the_issuer_signs_only_for_registered_installs_when_required(
        redis_server: RedisServer, tmp_path: Path) -> None:
    with start(redis_server, tmp_path, **GATED) as service:
        key = new_key()
        assert_problem(ask_token(service.url, key), 403, "install_unregistered")
        chal, nonce, _ = solved(service.url, key)
        assert register(service.url, key, chal, nonce).status_code == 201
        r = ask_token(service.url, key)
        assert r.status_code == 200 and r.json()["results"][0]["status"] == "issued", r.text


def test_the_python_sdk_registers_when_the_issuer_asks_and_delivers(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """Fails without the hooks in client_sdk._issuer and client_sdk._transport: the
    issuer's 403 was taken for a refused ingest key there, retried for ever (flush False)."""
    from client_sdk import Client, DeliveryConfig

    fast = DeliveryConfig(interval=60.0, batch_size=100, backoff_base=0.05, backoff_max=0.2,
                          request_timeout=5.0)
    with start(redis_server, tmp_path, **GATED) as service:
        r = httpx.post(f"{service.url}/v1/metrics", headers=auth(ADMIN_KEY), json={
            "name": "browser", "kind": "categorical", "domain": ["firefox", "chrome"],
            "epsilon": 1.0, "mechanism": "grr"})
        assert r.status_code == 201, r.text
        with Client(service.url, api_key=INGEST_KEY, state_dir=tmp_path / "state",
                    delivery=fast) as ldp:
            assert ldp.record("browser", "firefox").status in ("held", "queued")
            assert ldp.flush(30)
            counters = ldp.counters()
        assert (counters.sent, counters.refused, dict(counters.dropped)) == (1, {}, {})
        with redis.Redis(port=redis_server.port) as client:
            assert sum(1 for _ in client.scan_iter("ldp:{i:*}:r")) == 1


def test_a_registration_cut_short_resumes_with_its_challenge_and_nonce(
        cheap: ServiceProcess) -> None:
    """A 429 on the proof (a tight rate limit lets one request through at a time): the next
    ``ensure`` sends the kept proof at once, no new challenge and no second solve.  Before,
    each attempt asked a challenge and solved again, and with a burst of one request the
    challenge took the only one: the registration never finished."""
    from client_sdk._register import Registrar
    from client_sdk._transport import Response, UrllibTransport

    real = UrllibTransport(use_env_proxies=False)
    paths: list[str] = []
    refuse = [True]

    class TightLimit:
        def send(self, method: str, url: str, headers: Any, body: bytes | None,
                 timeout: float) -> Response:
            path = url.split("/v1/", 1)[1]
            paths.append(path)
            if path == "installs" and refuse[0] and body and b"nonce" in body:
                refuse[0] = False
                return Response(429, {"retry-after": "1"}, b'{"code": "rate_limited"}')
            return real.send(method, url, headers, body, timeout)

    calls: list[int] = []

    def counting(chal: bytes, digest: bytes, params: PowParams) -> int | None:
        calls.append(1)
        return solve(chal, digest, params)

    registrar = Registrar(TightLimit(), cheap.url, lambda: INGEST, solver=counting)
    install = b64url(new_key())
    first = registrar.ensure(install, unregistered=True)
    assert (first.status, first.retry_after) == ("busy", 1.0)
    assert registrar.first(install)  # the token request waits for the registration
    assert registrar.ensure(install, unregistered=True).status == "registered"
    assert paths == ["installs/challenge", "installs", "installs"] and len(calls) == 1
    assert not registrar.first(install)
