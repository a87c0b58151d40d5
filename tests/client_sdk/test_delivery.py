"""SDK delivery against a scripted collector (real HTTP on 127.0.0.1, scripted answers).

Batching, gzip, Retry-After, backoff, final 4xx, per-report results, 413
splitting, offline then online, the spec cache.  The end-to-end tests against
the real collector are in test_sdk_e2e.py.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client, DeliveryConfig, Fleet, HoldConfig, Response, UrllibTransport
from client_sdk._store import Store, discard
from ldp_core.wire import decode_batch
from ldp_server.redis_server import free_port
from tests.support.sdk_children import FixedClock
from tests.support.sdk_fixtures import CaptureTransport, many_metrics, specs, spool_rows
from tests.support.sdk_http import Reply, ScriptedCollector, problem

KEY = "ingest-key-for-tests"
FAST = DeliveryConfig(interval=60.0, batch_size=100, backoff_base=0.05, backoff_max=0.2,
                      retry_after_max=5.0, request_timeout=2.0)


@pytest.fixture()
def server() -> Iterator[ScriptedCollector]:
    with ScriptedCollector(specs() + many_metrics(40)) as srv:
        yield srv


def client(srv: ScriptedCollector, state: Path, **kw: Any) -> Client:
    kw.setdefault("delivery", FAST)
    kw.setdefault("metrics", srv.metrics)
    return Client(srv.url, api_key=KEY, state_dir=state, **kw)


def record_many(c: Client, n: int) -> None:
    for i in range(n):
        assert c.record(f"m{i}", "b").ok


def test_batch_sent_after_n_reports_gzip_columnar(server: ScriptedCollector,
                                                  tmp_path: Path) -> None:
    c = client(server, tmp_path, delivery=DeliveryConfig(batch_size=5, interval=60.0))
    try:
        record_many(c, 4)
        time.sleep(0.3)
        assert server.posts() == []                       # 4 < N and T not reached
        record_many_from = c.record("m4", "a")
        assert record_many_from.ok
        (post,) = server.wait_posts(1, timeout=5)
        assert post.headers["content-encoding"] == "gzip"
        assert post.headers["authorization"] == f"Bearer {KEY}"
        assert post.headers["content-type"] == "application/json"
        envelopes = decode_batch(json.loads(post.body))
        assert sorted(e.metric for e in envelopes) == [f"m{i}" for i in range(5)]
        assert len({e.report_id for e in envelopes}) == 5
        assert all(len(e.report_id) == 32 and int(e.report_id, 16) >= 0 for e in envelopes)
    finally:
        c.close(2)
    assert c.counters().sent == 5


def test_batch_sent_after_t_seconds(server: ScriptedCollector, tmp_path: Path) -> None:
    c = client(server, tmp_path, delivery=DeliveryConfig(batch_size=100, interval=0.3))
    try:
        start = time.monotonic()
        record_many(c, 2)
        (post,) = server.wait_posts(1, timeout=5)
        assert post.at - start >= 0.25
        assert len(json.loads(post.body)["report_id"]) == 2
    finally:
        c.close(2)


def test_retry_after_is_honoured_on_429_and_503(server: ScriptedCollector,
                                                tmp_path: Path) -> None:
    server.script.append(Reply(429, {"Retry-After": "1"}, b"{}"))
    server.script.append(Reply(503, {"Retry-After": "1"}, b"{}"))
    c = client(server, tmp_path)
    try:
        record_many(c, 3)
        assert c.flush(10)
        first, second, third = server.wait_posts(3)
        # Backoff alone would retry within backoff_max = 0.2 s; Retry-After says 1 s.
        assert second.at - first.at >= 0.95
        assert third.at - second.at >= 0.95
        counters = c.counters()
        assert (counters.sent, counters.retries, counters.dropped) == (3, 2, {})
    finally:
        c.close(1)


def test_retry_after_is_clamped(server: ScriptedCollector, tmp_path: Path) -> None:
    server.script.append(Reply(429, {"Retry-After": "3600"}, b"{}"))
    cfg = DeliveryConfig(interval=60.0, retry_after_max=0.3, backoff_base=0.05)
    c = client(server, tmp_path, delivery=cfg)
    try:
        record_many(c, 1)
        assert c.flush(5)
        first, second = server.wait_posts(2)
        assert 0.25 <= second.at - first.at < 3.0
    finally:
        c.close(1)


def test_backoff_is_capped_exponential_with_full_jitter() -> None:
    cfg = DeliveryConfig(backoff_base=0.5, backoff_max=8.0)
    ceilings = [cfg.backoff_delay(a, lambda lo, hi: hi) for a in range(1, 8)]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert all(cfg.backoff_delay(a, lambda lo, hi: lo) == 0.0 for a in range(1, 8))
    assert cfg.retry_after_delay("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0   # in the past
    assert cfg.retry_after_delay("-5") is None


def test_5xx_and_408_are_retried(server: ScriptedCollector, tmp_path: Path) -> None:
    server.script.extend([Reply(500, {}, b"oops"), Reply(408, {}, b""), Reply(502, {}, b"")])
    c = client(server, tmp_path)
    try:
        record_many(c, 2)
        assert c.flush(10)
        assert len(server.wait_posts(4)) == 4
        assert (c.counters().sent, c.counters().retries) == (2, 3)
    finally:
        c.close(1)


# 401/403 (a wrong key) keep the reports: tests/client_sdk/test_first_run.py.
@pytest.mark.parametrize(("status", "code"), [(400, "batch_shape"),
                                              (415, "unsupported_encoding")])
def test_final_4xx_drops_and_counts_with_reason(server: ScriptedCollector, tmp_path: Path,
                                                status: int, code: str) -> None:
    server.script.append(problem(status, code))
    c = client(server, tmp_path)
    try:
        record_many(c, 3)
        assert c.flush(5)
        assert len(server.posts()) == 1                     # never retried
        counters = c.counters()
        assert counters.dropped == {code: 3}
        assert (counters.sent, counters.pending) == (0, 0)
        assert spool_rows(tmp_path) == []
    finally:
        c.close(1)


def test_4xx_without_problem_code_is_counted_by_status(server: ScriptedCollector,
                                                       tmp_path: Path) -> None:
    server.script.append(Reply(404, {}, b"not json"))
    c = client(server, tmp_path)
    try:
        record_many(c, 2)
        assert c.flush(5)
        assert c.counters().dropped == {"http_404": 2}
    finally:
        c.close(1)


def test_per_report_results_duplicates_count_as_delivered(server: ScriptedCollector,
                                                          tmp_path: Path) -> None:
    results = [{"status": "accepted", "code": None}, {"status": "duplicate", "code": None},
               {"status": "rejected", "code": "epoch_expired"}]
    body = json.dumps({"accepted": 1, "duplicates": 1, "rejected": 1, "results": results})
    server.script.append(Reply(200, {"Content-Type": "application/json"}, body.encode()))
    c = client(server, tmp_path)
    try:
        record_many(c, 3)
        assert c.flush(5)
        counters = c.counters()
        assert (counters.sent, counters.duplicates, counters.delivered) == (1, 1, 2)
        assert counters.dropped == {"epoch_expired": 1}
        assert spool_rows(tmp_path) == []
    finally:
        c.close(1)


def test_unreadable_200_is_retried_not_dropped(server: ScriptedCollector,
                                               tmp_path: Path) -> None:
    server.script.append(Reply(200, {}, b'{"results": []}'))      # wrong length
    c = client(server, tmp_path)
    try:
        record_many(c, 2)
        assert c.flush(5)
        assert len(server.posts()) == 2
        assert c.counters().sent == 2 and c.counters().dropped == {}
    finally:
        c.close(1)


def test_413_halves_the_batch_instead_of_dropping(server: ScriptedCollector,
                                                  tmp_path: Path) -> None:
    server.script.append(problem(413, "body_too_large"))
    c = client(server, tmp_path)
    try:
        record_many(c, 8)
        assert c.flush(5)
        sizes = [len(json.loads(p.body)["report_id"]) for p in server.posts()]
        assert sizes[:3] == [8, 4, 4]
        assert c.counters().sent == 8 and c.counters().dropped == {}
    finally:
        c.close(1)


def test_offline_then_online_loses_nothing(tmp_path: Path) -> None:
    port = free_port()
    metrics = specs() + many_metrics(20)
    c = Client(f"http://127.0.0.1:{port}", api_key=KEY, state_dir=tmp_path, metrics=metrics,
               delivery=DeliveryConfig(interval=0.05, backoff_base=0.05, backoff_max=0.2),
               transport=UrllibTransport(use_env_proxies=False))
    try:
        record_many(c, 20)
        assert not c.flush(0.5)                                 # nobody listens
        counters = c.counters()
        assert counters.retries >= 1 and counters.pending == 20 and counters.dropped == {}
        with ScriptedCollector(metrics, port=port) as srv:
            assert c.flush(10)
            assert len(srv.accepted) == 20
        assert c.counters().sent == 20
    finally:
        c.close(1)


def test_specs_are_cached_on_disk_for_offline_start(server: ScriptedCollector,
                                                    tmp_path: Path) -> None:
    c = Client(server.url, api_key=KEY, state_dir=tmp_path, delivery=FAST)
    assert c.refresh_metrics(5)
    c.close(1)
    server.stop()
    offline = Client(server.url, api_key=KEY, state_dir=tmp_path, delivery=FAST,
                     background=False)
    try:
        assert "browser" in {s.name for s in offline.metrics()}
        assert offline.record("browser", "zebrafox-7f3a").ok
        assert len(spool_rows(tmp_path)) == 1
    finally:
        offline.close(0)


def test_unknown_metric_is_a_result_and_triggers_a_fetch(tmp_path: Path) -> None:
    with ScriptedCollector([]) as srv:
        c = Client(srv.url, api_key=KEY, state_dir=tmp_path, delivery=FAST,
                   hold=HoldConfig(max_values=0))         # holding: test_first_run.py
        try:
            assert c.record("browser", "zebrafox-7f3a").status == "unknown_metric"
            srv.metrics = specs()
            assert c.refresh_metrics(5)
            assert c.record("browser", "zebrafox-7f3a").ok
            assert c.counters().refused == {"unknown_metric": 1}
        finally:
            c.close(1)


def test_value_outside_domain_raises_value_error_naming_it(server: ScriptedCollector,
                                                           tmp_path: Path) -> None:
    c = client(server, tmp_path, background=False, strict=True)
    try:
        with pytest.raises(ValueError, match="lynx"):
            c.record("browser", "lynx")
        with pytest.raises(ValueError, match="61"):
            c.record("session_minutes", 61)
        assert c.counters().queued == 0
    finally:
        c.close(0)


def test_background_false_sends_only_on_flush(server: ScriptedCollector,
                                              tmp_path: Path) -> None:
    c = client(server, tmp_path, background=False,
               delivery=DeliveryConfig(batch_size=1, interval=0.01))
    try:
        record_many(c, 3)
        time.sleep(0.2)
        assert server.posts() == []
        assert c.flush(5)
        assert len(server.accepted) == 3
    finally:
        c.close(0)


def test_spool_quota_drops_oldest_and_counts(tmp_path: Path) -> None:
    port = free_port()
    metrics = many_metrics(10)
    # A stopped clock: a midnight UTC during the test would free m9's unit below.
    c = Client(f"http://127.0.0.1:{port}", api_key=KEY, state_dir=tmp_path, metrics=metrics,
               background=False, delivery=DeliveryConfig(max_reports=4),
               clock=FixedClock(time.time()))
    try:
        record_many(c, 10)
        rows = spool_rows(tmp_path)
        assert [r[2] for r in rows] == ["m6", "m7", "m8", "m9"]     # the newest four
        assert c.counters().dropped == {"spool_full": 6}
        # The six dropped reports never left the device: their units are not spent.
        spent = {u.metric: (u.reports, u.spent) for u in c.privacy_report().units}
        assert all(spent[f"m{i}"] == (0, 0.0) for i in range(6)), spent
        assert all(spent[f"m{i}"] == (1, 1.0) for i in range(6, 10)), spent
        assert c.record("m0", "a").ok          # the unit is free again, this epoch
        assert not c.record("m9", "a").ok      # a kept report's unit is still spent
    finally:
        c.close(0)


def test_a_dropped_report_that_may_have_left_keeps_its_charge(tmp_path: Path) -> None:
    """Only never-leased reports give epsilon and token back (``_store.discard``)."""
    store = Store(tmp_path / "s.sqlite3", max_reports=100, max_bytes=10**6)
    try:
        with store.transaction() as conn:
            conn.execute("INSERT INTO budget VALUES ('m', 5, 3.0, 3)")
            for token in ("t-sent", "t-kept", ""):
                conn.execute(
                    "INSERT INTO spool (report_id, metric, version, epoch, token, payload,"
                    " charge, install, period, size, lease_pid) VALUES (?, 'm', 1, 5, ?, '0',"
                    " 1.0, 'i', 'day', 150, ?)",
                    (token or "r3", token, 4242 if token == "t-sent" else 0))
        with store.transaction() as conn:
            assert discard(conn, "metric = 'm'", ()) == 3
        assert store.query("SELECT spent, reports FROM budget") == [(1.0, 1)]
        assert store.query("SELECT token FROM stock") == [("t-kept",)]
        assert store.query("SELECT COUNT(*) FROM spool") == [(0,)]
    finally:
        store.close()


def test_fleet_with_injected_transport(tmp_path: Path) -> None:
    transport = CaptureTransport()
    # A stopped clock: a midnight UTC during the test would give a device two tokens.
    fleet = Fleet("http://127.0.0.1:1", api_key=KEY, transport=transport, metrics=specs(),
                  background=False, clock=FixedClock(time.time()))
    devices = [fleet.device() for _ in range(250)]
    for d in devices:
        assert d.record("browser", "quokkachrome-91c2").ok
        assert d.record("page", "p3").ok
    assert devices[0].record("page", "p4").status == "over_budget"
    assert fleet.flush(10)
    assert [len(b["report_id"]) for b in transport.batches] == [500]
    # Every device its own token, shared by its two metrics of the epoch.
    batch = transport.batches[0]
    assert len(set(batch["token"])) == 250
    by_token: dict[str, list[str]] = {}
    for metric, token in zip(batch["metric"], batch["token"], strict=True):
        by_token.setdefault(token, []).append(metric)
    assert all(sorted(m) == ["browser", "page"] for m in by_token.values())
    assert fleet.counters().sent == 500
    fleet.close(0)


def test_urllib_transport_contract(server: ScriptedCollector) -> None:
    t = UrllibTransport(use_env_proxies=False)
    assert t.send("GET", f"{server.url}/nope", {}, None, 5).status == 404
    server.script.append(Reply(503, {"Retry-After": "7"}, b"down"))
    answer = t.send("POST", f"{server.url}/v1/reports", {}, b"{}", 5)
    assert (answer.status, answer.header("Retry-After"), answer.body) == (503, "7", b"down")
    server.script.append(Reply(302, {"Location": "http://127.0.0.1:9/elsewhere"}, b""))
    assert t.send("POST", f"{server.url}/v1/reports", {}, b"{}", 5).status == 302  # not followed
    with pytest.raises(OSError):
        t.send("GET", f"http://127.0.0.1:{free_port()}/v1/metrics", {}, None, 2)
    with pytest.raises(ValueError, match="http"):
        t.send("GET", "file:///etc/passwd", {}, None, 2)


class BrokenTransport:
    """A transport that fails in every way a buggy network stack might."""

    def __init__(self) -> None:
        self.calls = 0

    def send(self, method: str, url: str, headers: Any, body: bytes | None,
             timeout: float) -> Response:
        self.calls += 1
        raise [RuntimeError("boom"), TimeoutError(), ConnectionResetError()][self.calls % 3]


def test_transport_failures_never_reach_the_app(tmp_path: Path) -> None:
    transport = BrokenTransport()
    c = Client("http://127.0.0.1:9", api_key=KEY, state_dir=tmp_path, metrics=many_metrics(5),
               transport=transport,
               delivery=DeliveryConfig(interval=0.01, backoff_base=0.01, backoff_max=0.05))
    try:
        record_many(c, 5)
        assert not c.refresh_metrics(1)
        assert not c.flush(0.5)
        assert transport.calls >= 3
        counters = c.counters()
        assert counters.retries >= 2 and counters.pending == 5 and counters.dropped == {}
    finally:
        assert not c.close(0.2)
    assert len(spool_rows(tmp_path)) == 5


def test_reports_whose_spool_write_fails_give_their_units_back(tmp_path: Path) -> None:
    """durability "batch": the ledger charges at record, the spool is written later.  A
    spool write that fails (here a real sqlite trigger refusing inserts, as a full disk
    would) leaves nothing to send, so the charges go back; the units record again."""
    c = Client("http://127.0.0.1:1", api_key=KEY, state_dir=tmp_path, metrics=many_metrics(3),
               background=False, delivery=DeliveryConfig(durability="batch"))
    try:
        conn = sqlite3.connect(tmp_path / "spool.sqlite3")
        conn.execute("CREATE TRIGGER full BEFORE INSERT ON spool"
                     " BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
        conn.commit()
        record_many(c, 3)
        assert {u.metric: u.reports for u in c.privacy_report().units} == {
            "m0": 1, "m1": 1, "m2": 1}
        c.flush(0)                                  # the buffered rows are written: refused
        assert c.counters().dropped == {"storage_error": 3}
        assert spool_rows(tmp_path) == []
        spent = {u.metric: (u.reports, u.spent) for u in c.privacy_report().units}
        assert spent == {f"m{i}": (0, 0.0) for i in range(3)}, spent
        conn.execute("DROP TRIGGER full")
        conn.commit()
        conn.close()
        record_many(c, 3)                           # the units are free again
        c.flush(0)
        assert len(spool_rows(tmp_path)) == 3
    finally:
        c.close(0)
