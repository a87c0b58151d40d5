"""The aggregator over Redis Cluster: three real masters on loopback.

Tallies of one metric are spread over shards that hash to different slots
(and so different masters); the aggregator must sum them all.  The check is
exact: the API's n and values equal the library's estimate of the simulated
tally vector.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np

from aggregator.estimate import estimate
from ldp_core.simulate import tallies
from tests.support.servers import ANALYST_KEY, RedisClusterProcesses, auth, start_uvicorn
from tests.support.tallies import register, write_tallies


def test_estimates_over_a_redis_cluster(tmp_path: Path) -> None:
    cluster = RedisClusterProcesses.start(tmp_path / "cluster")
    try:
        target = "cluster:" + cluster.nodes_env
        spec = register(
            target,
            {
                "name": "lang",
                "kind": "categorical",
                "domain": ["en", "de", "fr", "es", "it"],
                "epsilon": 1.5,
                "mechanism": "olh",
                "min_reports": 100,
            },
        )
        values = np.repeat(np.arange(5), [2000, 1000, 600, 300, 100])
        t1, n1 = tallies(spec.build(), values, seed=1)
        t2, n2 = tallies(spec.build(), values[:2000], seed=2)
        write_tallies(target, spec, {500: (t1.tolist(), n1), 501: (t2.tolist(), n2)})
        env = {
            "LDP_ENV": "dev",
            "LDP_REDIS_CLUSTER_NODES": cluster.nodes_env,
            "LDP_ANALYST_KEYS": ANALYST_KEY,
        }
        service = start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path)
        try:
            body = httpx.get(
                service.url + "/v1/estimates/lang",
                headers=auth(ANALYST_KEY),
                params={"series": "epoch"},
                timeout=20,
            ).json()
        finally:
            service.stop()
    finally:
        cluster.stop()
    assert body["n"] == n1 + n2 and [p["n"] for p in body["series"]] == [n1, n2]
    lib = estimate(spec.build(), (t1 + t2).tolist(), n1 + n2)
    got = [v["value"] for v in body["estimate"]["values"]]
    np.testing.assert_allclose(got, lib.value, rtol=1e-12)
