"""SDK devices (a subprocess, durable sqlite spool) against a real collector under faults.

1. The collector is frozen (SIGSTOP) for 60 s while the devices keep recording:
   their requests time out, they back off and keep spooling; after SIGCONT
   the collector also works off the requests its kernel queued meanwhile
   (stored, but nobody waits for the answer), and the devices deliver the rest.
2. The device process is killed (SIGKILL) after the collector stored one of its
   batches but before the answer reached it (a loopback proxy holds that answer:
   tests/support/holding_proxy.py); a new process over the same state folder
   delivers the spool, and the held batch comes back as duplicates.

Either way: every report a device recorded is acknowledged exactly once (one
"accepted" or "duplicate" answer per report id, never more), and Redis counts
exactly the distinct acknowledged ids: 0 lost, 0 double-counted.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ldp_server.redis_server import RedisServer
from tests.support.faults_run import (
    account_ids,
    register_browser,
    spawn_ready,
    stop_process,
    write_figures,
)
from tests.support.holding_proxy import HoldingProxy
from tests.support.servers import INGEST_KEY, ServiceProcess, start_collector


@pytest.fixture()
def collector(fresh_redis: RedisServer, tmp_path: Path) -> Iterator[ServiceProcess]:
    service = start_collector(fresh_redis.url, log_dir=tmp_path / "collector")
    try:
        register_browser(service.url)
        yield service
    finally:
        if service.alive():
            os.kill(service.pid, signal.SIGCONT)
        service.stop()


def _spawn(url: str, state: Path, log: Path, stop: Path, rate: float) -> subprocess.Popen[str]:
    return spawn_ready("tests.support.faults_sdk_child", url, state, log, stop, rate, INGEST_KEY)


def _log_rows(*logs: Path) -> list[dict[str, Any]]:
    rows = []
    for log in logs:
        if log.exists():
            rows += [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    return rows


def _acks(rows: list[dict[str, Any]]) -> Counter[str]:
    """report id -> number of accepted/duplicate answers it got."""
    acks: Counter[str] = Counter()
    for row in rows:
        if row.get("status") == 200:
            for rid, s in zip(row["ids"], row["results"], strict=True):
                if s in "ad":
                    acks[rid] += 1
    return acks


def _spool_ids(state: Path) -> list[str]:
    conn = sqlite3.connect(state / "fleet-spool.sqlite3")
    try:
        return [r[0] for r in conn.execute("SELECT report_id FROM spool")]
    finally:
        conn.close()


@pytest.mark.slow
def test_collector_frozen_60s_devices_keep_recording_and_deliver_exactly_once(
    collector: ServiceProcess, fresh_redis: RedisServer, tmp_path: Path
) -> None:
    state, log, stop = tmp_path / "device", tmp_path / "sends.jsonl", tmp_path / "stop"
    proc = _spawn(collector.url, state, log, stop, rate=100)
    try:
        time.sleep(4)
        before = len(_acks(_log_rows(log)))
        assert before > 0  # delivering while the collector is up
        os.kill(collector.pid, signal.SIGSTOP)
        try:
            time.sleep(60)
            during = len(_acks(_log_rows(log)))
            spooled = len(_spool_ids(state))
        finally:
            os.kill(collector.pid, signal.SIGCONT)
        time.sleep(6)
        stop.touch()
        out, _ = proc.communicate(timeout=150)
    finally:
        stop_process(proc)
    summary = json.loads(out.strip().splitlines()[-1])
    rows = _log_rows(log)
    acks = _acks(rows)
    sent_ids = {rid for row in rows for rid in row["ids"]}
    acc = account_ids(fresh_redis.url, "browser", set(acks))
    answers = Counter("".join(r.get("results", "") for r in rows))
    figures = {
        "recorded": summary["recorded"],
        "spooled_while_frozen": spooled,
        "acknowledged_before_freeze": before,
        "acknowledged_while_frozen": during - before,
        "attempts": len(rows),
        "attempt_errors": dict(Counter(r.get("error") or r["status"] for r in rows
                                       if r.get("status") != 200)),
        "answers": dict(answers),
        "sdk_counters": summary["counters"],
        **acc,
    }
    write_figures("sdk-frozen-collector", figures)
    assert summary["flushed"]
    assert spooled > 3000  # ~60 s of recording waited in the spool
    assert during - before <= 1000  # at most the one answer in flight at SIGSTOP
    assert len(acks) == summary["recorded"] == len(sent_ids)
    assert max(acks.values()) == 1  # each report acknowledged exactly once
    assert (acc["lost"], acc["double_counted"]) == (0, 0)
    assert acc["counted"] == summary["recorded"]
    counters = summary["counters"]
    assert counters["sent"] + counters["duplicates"] == summary["recorded"]
    assert counters["pending"] == 0 and counters["dropped"] == {}
    assert _spool_ids(state) == []


def test_device_killed_after_its_batch_was_stored_delivers_exactly_once(
    collector: ServiceProcess, fresh_redis: RedisServer, tmp_path: Path
) -> None:
    state, stop = tmp_path / "device", tmp_path / "stop"
    logs = [tmp_path / "sends-1.jsonl", tmp_path / "sends-2.jsonl"]
    # The device talks to the collector through a proxy that, once armed, keeps the
    # next answer to a batch from it: the batch is stored, the device never hears so.
    with HoldingProxy(collector.port) as proxy:
        proc = _spawn(proxy.url, state, logs[0], stop, rate=400)
        try:
            time.sleep(1.0)
            proxy.arm()
            assert proxy.held.wait(30), "no batch was answered within 30 s"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        finally:
            stop_process(proc)
    assert proc.returncode == -signal.SIGKILL
    acked_before = set(_acks(_log_rows(logs[0])))
    spooled = set(_spool_ids(state))
    assert spooled
    # The held batch is stored but unacknowledged, so still spooled.  (Had an answer
    # come through before the kill but the spool delete not, those reports would be
    # acknowledged AND spooled: they go again and must come back as duplicates.)
    acked_and_spooled = spooled & acked_before
    stop.touch()  # the new process records nothing: it only delivers the spool
    again = _spawn(collector.url, state, logs[1], stop, rate=400)
    try:
        out, _ = again.communicate(timeout=60)
    finally:
        stop_process(again)
    summary = json.loads(out.strip().splitlines()[-1])
    rows = _log_rows(*logs)
    acks = _acks(rows)
    acc = account_ids(fresh_redis.url, "browser", set(acks))
    late = Counter("".join(r.get("results", "") for r in _log_rows(logs[1])))
    write_figures("sdk-device-kill9", {
        "acknowledged_before_kill": len(acked_before),
        "spooled_at_kill": len(spooled),
        "acknowledged_but_still_spooled": len(acked_and_spooled),
        "answers_after_restart": dict(late),
        "sdk_counters_after_restart": summary["counters"],
        **acc,
    })
    assert summary["flushed"]
    assert set(acks) == acked_before | spooled  # everything recorded, delivered
    assert {rid for rid, n in acks.items() if n > 1} <= acked_and_spooled
    assert late["d"] >= 1  # the held batch, stored before the kill, came back as duplicates
    assert (acc["lost"], acc["double_counted"]) == (0, 0)
    assert _spool_ids(state) == []
    r = httpx.get(collector.url + "/readyz", timeout=5)
    assert r.status_code == 200
