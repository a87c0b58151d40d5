"""The only package that knows the Redis key schema: metric specs and tallies.

``Store`` is one object over one Redis client (single node or Redis Cluster),
built from its parts, one module per job:

    schema    key names, digests, the Lua scripts (the key schema is documented there)
    base      the client, health checks (``ping``, ``ready``), the digest secret
    registry  metric specs: ``create_metric``, ``get_metric(s)``, ``list_metrics``
    ingest    the write side: ``ingest`` (exactly once per report), ``record_implausible``,
              ``ingest_grouped`` (concurrent requests' reports in one call)
    group     ``GroupCommit``: what ``ingest_grouped`` and ``take`` coalesce calls with
    limits    per-client rate limits: ``take`` (concurrent requests' takes in one call)
    reads     the read side, used by the aggregator: ``epochs_with_data``,
              ``read_vectors`` (one epoch at a time, in HSCAN slices),
              ``read_tallies``, ``read_counts``, ``read_flags``

>>> store = Store(settings.redis_client())                     # doctest: +SKIP
>>> spec, created = await store.create_metric(spec)             # doctest: +SKIP
>>> await store.ingest([ValidReport(spec, 20421, rid, tok, (3,))])  # doctest: +SKIP
['accepted']
>>> await store.read_tallies(spec, [20421])                     # doctest: +SKIP
{20421: ([0, 0, 0, 1], 1)}

Poisoning signals for the aggregator: ``read_flags`` (distinct implausible
reports refused per epoch) and ``count_sum_z(spec.build(), vector, n)`` (the
z-score of a tally's sum against the honest law; ``SUM_Z_FLAG`` is the
threshold), both re-exported here from ``collector.plausibility``, as are the
client factory and the Redis errors of the server kit (``ldp_server.redis_client``).
"""

from __future__ import annotations

from collector.plausibility import SUM_Z_FLAG, count_sum_z
from collector.store.ingest import STATE_MARGIN_SECONDS, Ingest, Outcome, ValidReport
from collector.store.limits import ClientLimits
from collector.store.reads import ReadSide
from collector.store.registry import SpecRegistry
from ldp_server.redis_client import REDIS_ERRORS, RedisClient, make_client

__all__ = [
    "REDIS_ERRORS",
    "STATE_MARGIN_SECONDS",
    "SUM_Z_FLAG",
    "Outcome",
    "RedisClient",
    "Store",
    "ValidReport",
    "count_sum_z",
    "make_client",
]


class Store(SpecRegistry, Ingest, ReadSide, ClientLimits):
    """Metric specs and tallies in Redis (single node or Redis Cluster).

    ``shards`` spreads each (metric, version, epoch) over that many slots;
    ``retention_seconds`` is how long after an epoch ends its dedupe state is
    kept (the collector refuses reports older than that anyway); ``secret``
    keys the digests (else one is created once and kept in Redis).
    """
