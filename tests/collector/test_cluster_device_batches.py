"""Device batches over many metrics, several at once, on a Redis Cluster.

A device's batch holds one report per metric; on a cluster each report is its own
script call on its slot's master.  Gathering all of them at once let three
concurrent batches of 120 metrics ask one master for more connections than
redis-py's pool holds (100 per node): every batch got 503 ``store_unavailable``.
The store now bounds the calls in flight (``CLUSTER_CALLS_IN_FLIGHT``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from collector.app import create_app
from collector.settings import Settings
from tests.support.asgi import asgi_client
from tests.support.reports import NOW, today
from tests.support.servers import ADMIN_KEY, INGEST_KEY, RedisClusterProcesses, auth
from tests.support.tokens import device_nonce, mint

pytestmark = pytest.mark.anyio

METRICS = 120
DEVICES = 6


def _device_batch(device: int, epoch: int) -> dict[str, list[Any]]:
    token = mint("day", epoch, nonce=device_nonce(device, "day", epoch))
    return {
        "metric": [f"flag{i}" for i in range(METRICS)],
        "version": [1] * METRICS,
        "epoch": [epoch] * METRICS,
        "report_id": [f"{device:016x}{i:016x}" for i in range(METRICS)],
        "token": [token] * METRICS,
        "payload": [(device + i) % 2 for i in range(METRICS)],
    }


async def test_concurrent_device_batches_over_many_metrics_are_all_counted(
    tmp_path: Path,
) -> None:
    cluster = RedisClusterProcesses.start(tmp_path / "cluster")
    try:
        settings = Settings(redis_cluster_nodes=cluster.nodes_env,
                            admin_keys=SecretStr(ADMIN_KEY), ingest_keys=SecretStr(INGEST_KEY),
                            rate_limit_per_second=0)
        epoch = today()
        async with asgi_client(create_app(settings, clock=lambda: NOW)) as client:
            for i in range(METRICS):
                spec = {"name": f"flag{i}", "kind": "boolean", "epsilon": 1.0,
                        "mechanism": "binary_rr"}
                r = await client.post("/v1/metrics", json=spec, headers=auth(ADMIN_KEY))
                assert r.status_code == 201, r.text
            answers = await asyncio.gather(*(
                client.post("/v1/reports", json=_device_batch(d, epoch),
                            headers=auth(INGEST_KEY))
                for d in range(DEVICES)))
            assert [a.status_code for a in answers] == [200] * DEVICES, answers[0].text
            assert [a.json()["accepted"] for a in answers] == [METRICS] * DEVICES
            # Sent again (a retry): every report is a duplicate, nothing counts twice.
            again = await client.post("/v1/reports", json=_device_batch(0, epoch),
                                      headers=auth(INGEST_KEY))
            assert again.status_code == 200 and again.json()["accepted"] == 0
    finally:
        cluster.stop()
