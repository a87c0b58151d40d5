"""A Redis failover (a replica promoted) under load: what is lost, and nothing twice.

A master with one replica (both ``appendfsync always``), the collector on the
master, the load generator retrying every batch until it is answered 200.
Mid-run the master is killed (SIGKILL, right after it ran an ingest script),
the replica is promoted (REPLICAOF NO ONE) and the collector restarted on it.

Replication is asynchronous, so reports that the master acknowledged but had
not yet streamed to the replica are lost: the test measures exactly which (an
acknowledged report is on the replica iff its spent-token entry is: the
6-byte rest of its token digest in its bucket, written by the same script
effects as its counters) and states the
number.  Nothing may be double-counted, and the final count must equal the
distinct acknowledged reports minus exactly those lost.
"""

from __future__ import annotations

import time
from pathlib import Path

import redis

from ldp_server.redis_server import RedisServer
from tests.support.faults_load import load_ledger, make_batches
from tests.support.faults_run import (
    account,
    kill_on_evalsha,
    register_browser,
    spawn_generator,
    stop_process,
    wait_for_acks,
    write_figures,
)
from tests.support.reports import today
from tests.support.servers import start_collector
from tests.support.tokens import is_spent, spent

BATCHES = 20


def _missing_on(replica: RedisServer, reports: list[tuple[str, str]], epoch: int,
                shards: int = 4) -> list[str]:
    """The report ids of (report_id, token) pairs whose spent-token entry the replica lacks."""
    with redis.Redis(port=replica.port) as r:
        secret = r.get("ldp:{spec}:secret")
        assert isinstance(secret, bytes)
        pipe = r.pipeline(transaction=False)
        wanted = []
        for _, token in reports:
            shard, bucket, rest = spent(token, secret, shards)
            wanted.append(rest)
            pipe.hget(f"ldp:{{m:browser:1:{epoch}:{shard}}}:d", bucket)
        found = pipe.execute()
    return [rid for (rid, _), want, got in zip(reports, wanted, found, strict=True)
            if not is_spent(got, want)]


def test_failover_to_a_replica_loses_at_most_the_unreplicated_and_counts_nothing_twice(
    tmp_path: Path,
) -> None:
    epoch, seed, out = today(), 303, tmp_path / "gen"
    master = RedisServer.start(tmp_path / "master", appendfsync="always")
    replica = RedisServer.start(tmp_path / "replica", appendfsync="always",
                                extra=("--replicaof", "127.0.0.1", str(master.port)))
    service = start_collector(master.url, log_dir=tmp_path / "c0",
                              extra_env={"LDP_REDIS_TIMEOUT_SECONDS": "1"})
    port = service.port
    proc = None
    try:
        deadline = time.monotonic() + 20
        with redis.Redis(port=replica.port) as r:
            while r.info("replication").get("master_link_status") != "up":
                assert time.monotonic() < deadline, "the replica never synced"
                time.sleep(0.05)
        register_browser(service.url)
        proc = spawn_generator(service.url, out, seed=seed, count=BATCHES, epoch=epoch)
        wait_for_acks(out, 8, proc)
        assert kill_on_evalsha(master.port, master.kill)
        acked_at_failover = load_ledger(out)
        with redis.Redis(port=replica.port) as r:
            r.execute_command("REPLICAOF", "NO", "ONE")
        batches = make_batches(seed, BATCHES, epoch)
        acked = [(rid, tok) for i, letters in acked_at_failover.statuses.items()
                 for rid, tok, s in zip(batches[i]["report_id"], batches[i]["token"], letters,
                                        strict=True) if s in "ad"]
        lost = _missing_on(replica, acked, epoch)
        service.kill()
        service = start_collector(replica.url, log_dir=tmp_path / "c1", port=port,
                                  extra_env={"LDP_REDIS_TIMEOUT_SECONDS": "1"})
        assert proc.wait(240) == 0
    finally:
        if proc is not None:
            stop_process(proc)
        service.stop()
        master.stop()
    try:
        ledger = load_ledger(out)
        acc = account(replica.url, ledger, make_batches(seed, BATCHES, epoch), epoch)
    finally:
        replica.stop()
    write_figures("redis-failover", {
        "accounting": acc,
        "acknowledged_before_failover": sum(len(s) for s in acked_at_failover.statuses.values()),
        "lost_in_failover": len(lost),
    })
    assert sorted(ledger.statuses) == list(range(BATCHES))
    assert acc.double_counted == 0
    assert acc.lost == len(lost)  # exactly the unreplicated acknowledged reports, no more
    assert acc.counted == BATCHES * 1000 - len(lost)
