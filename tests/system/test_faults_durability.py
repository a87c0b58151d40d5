"""Jepsen-style durability: every acknowledged report is counted exactly once after real faults.

A generator process (tests.support.faults_load) sends pre-encoded batches of
1000 reports to a uvicorn collector over real HTTP and retries each batch,
byte for byte, until it is answered 200; it logs every acknowledgement.  While
it runs, the test kills Redis (SIGKILL, restart from its append-only file,
``appendfsync always``) or the collector (SIGKILL in the middle of a POST,
restart on the same port).  Afterwards Redis must hold exactly the
acknowledged reports: count = distinct acknowledged report ids, bucket by
bucket, so 0 lost and 0 double-counted.  50,000 reports per fault, 100,000 in
all; the figures go to test-artifacts/faults-*.json.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from ldp_server.redis_server import RedisServer
from tests.support.faults_load import BATCH, load_ledger, make_batches
from tests.support.faults_run import (
    account,
    kill_on_evalsha,
    register_browser,
    spawn_generator,
    stop_process,
    wait_for_acks,
    wait_for_send,
    write_figures,
)
from tests.support.reports import today
from tests.support.servers import ServiceProcess, start_collector

BATCHES = 50  # x 1000 reports per fault run
COLLECTOR_ENV = {"LDP_REDIS_TIMEOUT_SECONDS": "1"}


def _collector(redis: RedisServer, log_dir: Path, port: int | None = None) -> ServiceProcess:
    return start_collector(redis.url, log_dir=log_dir, extra_env=COLLECTOR_ENV, port=port)


def _check(name: str, redis: RedisServer, out: Path, seed: int, epoch: int,
           extra: dict[str, object]) -> None:
    batches = make_batches(seed, BATCHES, epoch)
    ledger = load_ledger(out)
    assert sorted(ledger.statuses) == list(range(BATCHES)), "a batch was never acknowledged"
    acc = account(redis.url, ledger, batches, epoch)
    write_figures(name, {"accounting": acc, **extra})
    assert acc.rejected == 0
    assert acc.acknowledged == acc.acknowledged_distinct == BATCHES * BATCH
    assert (acc.lost, acc.double_counted) == (0, 0)
    assert acc.counted == BATCHES * BATCH
    assert acc.buckets_counted == acc.buckets_expected
    # Every report was answered accepted or duplicate exactly once in the final answers;
    # duplicates only where an earlier attempt of the batch had failed.
    assert acc.final_accepted + acc.final_duplicates == BATCHES * BATCH
    first_try = [i for i, a in ledger.attempts.items() if a == 1]
    assert all("d" not in ledger.statuses[i] for i in first_try)


@pytest.mark.parametrize("appendfsync", ["always", "everysec"])
def test_redis_kill9_and_restart_from_aof_loses_no_acknowledged_report(
    appendfsync: str, tmp_path: Path
) -> None:
    """With ``always`` nothing acknowledged may be lost even by a machine crash.  With
    ``everysec`` the test shows the weaker promise docs/collector.md states: a crash of the Redis
    process alone (the kernel survives and keeps its page cache) loses nothing either,
    because Redis writes the file before it replies; only fsync is deferred."""
    redis_server = RedisServer.start(tmp_path / "redis", appendfsync=appendfsync)
    try:
        _redis_kills(redis_server, tmp_path, f"redis-kill9-{appendfsync}")
    finally:
        redis_server.stop()


def _redis_kills(fresh_redis: RedisServer, tmp_path: Path, name: str) -> None:
    epoch, seed, out = today(), 101, tmp_path / "gen"
    service = _collector(fresh_redis, tmp_path / "collector")
    proc = None
    kills = []
    try:
        register_browser(service.url)
        proc = spawn_generator(service.url, out, seed=seed, count=BATCHES, epoch=epoch)
        for k, threshold in enumerate((6, 16, 26, 36)):
            wait_for_acks(out, threshold, proc)
            if k % 2:  # right after Redis ran an ingest script, before its answer arrives
                assert kill_on_evalsha(fresh_redis.port, fresh_redis.kill)
            else:  # at a random moment inside a POST
                wait_for_send(out)
                time.sleep(random.uniform(0.0, 0.05))
                fresh_redis.kill()
            kills.append(threshold)
            time.sleep(0.5)
            fresh_redis.restart()  # replays appendonlydir
        assert proc.wait(240) == 0
    finally:
        if proc is not None:
            stop_process(proc)
        service.stop()
    ledger = load_ledger(out)
    _check(name, fresh_redis, out, seed, epoch, {
        "redis_kills": len(kills),
        "batches_retried": sum(1 for a in ledger.attempts.values() if a > 1),
    })
    assert sum(ledger.failed_attempts.values()) >= 1  # the faults really hit the load
    log = service.log()
    assert '"event":"redis_unavailable"' in log and '"event":"redis_recovered"' in log


def test_collector_kill9_mid_batch_and_restart_counts_each_report_once(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    epoch, seed, out = today(), 202, tmp_path / "gen"
    service = _collector(fresh_redis, tmp_path / "collector-0")
    port = service.port
    proc = None
    try:
        register_browser(service.url)
        proc = spawn_generator(service.url, out, seed=seed, count=BATCHES, epoch=epoch)
        for k, threshold in enumerate((6, 16, 26, 36), start=1):
            wait_for_acks(out, threshold, proc)
            if k % 2:  # SIGKILL right after Redis applied a batch, before the answer
                assert kill_on_evalsha(fresh_redis.port, service.kill)
            else:  # SIGKILL at a random moment while a batch is in flight
                wait_for_send(out)
                time.sleep(random.uniform(0.0, 0.05))
                service.kill()
            service = _collector(fresh_redis, tmp_path / f"collector-{k}", port=port)
        assert proc.wait(240) == 0
    finally:
        if proc is not None:
            stop_process(proc)
        service.stop()
    ledger = load_ledger(out)
    _check("collector-kill9", fresh_redis, out, seed, epoch, {"collector_kills": 4})
    # At least one POST was cut off by a kill (no answer at all), and was retried.
    assert sum(ledger.failed_attempts.values()) >= 1
    assert sum(1 for a in ledger.attempts.values() if a > 1) >= 1


@pytest.fixture(autouse=True)
def _seeded() -> None:
    random.seed(8)


def test_redis_frozen_longer_than_the_timeout_counts_late_writes_once(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    """SIGSTOP Redis for 3 s (the collector's Redis timeout is 1 s) right after it received
    an ingest script: the collector answers 503, the generator retries, and when Redis
    resumes it runs the scripts it had queued, after the 503.  Those late writes must
    surface as duplicates of the retries, never as a second count."""
    epoch, seed, out = today(), 404, tmp_path / "gen"
    service = _collector(fresh_redis, tmp_path / "collector")
    proc = None
    try:
        register_browser(service.url)
        proc = spawn_generator(service.url, out, seed=seed, count=BATCHES, epoch=epoch)
        for threshold in (10, 30):
            wait_for_acks(out, threshold, proc)
            assert kill_on_evalsha(
                fresh_redis.port, lambda: os.kill(fresh_redis.pid, signal.SIGSTOP))
            try:
                time.sleep(3)
            finally:
                os.kill(fresh_redis.pid, signal.SIGCONT)
        assert proc.wait(240) == 0
    finally:
        if proc is not None:
            os.kill(fresh_redis.pid, signal.SIGCONT)
            stop_process(proc)
        service.stop()
    ledger = load_ledger(out)
    _check("redis-sigstop", fresh_redis, out, seed, epoch, {"redis_freezes": 2})
    assert ledger.failed_attempts["503"] >= 2
