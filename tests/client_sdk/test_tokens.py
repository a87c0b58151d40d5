"""The SDK's token stock against the real collector (uvicorn, real Redis).

A report is never sent without a blind-signed token of its unit; offline,
reports wait in the spool; online, the SDK asks the issuer, spends one token
per report, and stocks the next epoch's token ahead of time.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from client_sdk import Client, Response, UrllibTransport
from client_sdk._store import Store, discard
from collector.tokens import V1_UNTIL, V2_SINCE
from ldp_core.tokens import unb64url
from ldp_server.redis_server import RedisServer
from tests.client_sdk.test_e2e import QUICK, register
from tests.support.sdk_fixtures import specs, spool_rows
from tests.support.servers import INGEST_KEY, ServiceProcess, start_collector
from tests.support.tokens import mint_v1

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


def stock(state_dir: Path) -> list[tuple[str, int]]:
    """(period, epoch) of the stock tokens, in order."""
    conn = sqlite3.connect(state_dir / "spool.sqlite3")
    try:
        return conn.execute("SELECT period, epoch FROM stock WHERE token IS NOT NULL"
                            " ORDER BY period, epoch").fetchall()
    finally:
        conn.close()


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
        assert c.record("dark_mode", True).ok
        assert not c.flush(0.3)
        rows = spool_rows(tmp_path)
        assert [row[5] for row in rows] == ["", ""]        # no token: never sent
        net.online = True
        assert c.flush(10)
        assert c.counters().sent == 2 and c.counters().duplicates == 0
        paths = [p for _, p, _ in net.log]
        first = paths.index("v1/reports")
        # (A token request that timed out under load is asked again, same body; the
        # first is answered 403 install_unregistered: the install registers once.)
        assert paths[0] == "v1/tokens/key" and set(paths[1:first]) == {
            "v1/tokens", "v1/installs/challenge", "v1/installs"}
        assert len({b for _, p, b in net.log[1:first] if p == "v1/tokens"}) == 1
        asked = json.loads(net.log[1][2] or b"{}")["units"]
        epoch = int(clock.t // DAY)
        # One token per epoch for both metrics, and the next two epochs' ahead.
        assert [(u["period"], u["epoch"]) for u in asked] == [
            ("day", epoch), ("day", epoch + 1), ("day", epoch + 2)]
        batch = json.loads(gzip.decompress(net.log[first][2] or b""))
        assert sorted(batch["metric"]) == ["browser", "dark_mode"]
        assert len(set(batch["token"])) == 1
        # What the issuer saw shares nothing with what the collector got.
        nonce = unb64url(batch["token"][0])[:32]
        for u in asked:
            assert nonce not in unb64url(u["blinded"])
        # Next day, offline again: the stocked token goes with the report, no issuer call.
        net.online, clock.t = False, clock.t + DAY
        assert c.record("browser", "zebrafox-7f3a").ok
        c.flush(0)
        assert c._pipeline is not None
        c._pipeline.tokens.ready(1)                        # offline: assigns from stock
        (row,) = spool_rows(tmp_path)
        assert row[5] != "" and row[4] == epoch + 1
        # The past epoch's token is gone from the stock (no report can use it).
        assert stock(tmp_path) == [("day", epoch + 1), ("day", epoch + 2)]
        net.online = True
        before = len(net.log)
        assert c.flush(10) and c.counters().sent == 3
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
                if url.endswith("/v1/tokens") and answer.status == 200:  # signed, then lost
                    raise OSError("answer lost")
                return answer

        net.inner = LoseAnswer()  # type: ignore[assignment]
        assert c._pipeline is not None
        c._pipeline.tokens.ready(5)
        assert c._pipeline.tokens.failed
        net.inner = real
        assert c.flush(10) and c.counters().sent == 1 and c.counters().dropped == {}
        # 403 install_unregistered (the install registers), signed but lost, signed again.
        unregistered, first, second = (json.loads(b or b"{}")["units"] for _, p, b in net.log
                                       if p == "v1/tokens")
        assert unregistered == first == second             # the same blinded messages
    finally:
        c.close(0)


def test_reports_spooled_by_the_previous_sdk_go_out_with_new_tokens(tmp_path: Path) -> None:
    """Schema 2 spool rows held HMAC tokens that the collector refuses: after the
    upgrade they wait for a blind-signed token like any new report, and count."""
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
        DROP TABLE spool; ALTER TABLE spool2 RENAME TO spool; DROP TABLE stock;
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


@pytest.fixture(scope="module")
def switched(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    """A collector that has just replaced a version-1 one (metrics registered before its
    first start, Redis database 1): today's epochs take version-1 tokens only."""
    url = redis_server.url.rsplit("/", 1)[0] + "/1"
    with redis.Redis.from_url(url) as r:
        r.flushdb()
    logs = tmp_path_factory.mktemp("switched")
    with start_collector(url, log_dir=logs) as svc:
        register(svc.url, specs())
    with redis.Redis.from_url(url) as r:
        r.delete(V2_SINCE, V1_UNTIL)   # as the version-1 deployment left it
    with start_collector(url, log_dir=logs) as svc:
        yield svc


def test_a_schema_3_spool_keeps_its_version_1_tokens_and_drops_the_rest_counted(
    switched: ServiceProcess, tmp_path: Path
) -> None:
    """The upgrade from per-metric tokens: a row that holds a version-1 token is sent
    with it; a row still waiting would need its epoch's version-2 token, which the
    issuer refuses in an epoch open at the switch (``epoch_v1_only``: a second token
    of that epoch would be a second report of a metric): it is dropped, counted under
    that code, and its epsilon given back; the old stock and requests are dropped."""
    net, clock = Switch(), Clock()
    first = Client(switched.url, api_key=INGEST_KEY, state_dir=tmp_path, metrics=specs(),
                   transport=net, delivery=QUICK, background=False, clock=clock)
    assert first.record("browser", "zebrafox-7f3a").ok
    assert first.record("dark_mode", True).ok
    first.close(0)
    epoch = int(clock.t // DAY)
    conn = sqlite3.connect(tmp_path / "spool.sqlite3")  # as schema 3 left it
    conn.execute("UPDATE spool SET token = ? WHERE metric = 'browser'",
                 (mint_v1("browser", 1, epoch),))
    conn.commit()
    conn.executescript("""
        CREATE TABLE spool2 AS SELECT seq, report_id, metric, version, epoch, token, payload,
            charge, size, lease_until, lease_pid, install FROM spool;
        DROP TABLE spool; ALTER TABLE spool2 RENAME TO spool; DROP TABLE stock;
        CREATE TABLE tokens (install TEXT NOT NULL, metric TEXT NOT NULL,
            version INTEGER NOT NULL, epoch INTEGER NOT NULL, nonce TEXT NOT NULL,
            blinded TEXT NOT NULL, inv TEXT NOT NULL, token TEXT,
            PRIMARY KEY (install, metric, version, epoch, nonce)) WITHOUT ROWID;
        PRAGMA user_version = 3;""")
    conn.execute("INSERT INTO tokens VALUES ('i', 'page', 1, ?, 'n', 'b', 'x', 'old')", (epoch,))
    conn.commit()
    conn.close()
    net.online = True
    c = Client(switched.url, api_key=INGEST_KEY, state_dir=tmp_path, metrics=specs(),
               transport=net, delivery=QUICK, background=False, clock=clock)
    try:
        assert c.flush(10), c.counters()
        assert c.counters().sent == 1 and c.counters().duplicates == 0, c.counters()
        assert c.counters().dropped == {"epoch_v1_only": 1}
        assert spool_rows(tmp_path) == [] and stock(tmp_path) == []
        asked = [json.loads(b or b"{}")["units"] for _, p, b in net.log if p == "v1/tokens"]
        assert [(u["period"], u["epoch"]) for u in asked[0]] == [
            ("day", epoch), ("day", epoch + 1), ("day", epoch + 2)]
        spent = {u.metric: u.spent for u in c.privacy_report().units}
        assert spent["dark_mode"] == 0.0 and spent["browser"] > 0, spent
    finally:
        c.close(0)


def test_a_second_report_of_a_metric_in_an_epoch_is_dropped_before_it_leaves(
    collector: ServiceProcess, tmp_path: Path
) -> None:
    """The token goes on one report per metric version of its epoch (a second one would
    be a duplicate at the collector): with a budget of two reports, the second is
    dropped as ``token_limit`` before it leaves, and its epsilon is refunded; after it
    was dropped, the metric's use of the token is still taken (the first was sent)."""
    net, clock = Switch(), Clock()
    net.online = True
    c = Client(collector.url, api_key=INGEST_KEY, state_dir=tmp_path, metrics=specs(),
               transport=net, delivery=QUICK, background=False, clock=clock,
               budgets={"browser": 2.0})
    try:
        assert c.record("browser", "zebrafox-7f3a").ok and c.record("browser", "zebrafox-7f3a").ok
        assert c.record("dark_mode", True).ok
        assert c.flush(10)
        assert c.counters().sent == 2 and c.counters().dropped == {"token_limit": 1}
        assert c.counters().duplicates == 0
        spent = {u.metric: u.reports for u in c.privacy_report().units}
        assert spent == {"browser": 1, "dark_mode": 1}
    finally:
        c.close(0)


def test_a_refund_returns_a_token_only_when_no_report_holds_it(tmp_path: Path) -> None:
    """A dropped report that never left gives back its metric's use of the token; the
    token itself goes back only if it was unused: no other report holds it (then only
    if the stock has none for its epoch)."""
    store = Store(tmp_path / "s.sqlite3", max_reports=100, max_bytes=10**6)
    try:
        with store.transaction() as conn:
            for metric, token in (("a", "t1"), ("b", "t1"), ("c", "t2")):
                conn.execute(
                    "INSERT INTO spool (report_id, metric, version, epoch, token, payload,"
                    " charge, install, period, size) VALUES (?, ?, 1, 5, ?, '0', 1.0, 'i',"
                    " ?, 150)", (metric * 32, metric, token, "day" if token == "t1" else "hour"))
        with store.transaction() as conn:
            assert discard(conn, "metric = 'a'", ()) == 1
        assert store.query("SELECT COUNT(*) FROM stock") == [(0,)]    # b still holds t1
        with store.transaction() as conn:
            conn.execute("INSERT INTO stock VALUES ('i', 'day', 6, 'n', 'b', 'x', 't3', 'd:1,e:1')")
            for metric in "de":
                conn.execute(
                    "INSERT INTO spool (report_id, metric, version, epoch, token, payload,"
                    " charge, install, period, size) VALUES (?, ?, 1, 6, 't3', '0', 1.0, 'i',"
                    " 'day', 150)", (metric * 32, metric))
        with store.transaction() as conn:
            assert discard(conn, "metric = 'd'", ()) == 1
        assert store.query("SELECT given FROM stock WHERE epoch = 6") == [("e:1",)]
        with store.transaction() as conn:
            conn.execute("DELETE FROM stock WHERE epoch = 6")
        with store.transaction() as conn:
            assert discard(conn, "metric IN ('b', 'c')", ()) == 2
        assert store.query("SELECT period, epoch, token FROM stock ORDER BY token") == [
            ("day", 5, "t1"), ("hour", 5, "t2")]
    finally:
        store.close()
