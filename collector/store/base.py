"""The Redis client of a Store, its health checks and the digest secret.

``StoreBase`` holds what every part of the store shares: the client (a
single node or a Redis Cluster, ``ldp_server.redis_client.make_client``),
the shard count, the retention and the MAC key of the digests (from
``LDP_SERVER_SECRET``, else created once and kept in Redis).

>>> StoreBase(make_client("redis://127.0.0.1:1/0"), shards=0)
Traceback (most recent call last):
ValueError: shards must be >= 1, got 0
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, Self

from redis.asyncio.cluster import RedisCluster

from collector.store.schema import (
    CREATE_LUA,
    INGEST_BATCH_LUA,
    INGEST_BATCH_SHA,
    INGEST_LUA,
    INGEST_SHA,
    LIST_LUA,
    SPEC_SECRET,
    mac_key,
)
from ldp_core.metric import MetricSpec
from ldp_server.redis_client import REDIS_ERRORS, RedisClient, make_client

__all__ = ["CLUSTER_CALLS_IN_FLIGHT", "StoreBase", "settle"]


#: Cluster script calls one store keeps in flight, over all its requests: below
#: redis-py's pool of 100 connections per node, which a device batch over many
#: metrics (one call per slot) would otherwise exhaust (MaxConnectionsError).
CLUSTER_CALLS_IN_FLIGHT = 64


async def settle(calls: Iterable[Awaitable[Any]]) -> list[Any]:
    """Await every call, then raise the first failure.

    Plain ``asyncio.gather`` raises at the first failure and leaves the other
    calls running: a 503 would go out while writes of the same batch (redis-py
    retrying a slot whose master restarts) still land afterwards.  Here, when
    the caller returns or raises, nothing it sent is still in flight.
    """
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


class StoreBase:
    """The client, the shards, the retention and the digest secret of a Store.

    ``shards`` spreads each (metric, version, epoch) over that many slots;
    ``retention_seconds`` is how long after an epoch ends its implausible-report
    flags are kept; ``acceptance_seconds`` how long after it ends it accepts
    reports: its per-report state expires then (plus a margin);
    ``tally_retention_seconds`` how long its counters are (at least as long);
    ``secret`` keys the digests (else one is created once and kept in Redis).
    """

    def __init__(
        self,
        client: RedisClient,
        *,
        shards: int = 4,
        retention_seconds: int = 31 * 86400,
        acceptance_seconds: int = 4 * 86400,
        tally_retention_seconds: int = 400 * 86400,
        secret: bytes | None = None,
    ) -> None:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self.client = client
        self.shards = shards
        self.retention_seconds = retention_seconds
        self.acceptance_seconds = acceptance_seconds
        self.tally_retention_seconds = max(tally_retention_seconds, retention_seconds)
        self._secret = None if secret is None else mac_key(secret)
        self._specs: dict[tuple[str, int], MetricSpec] = {}
        self._cluster_calls = asyncio.Semaphore(CLUSTER_CALLS_IN_FLIGHT)
        # EVALSHA, loaded again by redis-py on NOSCRIPT.
        self._create = client.register_script(CREATE_LUA)
        self._list = client.register_script(LIST_LUA)

    @classmethod
    def connect(
        cls,
        redis_url: str | None = None,
        cluster_nodes: Sequence[tuple[str, int]] | None = None,
        **kwargs: Any,
    ) -> Self:
        """A store over a new client (see ``make_client``)."""
        return cls(make_client(redis_url, cluster_nodes), **kwargs)

    async def close(self) -> None:
        await self.client.aclose()

    @property
    def is_cluster(self) -> bool:
        return isinstance(self.client, RedisCluster)

    async def _gated(self, call: Awaitable[Any]) -> Any:
        """``call``, once fewer than ``CLUSTER_CALLS_IN_FLIGHT`` of this store's are."""
        async with self._cluster_calls:
            return await call

    # -- health ----------------------------------------------------------------------

    async def ping(self) -> bool:
        """Redis answers (read-only: what the aggregator checks)."""
        return bool(await self.client.ping())

    async def ready(self) -> bool:
        """Redis answers, the ingest script is loaded (loaded if missing) and the
        digest secret is known (created if missing): the collector's readiness."""
        try:
            await self.client.ping()
            await self._load_scripts()
            await self._get_secret()
        except REDIS_ERRORS:
            return False
        return True

    async def _load_scripts(self) -> None:
        for sha, lua in ((INGEST_SHA, INGEST_LUA), (INGEST_BATCH_SHA, INGEST_BATCH_LUA)):
            exists = await self.client.script_exists(sha)
            flags = exists if isinstance(exists, list) else [exists]
            if not all(flags):
                await self.client.script_load(lua)

    async def digest_key(self) -> bytes:
        """The MAC key of every digest the collector keeps (also the token issuer's)."""
        return await self._get_secret()

    async def _get_secret(self) -> bytes:
        if self._secret is None:
            await self.client.set(SPEC_SECRET, secrets.token_bytes(32), nx=True)
            stored = await self.client.get(SPEC_SECRET)
            if not isinstance(stored, bytes) or len(stored) < 16:
                raise RuntimeError("the server secret in Redis is missing or too short")
            self._secret = mac_key(stored)
        return self._secret

