"""Write simulated tallies into a real Redis through the store's write API.

``ldp_core.simulate.tallies`` gives the summed tally vector t of n reports; it
is split back into n reports whose counters sum exactly to t (each counter i
goes to t_i distinct reports, round robin), and the reports are ingested with
``collector.store.Store.ingest`` -- the collector's own atomic Lua path, so
the key schema stays known to the store alone.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from typing import Any

from collector.store import Store, ValidReport
from ldp_core.metric import MetricSpec

__all__ = ["register", "reports_for", "stored_counters", "write_tallies"]

BATCH = 1000


def reports_for(t: Sequence[int], n: int) -> list[tuple[int, ...]]:
    """n counter tuples whose counts sum to t (needs every t_i <= n)."""
    per: list[list[int]] = [[] for _ in range(n)]
    offset = 0
    for i, count in enumerate(int(c) for c in t):
        if count > n:
            raise ValueError(f"counter {i} holds {count} > n = {n}")
        for k in range(count):
            per[(offset + k) % n].append(i)
        offset = (offset + count) % n
    return [tuple(p) for p in per]


def _connect(url: str) -> Store:
    """A store for a redis:// URL, or for "cluster:host:port,host:port" (Redis Cluster).

    Test data sits in fixed, often long past epochs: its counters are kept for a
    century, not the production retention (they would expire as they are written).
    """
    if url.startswith("cluster:"):
        nodes = []
        for item in url.removeprefix("cluster:").split(","):
            host, _, port = item.rpartition(":")
            nodes.append((host, int(port)))
        store = Store.connect(cluster_nodes=nodes)
    else:
        store = Store.connect(url)
    store.tally_retention_seconds = 100 * 365 * 86400
    return store


async def _register(url: str, spec_json: dict[str, Any]) -> MetricSpec:
    store = _connect(url)
    try:
        spec, _ = await store.create_metric(MetricSpec.from_json(spec_json))
        return spec
    finally:
        await store.close()


def register(url: str, spec_json: dict[str, Any]) -> MetricSpec:
    """Register a metric spec (as the admin API would) and return the stored one."""
    return asyncio.run(_register(url, spec_json))


async def _write(url: str, spec: MetricSpec, epochs: dict[int, tuple[Sequence[int], int]]) -> None:
    store = _connect(url)
    try:
        for epoch, (t, n) in epochs.items():
            reports = [
                ValidReport(spec, epoch, secrets.token_hex(16), secrets.token_hex(32), c)
                for c in reports_for(t, n)
            ]
            for i in range(0, len(reports), BATCH):
                outcomes = await store.ingest(reports[i : i + BATCH])
                assert set(outcomes) == {"accepted"}, set(outcomes)
    finally:
        await store.close()


def write_tallies(url: str, spec: MetricSpec, epochs: dict[int, tuple[Sequence[int], int]]) -> None:
    """Ingest, per epoch, n reports whose counters sum to the given tally vector."""
    asyncio.run(_write(url, spec, epochs))


def stored_counters(url: str, spec: MetricSpec) -> dict[int, int]:
    """epoch -> counters stored over its shards, counted here from the tally hashes
    themselves (HLEN of each, minus its report count field), not by the store."""
    import redis  # tests only: the store's own reads are what is checked against this

    out: dict[int, int] = {}
    with redis.Redis.from_url(url) as client:
        for key in client.scan_iter(match=f"ldp:{{m:{spec.name}:{spec.version}:*}}:t"):
            epoch = int(key.decode().split(":")[4])
            out[epoch] = out.get(epoch, 0) + int(client.hlen(key)) - 1
    return out
