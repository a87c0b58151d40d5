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

import random
import time
from pathlib import Path

import pytest

from collector.redis_server import RedisServer
from tests.support.faults_load import BATCH, load_ledger, make_batches
from tests.support.faults_run import (
    account,
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


def test_redis_kill9_and_restart_from_aof_loses_no_acknowledged_report(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    assert fresh_redis.appendfsync == "always"
    epoch, seed, out = today(), 101, tmp_path / "gen"
    service = _collector(fresh_redis, tmp_path / "collector")
    proc = None
    kills = []
    try:
        register_browser(service.url)
        proc = spawn_generator(service.url, out, seed=seed, count=BATCHES, epoch=epoch)
        for threshold in (8, 22, 36):
            wait_for_acks(out, threshold, proc)
            wait_for_send(out)
            time.sleep(random.uniform(0.0, 0.03))  # somewhere inside a POST
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
    _check("redis-kill9", fresh_redis, out, seed, epoch, {
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
        for k, threshold in enumerate((8, 22, 36), start=1):
            wait_for_acks(out, threshold, proc)
            wait_for_send(out)
            time.sleep(random.uniform(0.0, 0.03))
            service.kill()  # SIGKILL while a batch is in flight
            service = _collector(fresh_redis, tmp_path / f"collector-{k}", port=port)
        assert proc.wait(240) == 0
    finally:
        if proc is not None:
            stop_process(proc)
        service.stop()
    ledger = load_ledger(out)
    _check("collector-kill9", fresh_redis, out, seed, epoch, {"collector_kills": 3})
    # At least one POST was cut off by a kill (no answer at all), and was retried.
    assert sum(ledger.failed_attempts.values()) >= 1
    assert sum(1 for a in ledger.attempts.values() if a > 1) >= 1


@pytest.fixture(autouse=True)
def _seeded() -> None:
    random.seed(8)
