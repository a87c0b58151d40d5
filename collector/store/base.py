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

import redis.asyncio
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import NoScriptError, RedisClusterException

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

#: Where a command's first key is, by its name (``StoreBase._per_master``).
_KEY_AT = {"SADD": 1, "EVALSHA": 3}
#: The connection settings a master's plain client takes from the cluster client's.
_NODE_KWARGS = frozenset({"host", "port", "username", "password", "credential_provider",
                          "socket_timeout", "socket_connect_timeout", "socket_keepalive",
                          "socket_keepalive_options", "client_name", "protocol"})


#: Cluster calls (a command, or one master's pipeline) one store keeps in flight,
#: over all its requests: below redis-py's pool of 100 connections per node.
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
        self._node_clients: dict[str, redis.asyncio.Redis] = {}
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
        for node_client in self._node_clients.values():
            await node_client.aclose()
        await self.client.aclose()

    @property
    def is_cluster(self) -> bool:
        return isinstance(self.client, RedisCluster)

    async def _gated(self, call: Awaitable[Any]) -> Any:
        """``call``, once fewer than ``CLUSTER_CALLS_IN_FLIGHT`` of this store's are."""
        async with self._cluster_calls:
            return await call

    async def _per_master(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Cluster only: each command's reply, in order, or raise the first error;
        the commands of one master go in ONE pipeline, the masters' concurrently.

        A command is routed by its first key (``_KEY_AT``), the pipeline sent on a
        plain client of that master (``_node_client``).  A command whose pipeline
        failed (the master gone, a slot moved, NOSCRIPT) is sent again alone through
        the cluster client, which follows MOVED/ASK, learns a failover and loads the
        script: a script applied before its pipeline failed answers ``duplicate``
        then, never counts twice.  Not redis-py's cluster pipeline: on a connection
        error it closes the shared client, failing every other request's calls.
        Device batches of 100 metrics on 3 masters (``benchmarks/bench_cluster_sim.py``):
        196 us of collector CPU and 69 of Redis CPU per report, against 522 and 156
        with a call per command.
        """
        client = self.client
        assert isinstance(client, RedisCluster)
        groups: dict[str | None, list[int]] = {}
        nodes: dict[str, ClusterNode] = {}
        for i, command in enumerate(commands):
            try:
                node = client.get_node_from_key(command[_KEY_AT[command[0]]])
            except RedisClusterException:  # slots not known now: sent alone below
                node = None
            if node is not None:
                nodes[node.name] = node
            groups.setdefault(None if node is None else node.name, []).append(i)
        answers = await asyncio.gather(*(
            self._pipeline(nodes.get(name) if name else None, [commands[i] for i in positions])
            for name, positions in groups.items()))
        replies: list[Any] = [None] * len(commands)
        for positions, answer in zip(groups.values(), answers, strict=True):
            for i, reply in zip(positions, answer, strict=True):
                replies[i] = reply
        again = [i for i, reply in enumerate(replies) if isinstance(reply, Exception)]
        for i, reply in zip(again, await settle(self._gated(self._alone(commands[i]))
                                                for i in again), strict=True):
            replies[i] = reply
        return replies

    async def _pipeline(
        self, node: ClusterNode | None, commands: list[tuple[Any, ...]]
    ) -> list[Any]:
        """The replies of ``commands`` in one pipeline to ``node``; errors as values."""
        if node is None:
            return [RedisClusterException("no master known for the slot")] * len(commands)
        try:
            pipe = self._node_client(node).pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return list(await self._gated(pipe.execute(raise_on_error=False)))
        except REDIS_ERRORS as error:
            return [error] * len(commands)

    def _node_client(self, node: ClusterNode) -> redis.asyncio.Redis:
        """A plain client of one master, with the cluster client's connection settings."""
        known = self._node_clients.get(node.name)
        if known is None:
            kwargs = {k: v for k, v in node.connection_kwargs.items()
                      if k in _NODE_KWARGS or k.startswith("ssl")}
            known = redis.asyncio.Redis(connection_pool=redis.asyncio.ConnectionPool(
                connection_class=node.connection_class, max_connections=node.max_connections,
                **kwargs))
            self._node_clients[node.name] = known
        return known

    async def _alone(self, command: tuple[Any, ...]) -> Any:
        """One command through the cluster client (the ingest script loaded on NOSCRIPT)."""
        try:
            return await self.client.execute_command(*command)
        except NoScriptError:
            await self.client.script_load(INGEST_LUA)
            return await self.client.execute_command(*command)

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

