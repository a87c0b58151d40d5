"""Account-backed devices (``LDP_DEVICE_AUTH=jwt``): the issuer checks the app's login token.

Real signatures throughout: RSA and EC keys made with ``cryptography``, their
JWKS served over HTTP on 127.0.0.1 (``tests.support.jwks``), a real collector
(uvicorn, real Redis) that fetches it, and the blind issuance of
``ldp_core.tokens``.  What it buys: two installs of one account share one
token per unit (the Sybil bound).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from collector.app import create_app
from collector.settings import Settings
from ldp_core import tokens
from ldp_core.tokens import PublicKey, b64url, unb64url
from ldp_server.redis_server import RedisServer, free_port
from ldp_server.settings import SettingsError, load
from tests.collector.test_api import assert_problem
from tests.support.asgi import asgi_client
from tests.support.jwks import AUDIENCE, ISSUER, IdentityProvider, SigningKey
from tests.support.servers import ADMIN_KEY, INGEST_KEY, ServiceProcess, auth, start_collector

INGEST = auth(INGEST_KEY)
REFETCH = 1.0


def jwt_env(jwks_url: str) -> dict[str, str]:
    return {"LDP_DEVICE_AUTH": "jwt", "LDP_JWT_JWKS_URL": jwks_url, "LDP_JWT_ISSUER": ISSUER,
            "LDP_JWT_AUDIENCE": AUDIENCE, "LDP_JWT_JWKS_REFETCH_SECONDS": str(REFETCH)}


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    with IdentityProvider.start() as provider:
        yield provider


@pytest.fixture(scope="module")
def collector(redis_server: RedisServer, idp: IdentityProvider,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()
    with start_collector(redis_server.url, log_dir=tmp_path_factory.mktemp("logs"),
                         extra_env=jwt_env(idp.url)) as svc:
        yield svc


def today() -> int:
    return int(time.time() // 86400)


def public_key(url: str) -> PublicKey:
    r = httpx.get(f"{url}/v1/tokens/key", headers=INGEST, timeout=10)
    assert r.status_code == 200, r.text
    return PublicKey.from_json(r.json())


def ask(url: str, device_token: str | None, pending: tokens.PendingToken,
        install: str | None = None) -> httpx.Response:
    headers = {**INGEST, "LDP-Install-Key": install or b64url(secrets.token_bytes(32))}
    if device_token is not None:
        headers["LDP-Device-Token"] = device_token
    unit = {"period": pending.period, "epoch": pending.epoch, "blinded": b64url(pending.blinded)}
    return httpx.post(f"{url}/v1/tokens", json={"units": [unit]}, headers=headers, timeout=10)


def result(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()["results"][0]
    return out


def account() -> str:
    return f"user-{secrets.token_hex(8)}"


@pytest.mark.parametrize("kid", ["rsa-1", "ec-1"])
def test_a_valid_login_token_gets_a_token(
    collector: ServiceProcess, idp: IdentityProvider, kid: str
) -> None:
    key = public_key(collector.url)
    pending = tokens.prepare(key, "day", today())
    got = result(ask(collector.url, idp.token(account(), kid), pending))
    assert got["status"] == "issued", got
    tokens.wire_token(key, pending, unb64url(got["blind_sig"]))  # verifies the signature


def _cases(idp: IdentityProvider) -> dict[str, tuple[str | None, str]]:
    now = int(time.time())
    sub = account()
    stranger = SigningKey.rsa("rsa-1")  # the provider's kid, another key
    return {
        "missing": (None, "device_token_missing"),
        "not a jwt": ("not-a-jwt", "device_token_malformed"),
        "expired": (idp.token(sub, iat=now - 7200, exp=now - 3600), "device_token_expired"),
        "not yet valid": (idp.token(sub, nbf=now + 3600), "device_token_not_yet_valid"),
        "issued ahead": (idp.token(sub, iat=now + 3600, exp=now + 7200),
                         "device_token_not_yet_valid"),
        "wrong audience": (idp.token(sub, aud="another-app"), "device_token_audience"),
        "wrong issuer": (idp.token(sub, iss=ISSUER + ".evil"), "device_token_issuer"),
        "issuer prefix": (idp.token(sub, iss=ISSUER[:-3]), "device_token_issuer"),
        "bad signature": (idp.token(sub, key=stranger), "device_token_signature"),
        "alg none": (idp.forged(sub, "none"), "device_token_algorithm"),
        "HS256 keyed by the public key": (idp.forged(sub, "HS256"), "device_token_algorithm"),
        "no sub": (idp.token(sub, sub=None), "device_token_claims"),
        "no exp": (idp.token(sub, exp=None), "device_token_claims"),
        "unknown kid": (idp.token(sub, key=idp.keys["rsa-1"], header={"kid": "nobody"}),
                        "device_token_unknown_key"),
    }


CASES = ["missing", "not a jwt", "expired", "not yet valid", "issued ahead", "wrong audience",
         "wrong issuer", "issuer prefix", "bad signature", "alg none",
         "HS256 keyed by the public key", "no sub", "no exp", "unknown kid"]


@pytest.mark.parametrize("case", CASES)
def test_a_bad_login_token_is_refused_with_its_reason(
    collector: ServiceProcess, idp: IdentityProvider, case: str
) -> None:
    """Each check, on its own: the install key alone (sent with every request here)
    gets nothing."""
    token, reason = _cases(idp)[case]
    pending = tokens.prepare(public_key(collector.url), "day", today())
    body = assert_problem(ask(collector.url, token, pending), 401, "invalid_device")
    assert body["reason"] == reason, body
    if token is not None:
        assert token not in collector.log()   # never logged


def test_two_installs_of_one_account_share_one_token_per_unit(
    collector: ServiceProcess, idp: IdentityProvider
) -> None:
    """The Sybil bound: a second install of the account (its own install key, its own
    blinded message, a fresh login token, even one signed by the other key) is refused
    the unit; the first install's retry is signed again; another account is not bound."""
    key = public_key(collector.url)
    sub, epoch = account(), today()
    first, second = tokens.prepare(key, "day", epoch), tokens.prepare(key, "day", epoch)
    install = b64url(secrets.token_bytes(32))
    assert result(ask(collector.url, idp.token(sub), first, install))["status"] == "issued"
    for login in (idp.token(sub, iat=int(time.time()) - 5), idp.token(sub, "ec-1")):
        assert result(ask(collector.url, login, second)) == {"status": "rejected",
                                                             "code": "token_limit"}
    assert result(ask(collector.url, idp.token(sub), first))["status"] == "issued"
    assert result(ask(collector.url, idp.token(account()), second))["status"] == "issued"
    # Another unit of the same account is its own.
    assert result(ask(collector.url, idp.token(sub),
                      tokens.prepare(key, "day", epoch + 1)))["status"] == "issued"


def test_a_rotated_key_is_fetched_and_unknown_kids_are_rate_bound(
    collector: ServiceProcess, idp: IdentityProvider
) -> None:
    key = public_key(collector.url)
    epoch = today()
    assert result(ask(collector.url, idp.token(account()),
                      tokens.prepare(key, "day", epoch)))["status"] == "issued"
    time.sleep(REFETCH + 0.2)
    # Made-up kids: the first fetches again, the rest inside the interval do not.
    before, started = idp.fetches, time.monotonic()
    for _ in range(6):
        login = idp.token(account(), key=idp.keys["rsa-1"],
                          header={"kid": secrets.token_hex(4)})
        body = assert_problem(ask(collector.url, login, tokens.prepare(key, "day", epoch)),
                              401, "invalid_device")
        assert body["reason"] == "device_token_unknown_key"
    elapsed = time.monotonic() - started
    assert 1 <= idp.fetches - before <= 1 + int(elapsed / REFETCH), (idp.fetches, before)
    # The provider rotates: a token of the new kid works once the interval has passed.
    idp.publish(SigningKey.ec("ec-2"))
    time.sleep(REFETCH + 0.2)
    before = idp.fetches
    got = result(ask(collector.url, idp.token(account(), "ec-2"),
                     tokens.prepare(key, "day", epoch)))
    assert got["status"] == "issued" and idp.fetches == before + 1
    # The old keys still work, from the cache.
    assert result(ask(collector.url, idp.token(account(), "rsa-1"),
                      tokens.prepare(key, "day", epoch)))["status"] == "issued"
    assert idp.fetches == before + 1


@pytest.mark.anyio
async def test_a_jwks_file_and_an_unreachable_jwks(
    redis_url: str, tmp_path: Path, idp: IdentityProvider
) -> None:
    """In process: the JWKS read from LDP_JWT_JWKS_FILE; a provider that does not answer
    is 503 device_auth_unavailable (Retry-After), never a 500 or a pass."""
    import json

    file = tmp_path / "jwks.json"
    file.write_text(json.dumps(idp.jwks()))
    base: dict[str, Any] = {"env": "dev", "redis_url": redis_url, "admin_keys": ADMIN_KEY,
                            "ingest_keys": INGEST_KEY, "device_auth": "jwt",
                            "jwt_issuer": ISSUER, "jwt_audience": AUDIENCE}
    for source, want in (({"jwt_jwks_file": str(file)}, 200),
                         ({"jwt_jwks_url": f"http://127.0.0.1:{free_port()}/jwks"}, 503)):
        async with asgi_client(create_app(Settings(**base, **source))) as c:
            r = await c.get("/v1/tokens/key", headers=INGEST)
            pending = tokens.prepare(PublicKey.from_json(r.json()), "day", today())
            unit = {"period": "day", "epoch": pending.epoch, "blinded": b64url(pending.blinded)}
            r = await c.post("/v1/tokens", json={"units": [unit]}, headers={
                **INGEST, "LDP-Install-Key": b64url(secrets.token_bytes(32)),
                "LDP-Device-Token": idp.token(account())})
            if want == 200:
                assert r.status_code == 200 and r.json()["results"][0]["status"] == "issued"
            else:
                assert_problem(r, 503, "device_auth_unavailable")
                assert r.headers["retry-after"] == "5"


PROD: dict[str, Any] = {
    "env": "prod", "redis_url": "redis://127.0.0.1:6379/0", "admin_keys": "a" * 24,
    "ingest_keys": "i" * 24, "server_secret": "00" * 16, "token_key_file": "/k.pem",
}


def _refusal(**values: Any) -> str:
    with pytest.raises(SettingsError) as caught:
        load(Settings, _env_file=None, **values)
    return str(caught.value)


def test_settings_refuse_an_unsafe_jwt_configuration() -> None:
    jwt = {"device_auth": "jwt", "jwt_issuer": ISSUER, "jwt_audience": AUDIENCE}
    https = {"jwt_jwks_url": "https://idp.example/.well-known/jwks.json"}
    assert load(Settings, _env_file=None, **PROD, **jwt, **https).device_auth == "jwt"
    assert load(Settings, _env_file=None, **PROD).device_auth == "install_key"
    # Without iss and aud any token of the provider's other apps would do (every mode).
    for mode in (PROD, {"env": "dev"}):
        text = _refusal(**mode, device_auth="jwt", **https)
        assert "LDP_JWT_ISSUER" in text and "LDP_JWT_AUDIENCE" in text, text
    # Plain http: prod only to loopback (a proxy on the path could swap the keys).
    plain = {"jwt_jwks_url": "http://idp.example/jwks"}
    assert "plain http" in _refusal(**PROD, **jwt, **plain)
    assert load(Settings, _env_file=None, env="dev", **jwt, **plain).jwt_jwks_url
    for loopback in ("http://127.0.0.1:9/jwks", "http://localhost:9/jwks", "http://[::1]:9/j"):
        assert load(Settings, _env_file=None, **PROD, **jwt, jwt_jwks_url=loopback)
    # Symmetric or no signature, never; one source of keys.
    for algorithms in ("RS256,HS256", "none", "", "RS256,ES256K"):
        assert "LDP_JWT_ALGORITHMS" in _refusal(**PROD, **jwt, **https,
                                                jwt_algorithms=algorithms)
    assert "LDP_JWT_JWKS_URL" in _refusal(env="dev", **jwt)
    assert "LDP_JWT_JWKS_URL" in _refusal(env="dev", **jwt, **https, jwt_jwks_file="/j.json")
    assert "https://" in _refusal(env="dev", **jwt, jwt_jwks_url="ftp://idp.example/jwks")


def test_the_subject_is_keyed_and_never_the_account(idp: IdentityProvider) -> None:
    """What the issuer keeps for an account: a keyed digest, another under another secret."""
    from collector.device_auth import account_subject

    one = account_subject(b"\x01" * 16, ISSUER, "alice")
    assert len(one) == 16 and b"alice" not in one
    assert one != account_subject(b"\x02" * 16, ISSUER, "alice")
    assert one != account_subject(b"\x01" * 16, ISSUER + "x", "alice")
    # (iss, sub) are framed: no pair collides with another split of the same text.
    assert account_subject(b"\x01" * 16, "ab", "c") != account_subject(b"\x01" * 16, "a", "bc")

