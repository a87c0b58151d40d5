"""The SDK's token stock against the real collector (uvicorn, real Redis).

A report is never sent without a blind-signed token of its unit; offline,
reports wait in the spool; online, the SDK asks the issuer, spends one token
per report, and stocks the next epoch's token ahead of time.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from client_sdk import Client, Response, UrllibTransport
from ldp_core.tokens import unb64url
from ldp_server.redis_server import RedisServer
from tests.client_sdk.test_e2e import QUICK, register
from tests.support.sdk_fixtures import specs, spool_rows
from tests.support.servers import INGEST_KEY, ServiceProcess, start_collector

DAY = 86400.0


@pytest.fixture(scope="module")
def collector(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()
    with start_collector(redis_server.url, log_dir=tmp_path_factory.mktemp("logs")) as svc:
        register(svc.url, specs())
        yield svc


class Switch:
    """A transport that is offline until switched on; logs every request it sends."""

    def __init__(self) -> None:
        self.online = False
        self.inner = UrllibTransport(use_env_proxies=False)
        self.log: list[tuple[str, str, bytes | None]] = []

    def send(self, method: str, url: str, headers: Any, body: bytes | None,
             timeout: float) -> Response:
        if not self.online:
            raise OSError("offline")
        self.log.append((method, url.split("/", 3)[-1], body))
        return self.inner.send(method, url, headers, body, timeout)


class Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def test_offline_reports_wait_for_tokens_then_go_and_the_next_epoch_is_stocked(
    collector: ServiceProcess, tmp_path: Path
) -> None:
    net, clock = Switch(), Clock()
    c = Client(collector.url, api_key=INGEST_KEY, state_dir=tmp_path, metrics=specs(),
               transport=net, delivery=QUICK, background=False, clock=clock)
    try:
        assert c.record("browser", "zebrafox-7f3a").ok
        assert not c.flush(0.3)
        (row,) = spool_rows(tmp_path)
        assert row[5] == ""                                # no token: never sent
        net.online = True
        assert c.flush(10)
        assert c.counters().sent == 1
        paths = [p for _, p, _ in net.log]
        assert paths[:3] == ["v1/tokens/key", "v1/tokens", "v1/reports"]
        asked = json.loads(net.log[1][2] or b"{}")["units"]
        epoch = int(clock.t // DAY)
        assert [(u["metric"], u["epoch"]) for u in asked] == [("browser", epoch),
                                                              ("browser", epoch + 1)]
        # What the issuer saw shares nothing with what the collector got.
        sent = json.loads(gzip.decompress(net.log[2][2] or b""))["token"][0]
        nonce = unb64url(sent)[:32]
        for u in asked:
            assert nonce not in unb64url(u["blinded"])
        # Next day, offline again: the stocked token goes with the report, no issuer call.
        net.online, clock.t = False, clock.t + DAY
        assert c.record("browser", "zebrafox-7f3a").ok
        c.flush(0)
        c._pipeline.tokens.ready(1)                        # offline: assigns from stock
        (row,) = spool_rows(tmp_path)
        assert row[5] != "" and row[4] == epoch + 1
        net.online = True
        before = len(net.log)
        assert c.flush(10) and c.counters().sent == 2
        assert [p for _, p, _ in net.log[before:]][:1] == ["v1/reports"]
        assert "v1/tokens" not in [p for _, p, _ in net.log[before:before + 1]]
    finally:
        c.close(0)


def test_a_token_is_spent_once_even_when_its_answer_is_lost(
    collector: ServiceProcess, tmp_path: Path
) -> None:
    """The issuer's answer lost: asked again with the same blinded message, signed again."""
    net, clock = Switch(), Clock()
    net.online = True
    c = Client(collector.url, api_key=INGEST_KEY, state_dir=tmp_path, metrics=specs(),
               transport=net, delivery=QUICK, background=False, clock=clock)
    try:
        assert c.record("theme", "zebrafox-7f3a").ok
        c.flush(0)
        real = net.inner

        class LoseAnswer:
            def send(self, method: str, url: str, headers: Any, body: bytes | None,
                     timeout: float) -> Response:
                answer = real.send(method, url, headers, body, timeout)
                if url.endswith("/v1/tokens"):
                    raise OSError("answer lost")
                return answer

        net.inner = LoseAnswer()  # type: ignore[assignment]
        c._pipeline.tokens.ready(5)
        assert c._pipeline.tokens.failed
        net.inner = real
        assert c.flush(10) and c.counters().sent == 1 and c.counters().dropped == {}
        first, second = (json.loads(b or b"{}")["units"] for _, p, b in net.log
                         if p == "v1/tokens")
        assert first == second                             # the same blinded messages
    finally:
        c.close(0)


def test_reports_spooled_by_the_previous_sdk_go_out_with_new_tokens(tmp_path: Path) -> None:
    """Schema 2 spool rows held HMAC tokens that the collector refuses: after the
    upgrade they wait for a blind-signed token like any new report, and count."""
    import sqlite3

    from tests.support.sdk_http import ScriptedCollector

    first = Client("http://127.0.0.1:9", api_key=INGEST_KEY, state_dir=tmp_path,
                   metrics=specs(), background=False)
    assert first.record("browser", "zebrafox-7f3a").ok
    first.close(0)
    conn = sqlite3.connect(tmp_path / "spool.sqlite3")  # as schema 2 left it
    conn.executescript("""
        UPDATE spool SET token = printf('%064d', 7);
        CREATE TABLE spool2 AS SELECT seq, report_id, metric, version, epoch, token, payload,
            charge, size, lease_until, lease_pid FROM spool;
        DROP TABLE spool; ALTER TABLE spool2 RENAME TO spool; DROP TABLE tokens;
        PRAGMA user_version = 2;""")
    conn.close()
    with ScriptedCollector(specs()) as srv:
        c = Client(srv.url, api_key=INGEST_KEY, state_dir=tmp_path, metrics=specs(),
                   background=False, delivery=QUICK)
        try:
            assert c.flush(10) and c.counters().sent == 1
            (batch,) = [json.loads(gzip.decompress(p.body) if p.body[:2] == b"\x1f\x8b"
                                   else p.body) for p in srv.posts()]
            assert len(unb64url(batch["token"][0])) == 32 + 128  # a real token now
        finally:
            c.close(0)


def test_a_unit_the_issuer_refuses_for_good_is_dropped_and_given_back(
    collector: ServiceProcess, tmp_path: Path
) -> None:
    """A report recorded 30 days ago (offline ever since) gets ``epoch_expired`` from the
    issuer: it is dropped, counted, and its epsilon is not left charged (it never left)."""
    net, clock = Switch(), Clock()
    clock.t -= 30 * DAY
    c = Client(collector.url, api_key=INGEST_KEY, state_dir=tmp_path, metrics=specs(),
               transport=net, delivery=QUICK, background=False, clock=clock)
    try:
        assert c.record("theme", "zebrafox-7f3a").ok
        (unit,) = c.privacy_report().units
        assert unit.reports == 1 and 0.99 < unit.spent <= 1.0   # epsilon_actual
        net.online = True
        c.flush(5)
        assert c.counters().dropped == {"epoch_expired": 1} and spool_rows(tmp_path) == []
        (unit,) = c.privacy_report().units
        assert (unit.reports, unit.spent) == (0, 0.0)
        assert "v1/reports" not in [p for _, p, _ in net.log]
    finally:
        c.close(0)
