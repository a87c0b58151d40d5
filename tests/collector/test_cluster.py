"""A Redis Cluster of 3 masters on loopback: same reports in, same tallies out as one node."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from collector.app import create_app
from collector.settings import Settings
from collector.store import Store
from ldp_core.metric import MetricSpec
from ldp_core.wire import Envelope, encode_batch
from tests.support.asgi import asgi_client
from tests.support.reports import NOW, SPECS, envelope, today
from tests.support.servers import ADMIN_KEY, INGEST_KEY, RedisClusterProcesses, auth

pytestmark = pytest.mark.anyio


@pytest.fixture()
def cluster_nodes(redis_cluster: RedisClusterProcesses) -> Iterator[str]:
    for server in redis_cluster.servers:
        with redis.Redis(port=server.port) as client:
            client.flushall()
    yield redis_cluster.nodes_env


def workload() -> list[list[Envelope]]:
    """Batches over three mechanisms and two epochs, with retries and token reuse."""
    rng = random.Random(11)
    epoch = today()
    page = MetricSpec.from_json(SPECS["page"]).build()
    olh = MetricSpec.from_json(SPECS["country"]).build()
    envs: list[Envelope] = []
    for device in range(600):
        e = epoch - device % 2
        envs.append(envelope("browser", 1, e, rng.randrange(4), device=device))
        envs.append(
            envelope(
                "page", 1, e, page.encode(page.randomize(rng.randrange(20), rng=rng)), device=device
            )
        )
        envs.append(
            envelope(
                "country",
                1,
                e,
                olh.encode(olh.randomize(rng.randrange(50), rng=rng)),
                device=device,
            )
        )
    envs += envs[:50]  # retries
    envs += [envelope("browser", 1, epoch, 0, device=d) for d in range(0, 40, 2)]  # token reuse
    rng.shuffle(envs)
    return [envs[i : i + 500] for i in range(0, len(envs), 500)]


async def run(settings: Settings) -> tuple[list[tuple[int, int, int]], dict[str, object]]:
    counts = []
    async with asgi_client(create_app(settings, clock=lambda: NOW)) as client:
        for body in SPECS.values():
            assert (
                await client.post("/v1/metrics", json=body, headers=auth(ADMIN_KEY))
            ).status_code == 201
        for batch in workload():
            r = await client.post("/v1/reports", json=encode_batch(batch), headers=auth(INGEST_KEY))
            assert r.status_code == 200, r.text
            b = r.json()
            counts.append((b["accepted"], b["duplicates"], b["rejected"]))
        assert (await client.get("/readyz")).json() == {"ready": True}
        listed = (await client.get("/v1/metrics", headers=auth(INGEST_KEY))).json()["metrics"]
        assert sorted(m["name"] for m in listed) == sorted(SPECS)
    if settings.redis_cluster_nodes:
        store = Store.connect(cluster_nodes=settings.cluster_nodes())
    else:
        store = Store.connect(settings.redis_url)
    try:
        out: dict[str, object] = {}
        for name in ("browser", "page", "country"):
            spec = await store.get_metric(name)
            assert spec is not None
            out[name] = await store.read_tallies(spec, await store.epochs_with_data(spec))
        return counts, out
    finally:
        await store.close()


async def test_cluster_and_single_node_agree(cluster_nodes: str, redis_url: str) -> None:
    common = {"env": "dev", "admin_keys": ADMIN_KEY, "ingest_keys": INGEST_KEY}
    single = await run(Settings(redis_url=redis_url, **common))  # type: ignore[arg-type]
    cluster = await run(
        Settings(redis_cluster_nodes=cluster_nodes, **common)  # type: ignore[arg-type]
    )
    assert single == cluster
    counts, tallies = cluster
    assert sum(c[0] for c in counts) == 1800
    assert sum(n for t in tallies.values() for _, n in t.values()) == 1800  # type: ignore[attr-defined]
    # 50 retries and 20 token reuses; which copy of a device's report wins depends on the
    # shuffled order, so a retry can surface as token_reused rather than duplicate.
    assert sum(c[1] + c[2] for c in counts) == 70
    assert sum(c[1] for c in counts) >= 30
    # The tallies really are spread over the masters (hash tags pick different slots).
    host_ports = [tuple(n.split(":")) for n in cluster_nodes.split(",")]
    rc = RedisCluster(startup_nodes=[ClusterNode(h, int(p)) for h, p in host_ports])
    try:
        per_node = []
        for node in rc.get_primaries():
            with redis.Redis(host=node.host, port=node.port) as one:
                per_node.append(sum(1 for _ in one.scan_iter(match="ldp:{m:*}:t")))
        assert sum(per_node) == 3 * 2 * 4  # metrics x epochs x shards
        assert sum(1 for n in per_node if n > 0) >= 2
    finally:
        rc.close()


async def test_a_master_going_away_gives_503_then_recovers(tmp_path: Path) -> None:
    """A cluster of its own (the session cluster stays intact): stop one master, restart it."""
    cluster = RedisClusterProcesses.start(tmp_path / "cluster")
    try:
        settings = Settings(redis_cluster_nodes=cluster.nodes_env, admin_keys=ADMIN_KEY,
                            ingest_keys=INGEST_KEY, redis_timeout_seconds=1.0)
        envs = [envelope("browser", 1, today(), i % 4) for i in range(200)]
        body = encode_batch(envs)
        async with asgi_client(create_app(settings)) as client:
            r = await client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
            assert r.status_code == 201
            r = await client.post("/v1/reports", json=body, headers=auth(INGEST_KEY))
            assert r.json()["accepted"] == 200
            # Every batch adds to the read index of its metric: stop the master of that slot.
            rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", cluster.servers[0].port)])
            try:
                port = rc.get_node_from_key("ldp:{x:browser:1}:slots").port
            finally:
                rc.close()
            victim = next(s for s in cluster.servers if s.port == port)
            victim.stop()
            r = await client.post("/v1/reports", json=body, headers=auth(INGEST_KEY))
            assert r.status_code == 503 and r.headers["Retry-After"] == "1"
            assert (await client.get("/readyz")).status_code == 503
            victim.restart()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                r = await client.post("/v1/reports", json=body, headers=auth(INGEST_KEY))
                if r.status_code == 200:
                    break
                await asyncio.sleep(0.25)
            assert r.status_code == 200
            assert r.json()["duplicates"] == 200  # nothing counted twice across the outage
    finally:
        cluster.stop()


async def test_a_master_without_the_script_still_counts_every_report_once(
    cluster_nodes: str,
) -> None:
    """A promoted replica or a SCRIPT FLUSH leaves a master without the ingest script:
    its calls in the master's pipeline answer NOSCRIPT, are loaded and sent again."""
    settings = Settings(redis_cluster_nodes=cluster_nodes, admin_keys=ADMIN_KEY,  # type: ignore[arg-type]
                        ingest_keys=INGEST_KEY)  # type: ignore[arg-type]
    names = ("browser", "dark_mode")
    envs = [envelope(name, 1, today(), i % (4 if name == "browser" else 2), device=i)
            for i in range(300) for name in names]
    async with asgi_client(create_app(settings, clock=lambda: NOW)) as client:
        for name in names:
            r = await client.post("/v1/metrics", json=SPECS[name], headers=auth(ADMIN_KEY))
            assert r.status_code == 201, r.text
        for node in cluster_nodes.split(","):
            host, port = node.split(":")
            with redis.Redis(host=host, port=int(port)) as one:
                one.script_flush()
        r = await client.post("/v1/reports", json=encode_batch(envs), headers=auth(INGEST_KEY))
        assert r.status_code == 200, r.text
        assert r.json()["accepted"] == 600
        r = await client.post("/v1/reports", json=encode_batch(envs), headers=auth(INGEST_KEY))
        assert r.json()["duplicates"] == 600
    store = Store.connect(cluster_nodes=settings.cluster_nodes())
    try:
        for name in names:
            spec = await store.get_metric(name)
            assert spec is not None
            tallies = await store.read_tallies(spec, [today()])
            assert sum(n for _, n in tallies.values()) == 300
    finally:
        await store.close()
