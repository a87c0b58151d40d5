"""``Client(device_token=...)`` against a collector that knows devices by account (jwt).

Real pieces only: a local identity provider (RSA key, JWKS over HTTP on
127.0.0.1), the collector under uvicorn with ``LDP_DEVICE_AUTH=jwt``, real
Redis, and the SDK's own urllib transport (wrapped to note which request
carried which headers).  The app's callable failing, or its token refused,
never reaches the app: counted, the report kept, delivered once a good token
comes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import redis

from client_sdk import Client, DeliveryConfig, Response, UrllibTransport
from ldp_server.redis_server import RedisServer
from tests.client_sdk.test_e2e import register
from tests.collector.test_device_auth import jwt_env
from tests.support.jwks import IdentityProvider
from tests.support.sdk_fixtures import BROWSERS, specs
from tests.support.servers import INGEST_KEY, ServiceProcess, start_collector

QUICK = DeliveryConfig(interval=0.05, backoff_base=0.05, backoff_max=0.2, request_timeout=5.0)


class NotingTransport:
    """The real urllib transport; notes (path, has LDP-Device-Token) of each request."""

    def __init__(self) -> None:
        self.inner = UrllibTransport(use_env_proxies=False)
        self.sent: list[tuple[str, bool]] = []
        self._lock = threading.Lock()

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout: float) -> Response:
        with self._lock:
            self.sent.append((url.split("/", 3)[-1], "LDP-Device-Token" in headers))
        return self.inner.send(method, url, headers, body, timeout)


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
        register(svc.url, specs())
        yield svc


def test_the_app_login_token_gets_the_report_delivered(
    collector: ServiceProcess, idp: IdentityProvider, tmp_path: Path
) -> None:
    now = idp.claims("x")["iat"]
    state: dict[str, str | None] = {"token": None}

    def login() -> str | None:
        if state["token"] is None:
            raise RuntimeError("the app is signed out")
        return state["token"]

    transport = NotingTransport()
    c = Client(collector.url, api_key=INGEST_KEY, state_dir=tmp_path, transport=transport,
               delivery=QUICK, background=False, device_token=login)
    try:
        assert c.refresh_metrics(5)
        assert c.record("browser", BROWSERS[0]).status == "queued"
        # The callable raises: no token asked, nothing raised here, the report waits.
        assert not c.flush(0.5)
        counts = c.counters()
        assert counts.config_errors.get("device_token_unavailable", 0) >= 1
        assert counts.pending == 1 and counts.dropped == {}
        # An expired login token: the issuer refuses it (401), the report is kept.
        state["token"] = idp.token("alice", iat=now - 7200, exp=now - 3600)
        assert not c.flush(0.5)
        counts = c.counters()
        assert counts.config_errors.get("device_token_refused", 0) >= 1
        assert counts.pending == 1 and counts.dropped == {}
        # A fresh one: the token comes, the report is delivered.
        state["token"] = idp.token("alice")
        assert c.flush(10)
        assert c.counters().sent == 1
    finally:
        c.close()
    # The login token went with token requests only: never with a report or a spec fetch.
    carried = {path for path, has in transport.sent if has}
    assert carried == {"v1/tokens"}, transport.sent
    assert any(path == "v1/reports" for path, _ in transport.sent)
