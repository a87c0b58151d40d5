"""Redis Cluster (3 masters on loopback) under the loss of one master.

test_collector_cluster.py already proves that a cluster and a single node give
the same tallies, and that a master going away gives 503 and then recovers.
This file proves the finer promise for a hot metric spread over 16 shards:

- its counters really are spread over the masters (hash tags per shard);
- with one master killed (SIGKILL; the others run with
  ``cluster-require-full-coverage no``), batches that touch its slots get 503,
  the slots of the live masters keep counting, and every live shard holds
  exactly the distinct reports that belong to it (nothing lost, nothing twice,
  nothing half-applied inside a slot); the read side refuses (an error, never
  a partial tally);
- after the master restarts from its append-only file (``appendfsync
  always``) it holds every report acknowledged before the crash, and retrying
  the failed batches counts the rest exactly once: every report of every batch
  once, bucket by bucket. A retry may itself meet a 503 after storing some of
  its slots (a stale connection to the restarted master); the final retry then
  finds those as duplicates.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import SecretStr
from redis.cluster import ClusterNode, RedisCluster

from collector.app import create_app
from collector.settings import Settings
from collector.store import REDIS_ERRORS, Store
from ldp_core.metric import MetricSpec
from tests.support.asgi import asgi_client
from tests.support.faults_load import make_batches
from tests.support.reports import NOW, SPECS, today
from tests.support.servers import ADMIN_KEY, INGEST_KEY, RedisClusterProcesses, auth
from tests.support.tokens import spent

pytestmark = pytest.mark.anyio

SHARDS = 16
BATCHES = 20


def _cluster_client(port: int) -> RedisCluster:
    node = ClusterNode("127.0.0.1", port)  # type: ignore[no-untyped-call]
    return RedisCluster(startup_nodes=[node])


def _shard_of(token: str, secret: bytes, shards: int) -> int:
    return spent(token, secret, shards)[0]


@pytest.mark.slow
async def test_losing_one_master_fails_only_its_slots_and_retries_complete_the_counts(
    tmp_path: Path,
) -> None:
    cluster = RedisClusterProcesses.start(tmp_path / "cluster")
    try:
        for server in cluster.servers:
            with redis.Redis(port=server.port) as r:
                r.config_set("appendfsync", "always")
                r.config_set("cluster-require-full-coverage", "no")
        await _scenario(cluster)
    finally:
        cluster.stop()


async def _scenario(cluster: RedisClusterProcesses) -> None:
    epoch = today()
    batches = make_batches(seed=7, count=BATCHES, epoch=epoch)
    settings = Settings(redis_cluster_nodes=cluster.nodes_env, admin_keys=SecretStr(ADMIN_KEY),
                        ingest_keys=SecretStr(INGEST_KEY), shards=SHARDS, redis_timeout_seconds=1.0,
                        rate_limit_per_second=0)
    rc = _cluster_client(cluster.servers[0].port)
    try:
        def port_of(key: str) -> int:
            return int(rc.get_node_from_key(key).port)  # type: ignore[no-untyped-call]

        shard_port = {s: port_of(f"ldp:{{m:browser:1:{epoch}:{s}}}:t") for s in range(SHARDS)}
        busy = {port_of("ldp:{spec}:names"), port_of("ldp:{x:browser:1}:slots")}
    finally:
        rc.close()
    # The hot metric's counters live on every master.
    assert len(set(shard_port.values())) == 3, shard_port
    victims = [s for s in cluster.servers if s.port not in busy]
    assert victims, "the spec and index slots cover every master"  # 3 masters, 2 keys
    victim = victims[0]
    lost_shards = {s for s, p in shard_port.items() if p == victim.port}
    figures: dict[str, Any] = {"shards_per_master": dict(Counter(shard_port.values())),
                               "victim_shards": sorted(lost_shards)}
    async with asgi_client(create_app(settings, clock=lambda: NOW)) as client:
        r = await client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        assert r.status_code == 201
        first = 5
        for batch in batches[:first]:
            r = await client.post("/v1/reports", json=batch, headers=auth(INGEST_KEY))
            assert r.status_code == 200 and r.json()["accepted"] == 1000
        victim.kill()  # SIGKILL one master
        failed = []
        for i, batch in enumerate(batches[first:], start=first):
            r = await client.post("/v1/reports", json=batch, headers=auth(INGEST_KEY))
            assert r.status_code in (200, 503), r.text
            if r.status_code == 503:
                assert r.json()["code"] == "store_unavailable" and r.headers["Retry-After"]
                failed.append(i)
        figures["batches_503_while_down"] = len(failed)
        # Every batch of 1000 has reports on the lost shards: all of them fail ...
        assert failed == list(range(first, BATCHES))
        # ... while the live masters counted their part, exactly.
        with redis.Redis(port=cluster.servers[0].port if cluster.servers[0] is not victim
                         else cluster.servers[1].port) as any_live:
            rc2 = _cluster_client(any_live.connection_pool.connection_kwargs["port"])
        try:
            secret = rc2.get("ldp:{spec}:secret")
            assert isinstance(secret, bytes)
            expected: Counter[int] = Counter()
            for batch in batches:
                for token in batch["token"]:
                    expected[_shard_of(token, secret, SHARDS)] += 1
            live: dict[int, int] = {}
            for shard in range(SHARDS):
                if shard in lost_shards:
                    continue
                live[shard] = int(rc2.hget(f"ldp:{{m:browser:1:{epoch}:{shard}}}:t", "n") or 0)
        finally:
            rc2.close()
        assert live == {s: expected[s] for s in live}
        figures["live_shards_exact"] = f"{sum(live.values())} reports in {len(live)} shards"
        # The read side refuses rather than give a partial tally.
        store = Store.connect(cluster_nodes=settings.cluster_nodes(), shards=SHARDS)
        try:
            spec = MetricSpec.from_json({**SPECS["browser"], "version": 1})
            with pytest.raises(REDIS_ERRORS):
                await store.read_tallies(spec, [epoch])
        finally:
            await store.close()
        victim.restart()  # from its append-only file
        on_victim = sum(expected[s] for s in lost_shards)
        before_kill = sum(1 for batch in batches[:first] for t in batch["token"]
                          if _shard_of(t, secret, SHARDS) in lost_shards)

        def victim_count() -> int:
            # The victim owns these slots, so a plain connection reads them without MOVED;
            # until it has heard from the other masters it answers CLUSTERDOWN.
            keys = [f"ldp:{{m:browser:1:{epoch}:{s}}}:t" for s in lost_shards]
            with redis.Redis(port=victim.port) as direct:
                while True:
                    try:
                        return sum(int(direct.hget(key, "n") or 0) for key in keys)
                    except redis.exceptions.ClusterDownError:
                        assert time.monotonic() < deadline, "the restarted master stays down"
                        time.sleep(0.05)

        deadline = time.monotonic() + 60
        # The append-only file gave back every report acknowledged before the crash.
        assert victim_count() == before_kill
        retried: Counter[str] = Counter()
        for i in failed:
            while True:
                held = victim_count()
                r = await client.post("/v1/reports", json=batches[i], headers=auth(INGEST_KEY))
                gained = victim_count() - held
                if r.status_code == 200:
                    body = r.json()
                    # Acknowledged means stored: what this answer accepted is exactly what
                    # the victim gained, and the rest of the batch was already there.
                    assert body["accepted"] == gained and body["rejected"] == 0
                    assert body["accepted"] + body["duplicates"] == 1000
                    retried["accepted"] += body["accepted"]
                    retried["duplicates"] += body["duplicates"]
                    break
                # A 503 is not an acknowledgement, yet a retry that met a stale connection
                # to the restarted master may have stored some of its slots (each slot's
                # script is atomic, a batch across slots is not): the next retry of the
                # same batch finds those reports as duplicates, never counts them twice.
                assert r.status_code == 503 and time.monotonic() < deadline, r.text
                retried["stored_by_503"] += gained
                retried["503"] += 1
                await asyncio.sleep(0.25)
        in_retried = sum(1 for i in failed for t in batches[i]["token"]
                         if _shard_of(t, secret, SHARDS) in lost_shards)
        figures["retries"] = dict(retried)
        # The retries stored exactly the reports the lost master had not stored: no more, no less.
        assert retried["accepted"] + retried["stored_by_503"] == in_retried
    store = Store.connect(cluster_nodes=settings.cluster_nodes(), shards=SHARDS)
    try:
        stored = await store.get_metric("browser", 1)
        assert stored is not None
        vector, n = (await store.read_tallies(stored, [epoch]))[epoch]
    finally:
        await store.close()
    buckets = [0] * 4
    for batch in batches:
        for p in batch["payload"]:
            buckets[p] += 1
    figures.update({"counted": n, "expected": BATCHES * 1000, "reports_on_victim": on_victim})
    print("\ncluster master loss", figures)
    assert n == BATCHES * 1000 and vector == buckets
    random.seed(0)


async def test_a_redis_client_failure_inside_redis_py_is_classified_as_storage_down() -> None:
    """The redis-py failure this file met (a reconnecting cluster connection whose writer is
    gone raises AttributeError from inside redis-py) is answered 503, not 500; the same
    exception type raised by our own code stays an internal error."""
    from redis.asyncio.connection import Connection

    from ldp_server.redis_client import raised_in_redis_client

    conn = Connection(host="127.0.0.1", port=1)
    # A writer torn down under the connection: redis-py < 8.2 met it as ``None``, and
    # 8.2 checks for ``None`` itself, so an object without the stream's methods stands
    # in; either way the AttributeError's innermost frame is redis-py's.
    conn._writer = object()  # type: ignore[assignment]
    with pytest.raises(AttributeError) as inside:
        await conn._send_packed_command([b"PING\r\n"])
    assert raised_in_redis_client(inside.value)
    with pytest.raises(AttributeError) as ours:
        _ = None.writelines  # type: ignore[attr-defined]
    assert not raised_in_redis_client(ours.value)
