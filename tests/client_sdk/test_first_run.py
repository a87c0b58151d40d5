"""Issue 14, part 1: the Python SDK's first five minutes, tried as a newcomer would.

Each test fails on the SDK before the fix:
- a first run (fresh state folder) delivers every record of the example in docs/sdk-python.md
  (before: ``unknown_metric`` for every first record, nothing logged);
- a first launch with the collector down keeps the record, through the catalog
  bundled with the app or the value held in memory (never on disk);
- bad data never raises (before: ``ValueError`` into app code);
- a wrong key keeps the reports, is counted and logged with URL and reason, and
  ``flush()`` says it failed (before: reports dropped for good, flush True);
- configuration from the environment, a default state folder, https required.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import client_sdk
from client_sdk import Client, ConfigError, DeliveryConfig, HoldConfig, PrivacyCaps
from client_sdk._config import default_state_dir
from ldp_server.redis_server import free_port
from tests.support.sdk_fixtures import BROWSERS, specs, spool_rows
from tests.support.sdk_http import ScriptedCollector, problem
from tests.support.servers import ADMIN_KEY, INGEST_KEY, ServiceProcess, auth

KEY = "ingest-key-for-tests-0123"
FAST = DeliveryConfig(interval=60.0, batch_size=100, backoff_base=0.05, backoff_max=0.2,
                      request_timeout=2.0)


def state_bytes(folder: Path) -> bytes:
    """Every byte the SDK left in its state folder (spool, WAL, cache, secret)."""
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def register(url: str, bodies: list[dict[str, Any]]) -> None:
    for body in bodies:
        request = urllib.request.Request(  # noqa: S310 (loopback)
            f"{url}/v1/metrics", data=json.dumps(body).encode(), method="POST",
            headers={**auth(ADMIN_KEY), "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            assert answer.status in (200, 201)


# -- 1. a first run delivers every record --------------------------------------------------


def test_readme_example_on_a_fresh_state_folder_delivers_every_record(
        collector_service: ServiceProcess, tmp_path: Path) -> None:
    """The example of docs/sdk-python.md, literally: construct, record at once, leave the block."""
    register(collector_service.url, [
        {"name": "browser", "kind": "categorical", "domain": ["firefox", "chrome", "safari"],
         "epsilon": 1.0, "mechanism": "grr"},
        {"name": "session_minutes", "kind": "numeric", "lo": 0, "hi": 120, "epsilon": 1.0},
    ])
    state = tmp_path / "fresh"
    with Client(collector_service.url, api_key=INGEST_KEY, state_dir=state) as ldp:
        first = ldp.record("browser", "firefox")
        second = ldp.record("session_minutes", 12.5)
        assert {first.status, second.status} <= {"held", "queued"}
        assert ldp.flush(15)
        counters = ldp.counters()
    assert (counters.sent, counters.held, counters.refused) == (2, 0, {})


def test_first_launch_offline_with_a_bundled_catalog_keeps_the_record(tmp_path: Path) -> None:
    """The catalog file shipped with the app: the record is randomised and spooled at
    once, with the collector down, and delivered when it comes up."""
    bundle = tmp_path / "metrics.json"
    bundle.write_text(json.dumps({"metrics": specs()}))
    port = free_port()
    state = tmp_path / "state"
    c = Client(f"http://127.0.0.1:{port}", api_key=KEY, state_dir=state, metrics=bundle,
               delivery=FAST)
    try:
        assert c.record("browser", BROWSERS[0]).status == "queued"
        assert len(spool_rows(state)) == 1
        assert not c.flush(0.5)                            # the collector is down
        with ScriptedCollector(specs(), port=port) as srv:
            assert c.flush(10)
            assert len(srv.accepted) == 1
    finally:
        c.close(1)


def test_held_value_stays_in_memory_then_is_randomised_when_specs_arrive(
        tmp_path: Path) -> None:
    """No catalog at all and the collector down: the value is held in memory (never on
    disk) and randomised, spooled and sent once the specs are fetched."""
    port = free_port()
    state = tmp_path / "state"
    c = Client(f"http://127.0.0.1:{port}", api_key=KEY, state_dir=state, delivery=FAST)
    try:
        assert c.record("browser", BROWSERS[1]).status == "held"
        assert c.record("session_minutes", 41.5).status == "held"
        assert c.counters().held == 2
        assert spool_rows(state) == []
        on_disk = state_bytes(state)
        assert BROWSERS[1].encode() not in on_disk and b"41.5" not in on_disk
        assert c.privacy_report().units == ()               # nothing charged yet
        assert not c.flush(0.3)                             # held values are not delivered
        with ScriptedCollector(specs(), port=port) as srv:
            assert c.flush(10)
            assert len(srv.accepted) == 2
        counters = c.counters()
        assert (counters.held, counters.sent) == (0, 2)
        spool = b"".join(p.read_bytes() for p in state.glob("spool.sqlite3*"))
        assert BROWSERS[1].encode() not in spool     # (metrics.json now lists the domain)
    finally:
        c.close(1)


def test_metric_missing_from_the_bundle_is_fetched_soon_not_after_metrics_ttl(
        tmp_path: Path) -> None:
    """With a bundled catalog the sender refetches only every metrics_ttl (1 h); a held
    value asks for a fetch at once, and is queued without any flush."""
    extra = {"name": "extra", "kind": "boolean", "epsilon": 1.0}
    with ScriptedCollector([*specs(), extra]) as srv:
        c = Client(srv.url, api_key=KEY, state_dir=tmp_path, metrics=specs(), delivery=FAST)
        try:
            assert c.record("extra", True).status == "held"
            deadline = time.monotonic() + 10
            while c.counters().queued == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert (c.counters().queued, c.counters().held) == (1, 0)
            assert c.flush(5) and len(srv.accepted) == 1
        finally:
            c.close(1)


def test_holding_is_bounded_in_count_and_time(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    c = Client(f"http://127.0.0.1:{port}", api_key=KEY, state_dir=tmp_path, delivery=FAST,
               background=False, hold=HoldConfig(max_values=2, max_seconds=0.3))
    try:
        assert [c.record("browser", BROWSERS[0]).status for _ in range(3)] == [
            "held", "held", "unknown_metric"]
        time.sleep(0.4)
        with ScriptedCollector(specs(), port=port) as srv:
            assert c.flush(5)
            assert srv.accepted == []                       # both expired before the fetch
        assert c.counters().refused == {"unknown_metric": 1, "hold_expired": 2}
        with caplog.at_level(logging.WARNING, logger="client_sdk"):
            assert c.record("nope", 1).status == "unknown_metric"   # after a fetch: unknown
        assert [r.getMessage().split(":")[0] for r in caplog.records] == [
            "metric browser", "metric nope"]                  # once per metric
    finally:
        c.close(0)


def test_values_still_held_at_close_are_forgotten_and_counted(tmp_path: Path) -> None:
    c = Client(f"http://127.0.0.1:{free_port()}", api_key=KEY, state_dir=tmp_path,
               delivery=FAST, background=False)
    assert c.record("browser", BROWSERS[0]).status == "held"
    assert c.close(0.2)
    assert c.counters().refused == {"hold_dropped": 1}
    assert spool_rows(tmp_path) == []


def test_opt_out_forgets_held_values_at_once(tmp_path: Path) -> None:
    port = free_port()
    c = Client(f"http://127.0.0.1:{port}", api_key=KEY, state_dir=tmp_path, delivery=FAST,
               background=False)
    try:
        assert c.record("browser", BROWSERS[0]).status == "held"
        c.opt_out()
        assert c.counters().held == 0
        c.opt_in()
        with ScriptedCollector(specs(), port=port) as srv:
            assert c.refresh_metrics(5)
            assert c.flush(5)
            assert srv.accepted == []
        assert c.privacy_report().units == ()
    finally:
        c.close(0)


# -- 2. record never raises for data ----------------------------------------------------------


BAD = [("browser", BROWSERS[0].upper()), ("browser", "lynx"), ("browser", 3),
       ("browser", None), ("dark_mode", "yes"), ("dark_mode", 0.5),
       ("session_minutes", math.nan), ("session_minutes", math.inf),
       ("session_minutes", "12"), ("session_minutes", True), ("session_minutes", [1])]


def test_bad_values_are_refused_counted_and_logged_once_without_the_value(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    c = Client("http://127.0.0.1:9", api_key=KEY, state_dir=tmp_path, metrics=specs(),
               background=False)
    try:
        with caplog.at_level(logging.WARNING, logger="client_sdk"):
            statuses = [c.record(m, v).status for m, v in BAD]
        assert statuses == ["invalid_value"] * len(BAD)
        counters = c.counters()
        assert (counters.refused, counters.queued) == ({"invalid_value": len(BAD)}, 0)
        messages = [r.getMessage() for r in caplog.records]
        assert sorted(m.split(":")[0] for m in messages) == [
            "metric browser", "metric dark_mode", "metric session_minutes"]   # once each
        assert any("differs only in case" in m for m in messages)
        assert not any("lynx" in m or BROWSERS[0].upper() in m for m in messages)
        assert c.privacy_report().units == ()             # nothing charged
        assert c.record("browser", BROWSERS[0]).ok         # the metric still works
    finally:
        c.close(0)


def test_numbers_outside_the_bounds_are_clamped_and_counted(tmp_path: Path) -> None:
    """Values above hi (500, 1e300) are clamped to hi, below lo (-1, -7.5) to lo, and
    counted.  At epsilon 10 (the spec cap) a one-bit mean reports the clamped end's
    bit with probability 1 - 4.5e-5: over 20 values each side, at most 2 flipped bits
    per side fail with probability < 1e-10; a device that did not clamp (or used the
    middle of the range) reports 1 half the time and passes with probability < 2e-4."""
    high, low = [500, 1e300] * 10, [-1, -7.5] * 10
    wide = [{"name": f"n{i}", "kind": "numeric", "lo": 0, "hi": 120, "epsilon": 10.0,
             "mechanism": "one_bit_mean"} for i in range(len(high) + len(low))]
    c = Client("http://127.0.0.1:9", api_key=KEY, state_dir=tmp_path, metrics=wide,
               background=False, caps=PrivacyCaps(epsilon=10.0))
    try:
        for i, value in enumerate(high + low):
            assert c.record(f"n{i}", value).status == "queued"
        assert c.counters().clamped == len(high) + len(low)
        payloads = {row[2]: json.loads(row[6]) for row in spool_rows(tmp_path)}
        ones_high = sum(payloads[f"n{i}"] for i in range(len(high)))
        ones_low = sum(payloads[f"n{len(high) + i}"] for i in range(len(low)))
        assert ones_high >= len(high) - 2 and ones_low <= 2, (ones_high, ones_low)
    finally:
        c.close(0)


def test_strict_raises_value_error_naming_the_value(tmp_path: Path) -> None:
    c = Client("http://127.0.0.1:9", api_key=KEY, state_dir=tmp_path, metrics=specs(),
               background=False, strict=True)
    try:
        with pytest.raises(ValueError, match="lynx"):
            c.record("browser", "lynx")
        with pytest.raises(ValueError, match="61"):
            c.record("session_minutes", 61)
        assert c.counters().queued == 0
    finally:
        c.close(0)


# -- 3. a wrong key keeps the reports ---------------------------------------------------------


@pytest.mark.parametrize(("status", "code"), [(401, "invalid_key"), (403, "wrong_role")])
def test_wrong_key_keeps_reports_counts_logs_and_flush_fails(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, status: int, code: str) -> None:
    secret_key = "wrong-key-that-must-not-be-logged"
    with ScriptedCollector(specs()) as srv:
        srv.script.extend(problem(status, code) for _ in range(10_000))
        c = Client(srv.url, api_key=secret_key, state_dir=tmp_path, metrics=specs(),
                   delivery=FAST, background=False)
        try:
            assert c.record("browser", BROWSERS[0]).ok and c.record("dark_mode", True).ok
            with caplog.at_level(logging.INFO, logger="client_sdk"):
                started = time.monotonic()
                assert not c.flush(10)
                assert time.monotonic() - started < 5           # says so at once
            counters = c.counters()
            assert counters.config_errors["invalid_key"] >= 1
            assert (counters.dropped, counters.pending) == ({}, 2)
            assert len(spool_rows(tmp_path)) == 2                # kept
            errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
            assert len(errors) == 1
            assert srv.url in errors[0] and f"{status} {code}" in errors[0]
            assert not any(secret_key in r.getMessage() for r in caplog.records)
            assert len(c.privacy_report().units) == 2           # charged, and still owed
            srv.script.clear()                                   # the key works again
            assert c.flush(10)
            assert len(srv.accepted) == 2
            assert c.counters().pending == 0
        finally:
            c.close(0)


# -- 4. version, environment, default folder, https ------------------------------------------


def test_version_matches_the_distribution() -> None:
    from importlib.metadata import PackageNotFoundError, version

    assert client_sdk.__version__.count(".") >= 2
    with contextlib.suppress(PackageNotFoundError):   # a source tree without an install
        assert client_sdk.__version__ == version("ldp-telemetry")


def test_configuration_from_the_environment(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDP_COLLECTOR_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LDP_API_KEY", KEY)
    monkeypatch.setenv("LDP_STATE_DIR", str(tmp_path / "from-env"))
    c = Client(metrics=specs(), background=False)
    try:
        assert (c.url, c.state_dir) == ("http://127.0.0.1:9", tmp_path / "from-env")
        assert c.record("browser", BROWSERS[0]).ok
        assert len(spool_rows(tmp_path / "from-env")) == 1
    finally:
        c.close(0)
    monkeypatch.delenv("LDP_API_KEY")
    with pytest.raises(ConfigError, match="LDP_API_KEY"):
        Client(background=False)


def test_default_state_dir_is_the_platforms_per_user_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LDP_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    c = Client("http://127.0.0.1:9", api_key=KEY, metrics=specs(), background=False)
    try:
        assert c.state_dir == tmp_path / "xdg" / "ldp-telemetry" == default_state_dir()
        assert c.record("browser", BROWSERS[0]).ok
        assert (tmp_path / "xdg" / "ldp-telemetry" / "spool.sqlite3").exists()
    finally:
        c.close(0)


@pytest.mark.parametrize("url", ["http://collector.example", "http://10.1.2.3:8000",
                                 "ftp://collector.example", "collector.example"])
def test_plain_http_to_a_remote_host_is_refused(url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="collector url"):
        Client(url, api_key=KEY, state_dir=tmp_path, background=False)
    assert not (tmp_path / "spool.sqlite3").exists()


def test_https_loopback_and_allow_http_are_accepted(tmp_path: Path) -> None:
    for i, (url, extra) in enumerate([
            ("https://collector.example", {}), ("http://localhost:8000", {}),
            ("http://[::1]:8000", {}), ("http://collector.example", {"allow_http": True})]):
        c = Client(url, api_key=KEY, state_dir=tmp_path / str(i), background=False,
                   enabled=False, **extra)
        assert c.close(0)

