"""The SDK end to end: the real collector (uvicorn on a free loopback port), real Redis.

Faults are real: the collector process killed and restarted, Redis killed and
restarted, a rate limit that answers 429 with Retry-After, a sender killed -9.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from client_sdk import Client, DeliveryConfig, Fleet, UrllibTransport
from ldp_server.redis_server import RedisServer
from tests.support.sdk_children import FixedClock
from tests.support.sdk_fixtures import many_metrics, specs, spool_rows
from tests.support.servers import (
    ADMIN_KEY,
    INGEST_KEY,
    REPO_ROOT,
    ServiceProcess,
    auth,
    start_collector,
)

DAY = 86400.0
QUICK = DeliveryConfig(
    interval=0.05, backoff_base=0.05, backoff_max=0.3, retry_after_max=2.0, request_timeout=5.0
)
NO_PROXY = UrllibTransport(use_env_proxies=False)


def register(url: str, bodies: list[dict[str, Any]]) -> None:
    for body in bodies:
        request = urllib.request.Request(  # noqa: S310 (loopback)
            f"{url}/v1/metrics",
            data=json.dumps(body).encode(),
            method="POST",
            headers={**auth(ADMIN_KEY), "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            assert answer.status in (200, 201)


ALL_SPECS = specs() + many_metrics(40)


@pytest.fixture(scope="module")
def collector(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()
    with start_collector(redis_server.url, log_dir=tmp_path_factory.mktemp("logs")) as svc:
        register(svc.url, ALL_SPECS)
        yield svc


def client(url: str, state: Path, **kw: Any) -> Client:
    kw.setdefault("delivery", QUICK)
    return Client(url, api_key=INGEST_KEY, state_dir=state, transport=NO_PROXY, **kw)


def test_specs_fetched_every_kind_delivered(collector: ServiceProcess, tmp_path: Path) -> None:
    c = client(collector.url, tmp_path)
    try:
        assert c.refresh_metrics(5)
        assert {s.name for s in c.metrics()} >= {"browser", "theme", "page", "session_minutes"}
        for name, value in [
            ("browser", "zebrafox-7f3a"),
            ("session_minutes", 12.5),
            ("dark_mode", True),
            ("theme", "narwhalsafari-5be0"),
            ("page", "p9"),
        ]:
            assert c.record(name, value).ok, name
        assert c.flush(10)
        counters = c.counters()
        assert (counters.sent, counters.duplicates, counters.dropped) == (5, 0, {})
    finally:
        c.close(2)


def test_resend_after_a_crash_counts_once(collector: ServiceProcess, tmp_path: Path) -> None:
    """A crash after the collector stored a batch but before the spool forgot it."""
    first, crashed = tmp_path / "a", tmp_path / "b"
    c = client(collector.url, first, metrics=ALL_SPECS, background=False)
    for i in range(12):
        assert c.record(f"m{i}", "c").ok
    c.flush(0)                    # spooled...
    c._pipeline.tokens.ready(10)  # ...the reports got their tokens, then the crash
    c.close(0)
    shutil.copytree(first, crashed)  # the disk as it was at the crash
    again = client(collector.url, first, background=False)
    assert again.flush(10) and again.counters().sent == 12
    again.close(0)
    replay = client(collector.url, crashed, background=False)
    try:
        assert replay.flush(10)
        counters = replay.counters()
        assert (counters.sent, counters.duplicates, counters.dropped) == (0, 12, {})
        assert spool_rows(crashed) == []
    finally:
        replay.close(0)


CHILD = textwrap.dedent("""
    import sys, time
    from client_sdk import Client, DeliveryConfig
    c = Client(sys.argv[1], api_key=sys.argv[3], state_dir=sys.argv[2], background=False)
    assert c.refresh_metrics(5)
    for i in range(20):
        assert c.record(f"m{i}", "a").ok
    print("recorded", flush=True)
    time.sleep(60)
""")


def test_kill9_then_restart_delivers_exactly_once(
    collector: ServiceProcess, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, collector.url, str(tmp_path), INGEST_KEY],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO_ROOT,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "recorded"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    c = client(collector.url, tmp_path, background=False)
    try:
        assert c.flush(10)
        assert (c.counters().sent, c.counters().duplicates) == (20, 0)
    finally:
        c.close(0)
    again = client(collector.url, tmp_path, background=False)
    assert again.flush(5) and again.counters().sent == 0  # nothing left to re-send
    again.close(0)


def test_collector_rejections_are_counted_by_code(
    collector: ServiceProcess, tmp_path: Path
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    now = FixedClock(time.time())  # both copies' reports in one epoch, whatever the hour
    a = client(collector.url, one, metrics=ALL_SPECS, background=False, clock=now)
    b = client(collector.url, two, metrics=ALL_SPECS, background=False, clock=now)
    future = client(
        collector.url,
        tmp_path / "f",
        metrics=ALL_SPECS,
        background=False,
        clock=lambda: time.time() + 30 * DAY,
    )
    try:
        shutil.copy(one / "device_secret", two / "device_secret")  # the same device twice
        b.close(0)
        b = client(collector.url, two, background=False, clock=now)
        assert a.record("m30", "a").ok and b.record("m30", "b").ok
        assert a.flush(10) and b.flush(10)
        # The issuer gave this install's token for the unit to the first copy already.
        assert b.counters().dropped == {"token_limit": 1}
        assert future.record("m31", "a").ok and future.flush(10)
        assert future.counters().dropped == {"epoch_in_future": 1}
    finally:
        for x in (a, b, future):
            x.close(0)


def test_wrong_key_keeps_reports_and_is_counted(collector: ServiceProcess,
                                                tmp_path: Path) -> None:
    c = Client(
        collector.url,
        api_key="not-a-key",
        state_dir=tmp_path,
        metrics=ALL_SPECS,
        transport=NO_PROXY,
        background=False,
    )
    try:
        assert not c.refresh_metrics(5)
        assert c.record("m0", "a").ok and c.record("m1", "a").ok
        assert not c.flush(10)
        counters = c.counters()
        assert (counters.dropped, counters.pending) == ({}, 2)
        assert counters.config_errors["invalid_key"] >= 2   # the GET and the POST
    finally:
        c.close(0)


def test_fleet_of_devices(collector: ServiceProcess) -> None:
    fleet = Fleet(collector.url, api_key=INGEST_KEY, transport=NO_PROXY, background=False)
    assert fleet.refresh_metrics(5)
    devices = [fleet.device() for _ in range(600)]
    for d in devices:
        assert d.record("browser", "quokkachrome-91c2").ok
        assert d.record("page", "p1").ok
    assert fleet.flush(30)
    counters = fleet.counters()
    assert (counters.sent, counters.dropped, counters.batches) == (1200, {}, 2)
    fleet.close(0)


def test_collector_killed_then_restarted(redis_server: RedisServer, tmp_path: Path) -> None:
    svc = start_collector(redis_server.url, log_dir=tmp_path / "logs")
    port = svc.port
    try:
        register(svc.url, ALL_SPECS)
        c = client(svc.url, tmp_path / "state")
        assert c.refresh_metrics(5)
        svc.kill()  # a crash: nobody listens
        for i in range(10):
            assert c.record(f"m{i}", "b").ok
        assert not c.flush(0.5)
        assert c.counters().retries >= 1 and c.counters().pending == 10
        svc = start_collector(redis_server.url, log_dir=tmp_path / "logs", port=port)
        assert c.flush(15)
        assert (c.counters().sent, c.counters().dropped) == (10, {})
        c.close(1)
    finally:
        svc.stop()


def test_redis_down_503_retry_after_then_delivered(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    with start_collector(fresh_redis.url, log_dir=tmp_path / "logs") as svc:
        register(svc.url, ALL_SPECS)
        c = client(svc.url, tmp_path / "state", metrics=ALL_SPECS)
        try:
            fresh_redis.kill()
            for i in range(5):
                assert c.record(f"m{i}", "a").ok
            assert not c.flush(1.5)
            assert c.counters().retries >= 1 and c.counters().dropped == {}
            fresh_redis.restart()
            assert c.flush(20)
            assert c.counters().sent == 5
        finally:
            c.close(1)


def test_rate_limit_429_honoured(redis_server: RedisServer, tmp_path: Path) -> None:
    # Burst 3: each device also registers its install (one more request, two for the first).
    extra = {"LDP_RATE_LIMIT_PER_SECOND": "2", "LDP_RATE_LIMIT_BURST": "3"}
    with start_collector(redis_server.url, log_dir=tmp_path / "logs", extra_env=extra) as svc:
        register(svc.url, ALL_SPECS[:1])
        fleet = Fleet(
            svc.url,
            api_key=INGEST_KEY,
            transport=NO_PROXY,
            background=False,
            metrics=ALL_SPECS,
            delivery=DeliveryConfig(
                batch_size=10, durability="batch", retry_after_max=2.0, backoff_base=0.05
            ),
        )
        # Each device registers and asks the issuer for its own token: 24 requests, then
        # several small batches in a row, all under 2 requests per second.
        fleet._pipeline._send_limit = 3
        for _ in range(12):
            assert fleet.device().record("browser", "zebrafox-7f3a").ok
        assert fleet.flush(30)
        counters = fleet.counters()
        assert counters.sent == 12 and counters.dropped == {}
        assert counters.retries >= 1  # the collector did say 429
        fleet.close(0)
