"""The SDK uses only token issuer keys that the app pinned (real collectors, real Redis).

A malicious issuer could give each device a key of its own and recognise it in
every token.  Two collectors share one Redis: ``honest`` signs with the test
issuer key (tests/support/token_key.pem), ``other`` with a key generated here.
The app pins the honest key's id; against ``other`` nothing is asked, spent or
sent, the error is counted and logged, and the reports wait in the spool.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from client_sdk import Client, ConfigError
from collector.token_crypto import TokenKey
from ldp_server.redis_server import RedisServer
from tests.client_sdk.test_e2e import QUICK, register
from tests.client_sdk.test_tokens import Switch
from tests.support.sdk_fixtures import BROWSERS, specs, spool_rows
from tests.support.servers import INGEST_KEY, start_collector
from tests.support.tokens import test_key as issuer_key

HONEST_ID = issuer_key().public.key_id.hex()


@pytest.fixture(scope="module")
def collectors(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()
    folder = tmp_path_factory.mktemp("other-key")
    other = TokenKey.generate(bits=1024)
    (folder / "other.pem").write_bytes(other.to_pem())
    logs = tmp_path_factory.mktemp("logs")
    with start_collector(redis_server.url, log_dir=logs) as honest, start_collector(
        redis_server.url, log_dir=logs, extra_env={"LDP_TOKEN_KEY_FILE": str(folder / "other.pem")}
    ) as rogue:
        register(honest.url, specs())
        yield {"honest": honest.url, "other": rogue.url,
               "other_id": other.public.key_id.hex(), "redis": redis_server.url}


def _client(url: str, state: Path, net: Switch, **kw: Any) -> Client:
    return Client(url, api_key=INGEST_KEY, state_dir=state, metrics=kw.pop("metrics", specs()),
                  transport=net, delivery=QUICK, background=False, **kw)


def test_a_pinned_key_delivers(collectors: dict[str, Any], tmp_path: Path) -> None:
    net = Switch()
    net.online = True
    with _client(collectors["honest"], tmp_path, net, issuer_keys=[HONEST_ID]) as c:
        assert c.record("browser", BROWSERS[0]).ok
        assert c.flush(10)
        assert c.counters().sent == 1 and c.counters().config_errors == {}


def test_an_unpinned_key_is_refused_and_reports_stay_spooled(
    collectors: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bundle = tmp_path / "ldp-metrics.json"
    bundle.write_text(json.dumps({"metrics": specs(), "issuer_keys": [HONEST_ID]}))
    net = Switch()
    net.online = True
    state = tmp_path / "state"
    with caplog.at_level(logging.WARNING, logger="client_sdk"):
        c = _client(collectors["other"], state, net, metrics=str(bundle))
        try:
            for metric, value in (("browser", BROWSERS[0]), ("dark_mode", True),
                                  ("session_minutes", 12.5)):
                assert c.record(metric, value).ok
            assert not c.flush(1.0)
            counts = c.counters()
        finally:
            c.close(0.5)
    assert counts.sent == 0 and counts.pending == 3
    assert counts.config_errors["issuer_key_unpinned"] >= 2  # asked again, refused again
    assert not counts.dropped
    # Only the key was fetched: no blinded message was sent, no report went out.
    assert {p for _, p, _ in net.log} == {"v1/tokens/key"}
    assert [row[5] for row in spool_rows(state)] == ["", "", ""]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and collectors["other_id"] in errors[0].getMessage()
    assert INGEST_KEY not in caplog.text
    # The same device, once it talks to an issuer with a pinned key, delivers them all.
    net2 = Switch()
    net2.online = True
    with _client(collectors["honest"], state, net2, metrics=str(bundle)) as c:
        assert c.flush(10)
        assert c.counters().sent == 3


def test_pins_from_the_environment_and_bad_pins(
    collectors: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LDP_ISSUER_KEYS", f"{'0' * 64},{HONEST_ID}")
    net = Switch()
    net.online = True
    with _client(collectors["other"], tmp_path, net) as c:
        assert c.record("dark_mode", True).ok
        assert not c.flush(0.5)
        assert c.counters().config_errors["issuer_key_unpinned"] >= 1
    with pytest.raises(ConfigError, match="64 hex digits"):
        _client(collectors["honest"], tmp_path / "x", Switch(), issuer_keys=["abc"])


def test_without_pins_any_key_works_with_one_warning(
    collectors: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LDP_ISSUER_KEYS", raising=False)
    net = Switch()
    net.online = True
    with caplog.at_level(logging.WARNING, logger="client_sdk"), _client(
        collectors["other"], tmp_path, net
    ) as c:
        assert c.record("dark_mode", True).ok
        assert c.flush(10)
        assert c.counters().sent == 1
    warned = [r.getMessage() for r in caplog.records if "without a pin" in r.getMessage()]
    assert len(warned) == 1 and collectors["other_id"] in warned[0]
