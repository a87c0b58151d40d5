"""Access: the full role matrix of both services, how keys are held, CORS, headers.

Every endpoint of the collector and of the aggregator is called with no key,
malformed Authorization headers, a wrong key and each role's key; only the
intended role passes (401 without a valid key, 403 with another role's key
on the collector, which knows every role; the aggregator knows analyst keys
only, so any other key is a 401 there).  Keys are held as SHA-256 digests and
every configured digest is compared with ``hmac.compare_digest`` on every
request (no early exit: the time does not depend on which key matched).
CORS: no Access-Control-Allow-Origin unless configured, and then only for
the configured origin.  The dashboard carries its security headers.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from aggregator.app import SECURITY_HEADERS
from aggregator.app import create_app as create_aggregator
from aggregator.auth import analyst_ring
from aggregator.settings import Settings as AggregatorSettings
from collector.app import create_app as create_collector
from collector.settings import Role, Settings
from ldp_core.wire import encode_batch
from ldp_server.keys import KeyRing
from tests.support.asgi import asgi_client
from tests.support.reports import NOW, SPECS, envelope, today
from tests.support.servers import ADMIN_KEY, ANALYST_KEY, INGEST_KEY

pytestmark = pytest.mark.anyio

WRONG_KEY = "test-wrong-key-0123456789abcdef"
#: Credentials -> Authorization header (None: no header at all).
CREDENTIALS: dict[str, str | None] = {
    "none": None,
    "empty": "",
    "scheme-only": "Bearer",
    "bearer-blank": "Bearer    ",
    "basic": f"Basic {INGEST_KEY}",
    "no-scheme": INGEST_KEY,
    "wrong": f"Bearer {WRONG_KEY}",
    "prefix-of-admin": f"Bearer {ADMIN_KEY[:-1]}",
    "admin-plus": f"Bearer {ADMIN_KEY}x",
    "ingest": f"Bearer {INGEST_KEY}",
    "admin": f"Bearer {ADMIN_KEY}",
    "analyst": f"Bearer {ANALYST_KEY}",
}
ROLES = {"ingest", "admin", "analyst"}


def collector_settings(redis_url: str, **extra: Any) -> Settings:
    return Settings(env="dev", redis_url=redis_url, admin_keys=SecretStr(ADMIN_KEY),
                    ingest_keys=SecretStr(INGEST_KEY), analyst_keys=SecretStr(ANALYST_KEY),
                    rate_limit_per_second=0, **extra)


@pytest.fixture()
async def collector_client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_collector(collector_settings(redis_url),
                                            clock=lambda: NOW)) as c:
        r = await c.post("/v1/metrics", json=SPECS["browser"],
                         headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert r.status_code == 201
        yield c


def _headers(credential: str) -> dict[str, str]:
    value = CREDENTIALS[credential]
    return {} if value is None else {"Authorization": value}


#: (method, path, body factory, roles that pass) of every collector endpoint.
def _collector_endpoints() -> list[tuple[str, str, Callable[[], Any] | None, set[str]]]:
    def batch() -> Any:
        return encode_batch([envelope("browser", 1, today(), 1)])

    def spec() -> Any:
        return SPECS["page"]

    return [
        ("GET", "/healthz", None, ROLES | {"anyone"}),
        ("GET", "/readyz", None, ROLES | {"anyone"}),
        ("GET", "/metrics", None, ROLES | {"anyone"}),
        ("GET", "/openapi.json", None, ROLES | {"anyone"}),
        ("GET", "/v1/metrics", None, {"ingest", "admin"}),
        ("GET", "/v1/metrics/browser", None, {"ingest", "admin"}),
        ("POST", "/v1/metrics", spec, {"admin"}),
        ("POST", "/v1/reports", batch, {"ingest"}),
    ]


async def test_collector_role_matrix(collector_client: httpx.AsyncClient) -> None:
    matrix: dict[str, dict[str, int]] = {}
    for method, path, body, allowed in _collector_endpoints():
        row = matrix.setdefault(f"{method} {path}", {})
        for credential in CREDENTIALS:
            r = await collector_client.request(
                method, path, json=body() if body else None, headers=_headers(credential))
            row[credential] = r.status_code
            if "anyone" in allowed or credential in allowed:
                assert r.is_success, (method, path, credential, r.text)
            elif credential in ROLES:
                assert r.status_code == 403 and r.json()["code"] == "wrong_role", (path, credential)
            else:
                assert r.status_code == 401, (method, path, credential, r.text)
                assert r.json()["code"] in ("missing_key", "invalid_key")
                assert r.headers["WWW-Authenticate"] == "Bearer"
    print("\ncollector role matrix", matrix)
    # The ingest key cannot create metrics, the analyst key can neither ingest nor read specs.
    assert matrix["POST /v1/metrics"]["ingest"] == 403
    assert matrix["POST /v1/reports"]["analyst"] == 403
    assert matrix["POST /v1/metrics"]["analyst"] == 403


@pytest.fixture()
async def aggregator_client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    # Data to read: one metric with reports, written through the collector.
    async with asgi_client(create_collector(collector_settings(redis_url),
                                            clock=lambda: NOW)) as c:
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        assert (await c.post("/v1/metrics", json=SPECS["browser"], headers=admin)).is_success
        envs = [envelope("browser", 1, today(), i % 4) for i in range(200)]
        r = await c.post("/v1/reports", json=encode_batch(envs),
                         headers={"Authorization": f"Bearer {INGEST_KEY}"})
        assert r.json()["accepted"] == 200
    app = create_aggregator(AggregatorSettings(env="dev", redis_url=redis_url,
                                               analyst_keys=ANALYST_KEY))
    async with asgi_client(app) as c:
        yield c


async def test_aggregator_role_matrix(aggregator_client: httpx.AsyncClient) -> None:
    endpoints: list[tuple[str, str, bool]] = [  # method, path, needs the analyst key
        ("GET", "/healthz", False),
        ("GET", "/readyz", False),
        ("GET", "/openapi.json", False),
        ("GET", "/static/dashboard.css", False),
        ("GET", "/v1/metrics", True),
        ("GET", "/v1/estimates/browser", True),
        ("GET", f"/v1/estimates/browser?start={today()}&end={today() + 1}", True),
        ("GET", "/v1/estimates/browser/compare?a=firefox&b=chrome", True),
    ]
    matrix: dict[str, dict[str, int]] = {}
    for method, path, protected in endpoints:
        row = matrix.setdefault(f"{method} {path}", {})
        for credential in CREDENTIALS:
            r = await aggregator_client.request(method, path, headers=_headers(credential))
            row[credential] = r.status_code
            if not protected or credential == "analyst":
                assert r.is_success, (path, credential, r.text)
            else:
                assert r.status_code == 401, (path, credential, r.status_code)
                assert r.headers["content-type"].startswith("application/problem+json")
    # The dashboard: a login page (401) without the analyst key, the page with it.
    for credential in CREDENTIALS:
        r = await aggregator_client.get("/", headers=_headers(credential))
        matrix.setdefault("GET /", {})[credential] = r.status_code
        assert r.status_code == (200 if credential == "analyst" else 401), (credential, r.text)
        assert "browser" not in r.text or credential == "analyst"
    # The sign-in form: only the analyst key gets the session cookie (derived, not the key).
    for name, key in [("ingest", INGEST_KEY), ("admin", ADMIN_KEY), ("wrong", WRONG_KEY),
                      ("empty", ""), ("analyst", ANALYST_KEY)]:
        r = await aggregator_client.post(
            "/login", content=f"key={key}".encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded",
                     "Origin": str(aggregator_client.base_url).rstrip("/")})
        matrix.setdefault("POST /login", {})[name] = r.status_code
        if name == "analyst":
            assert r.status_code == 303
            cookie = r.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
            assert ANALYST_KEY not in cookie
        else:
            assert r.status_code == 401 and "set-cookie" not in r.headers
    r = await aggregator_client.post(
        "/logout", headers={"Origin": str(aggregator_client.base_url).rstrip("/")})
    assert r.status_code == 303  # clears the cookie; needs no key
    r = await aggregator_client.post("/logout", headers={"Origin": "https://evil.example"})
    assert r.status_code == 403  # but only from the dashboard's own origin
    # Writes do not exist on the aggregator, whatever the key.
    for credential in ("analyst", "admin", "ingest"):
        r = await aggregator_client.post("/v1/metrics", json=SPECS["page"],
                                         headers=_headers(credential))
        assert r.status_code in (401, 405), r.status_code
        r = await aggregator_client.post("/v1/reports", json={}, headers=_headers(credential))
        assert r.status_code in (401, 404, 405)
    print("\naggregator role matrix", matrix)


def test_keys_are_held_as_digests_and_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys: dict[Role, tuple[str, ...]] = {
        "ingest": (INGEST_KEY, "ingest-key-2-0123456789abcdef"), "admin": (ADMIN_KEY,),
        "analyst": (ANALYST_KEY,)}
    ring = KeyRing.from_keys(keys)
    held = b"".join(d for d, _ in ring.entries)
    for role_keys in keys.values():
        for key in role_keys:
            assert key.encode() not in held and key not in repr(ring)
    assert all(len(d) == 32 for d, _ in ring.entries)  # SHA-256 digests
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:  # the real comparison, recorded
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr("ldp_server.keys.hmac.compare_digest", spy)
    for presented, role in [(INGEST_KEY, "ingest"), (ADMIN_KEY, "admin"), (WRONG_KEY, None),
                            ("", None), ("x", None)]:
        compared.clear()
        assert ring.role_of(presented) == role
        # Every entry is compared, whichever matched first, and only digests are compared.
        assert len(compared) == len(ring.entries)
        assert all(len(a) == len(b) == 32 for a, b in compared)
    # The aggregator's ring: digests only, every one compared, for bearer keys and cookies.
    ring2 = analyst_ring((ANALYST_KEY, "analyst-key-2-0123456789abcdef"))
    assert all(len(d) == 32 and role == "analyst" for d, role in ring2.entries)
    assert ANALYST_KEY.encode() not in b"".join(d for d, _ in ring2.entries)
    for presented, ok in [(ANALYST_KEY, True), (WRONG_KEY, False), (INGEST_KEY, False)]:
        compared.clear()
        assert ring2.check_key(presented) is ok
        assert len(compared) == 2 and all(len(a) == len(b) == 32 for a, b in compared)
    # And the settings never print a key.
    s = Settings(env="dev", ingest_keys=SecretStr(INGEST_KEY), admin_keys=SecretStr(ADMIN_KEY))
    assert INGEST_KEY not in repr(s) and ADMIN_KEY not in str(s.model_dump())


async def test_cors_is_closed_unless_configured(redis_url: str) -> None:
    origin = "https://dashboard.example"
    preflight = {"Origin": origin, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    async with asgi_client(create_collector(collector_settings(redis_url))) as c:
        for method, path in [("GET", "/healthz"), ("GET", "/v1/metrics"),
                             ("POST", "/v1/reports")]:
            r = await c.request(method, path, headers={"Origin": origin,
                                                       "Authorization": f"Bearer {INGEST_KEY}"})
            assert "access-control-allow-origin" not in r.headers
        r = await c.options("/v1/reports", headers=preflight)
        assert r.status_code in (404, 405) and "access-control-allow-origin" not in r.headers
    configured = collector_settings(redis_url, cors_origins=origin)
    async with asgi_client(create_collector(configured)) as c:
        r = await c.get("/v1/metrics", headers={"Origin": origin,
                                                "Authorization": f"Bearer {INGEST_KEY}"})
        assert r.headers["access-control-allow-origin"] == origin
        r = await c.options("/v1/reports", headers=preflight)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        # A page asks the token issuer with its install key (sdk-js).
        r = await c.options("/v1/tokens", headers={
            **preflight, "Access-Control-Request-Headers": "authorization,ldp-install-key"})
        assert r.status_code == 200
        assert "ldp-install-key" in r.headers["access-control-allow-headers"].lower()
        other = await c.get("/healthz", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
        bad = await c.options("/v1/reports", headers={**preflight,
                                                      "Origin": "https://evil.example"})
        assert bad.status_code == 400 and "access-control-allow-origin" not in bad.headers
    with pytest.raises(ValueError, match="CORS"):
        Settings(env="prod", redis_url=redis_url, admin_keys=SecretStr(ADMIN_KEY),
                 ingest_keys=SecretStr(INGEST_KEY), cors_origins="*")


async def test_aggregator_cors_closed_and_dashboard_security_headers(
    aggregator_client: httpx.AsyncClient,
) -> None:
    auth = {"Authorization": f"Bearer {ANALYST_KEY}"}
    for path in ("/", "/v1/estimates/browser", "/healthz", "/static/dashboard.css"):
        r = await aggregator_client.get(path, headers={**auth, "Origin": "https://evil.example"})
        assert r.is_success, (path, r.status_code)
        assert "access-control-allow-origin" not in r.headers
        for name, value in SECURITY_HEADERS.items():
            assert r.headers.get(name) == value, (path, name)
    page = await aggregator_client.get("/", headers=auth)
    csp = page.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'none'" in csp
    assert ANALYST_KEY not in page.text
    assert page.headers.get("cache-control", "no-store") != "public"


async def test_aggregator_cors_opens_only_to_configured_origins(redis_url: str) -> None:
    origin = "https://analytics.example"
    preflight = {"Origin": origin, "Access-Control-Request-Method": "GET",
                 "Access-Control-Request-Headers": "authorization"}
    settings = AggregatorSettings(env="dev", redis_url=redis_url, analyst_keys=ANALYST_KEY,
                                  cors_origins=origin)
    auth = {"Authorization": f"Bearer {ANALYST_KEY}"}
    async with asgi_client(create_aggregator(settings)) as c:
        r = await c.get("/v1/metrics", headers={**auth, "Origin": origin})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        r = await c.options("/v1/metrics", headers=preflight)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        assert "POST" not in r.headers["access-control-allow-methods"]
        # Read-only: a page of that origin may not ask to write.
        write = await c.options("/v1/metrics", headers={**preflight,
                                                        "Access-Control-Request-Method": "POST"})
        assert write.status_code == 400
        other = await c.get("/v1/metrics", headers={**auth, "Origin": "https://evil.example"})
        assert other.status_code == 200 and "access-control-allow-origin" not in other.headers
        # CORS does not replace the key: the configured origin without one is still refused.
        anonymous = await c.get("/v1/metrics", headers={"Origin": origin})
        assert anonymous.status_code == 401
    with pytest.raises(ValueError, match="CORS"):
        AggregatorSettings(env="prod", redis_url=redis_url, analyst_keys="a" * 30,
                           cors_origins="*")
