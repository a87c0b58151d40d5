"""The per-client rate limiter (``collector.store.limits``): concurrent takes in one call.

In process against a real Redis (the grouping made certain: takes in one event
loop turn), then through a real uvicorn collector with the limiter on, where
Redis' own ``CLIENT PAUSE WRITE`` holds a take in flight so that the next
requests' takes queue into one group.  What must hold: a request over its
client's limit is 429 ``rate_limited`` with Retry-After and counts nothing;
each request takes exactly one token, grouped or not; a take Redis cannot do
fails its request (503), it never lets the request through.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis
import redis.exceptions

from collector.store import Store
from collector.store.limits import client_key
from ldp_core.wire import Envelope, encode_batch
from ldp_server.redis_server import RedisServer
from tests.support.reports import SPECS, envelope, today
from tests.support.servers import (
    ADMIN_KEY,
    INGEST_KEY,
    RedisClusterProcesses,
    ServiceProcess,
    auth,
    flushed_collector,
)

pytestmark = pytest.mark.anyio

#: A rate that refills less than one token over any test here (a token per 1000 s).
SLOW = 0.001


def evalsha_calls(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


@pytest.fixture()
async def store(redis_url: str) -> AsyncIterator[Store]:
    with redis.Redis.from_url(redis_url) as client:
        client.flushall()
    s = Store.connect(redis_url, shards=1, secret=b"l" * 32)
    try:
        yield s
    finally:
        await s.close()


async def tokens_left(store: Store, address: str) -> float:
    left = await store.client.hget(client_key(await store.digest_key(), address), "t")
    assert left is not None
    return float(left)


async def test_one_turn_of_takes_is_one_script_call_each_take_counted_once(
    store: Store, redis_url: str
) -> None:
    await store.take("192.0.2.9", SLOW, 3)  # loads the script, another client
    before = evalsha_calls(redis_url)
    waits = await asyncio.gather(*(store.take(a, SLOW, 3) for a in
                                   ["192.0.2.1"] * 5 + ["192.0.2.2"] * 2 + ["192.0.2.1"]))
    assert evalsha_calls(redis_url) - before == 1  # eight takes, one call (eight before)
    # In arrival order: client 1's first three pass, the rest wait (1000 s a token).
    assert waits[:3] == [0.0] * 3
    assert waits[3:5] == [1000.0, 1000.0] and waits[7] == 1000.0
    assert waits[5:7] == [0.0, 0.0]
    # Refused takes took nothing; each granted take took exactly one token.
    assert 0 <= await tokens_left(store, "192.0.2.1") < 0.01
    assert 1 <= await tokens_left(store, "192.0.2.2") < 1.01


async def test_grouped_takes_leave_the_bucket_as_one_at_a_time_would(store: Store) -> None:
    """The same takes one by one and in one group: the same answers, the same bucket."""
    one_by_one = [await store.take("198.51.100.1", SLOW, 4) for _ in range(6)]
    grouped = await asyncio.gather(*(store.take("198.51.100.2", SLOW, 4) for _ in range(6)))
    assert grouped == one_by_one == [0.0] * 4 + [1000.0] * 2
    assert round(await tokens_left(store, "198.51.100.1"), 2) == round(
        await tokens_left(store, "198.51.100.2"), 2) == 0.0


async def test_an_unreadable_bucket_fails_its_own_client_not_the_group(store: Store) -> None:
    await store.take("192.0.2.30", SLOW, 3)  # the digest secret is known from here on
    key = client_key(await store.digest_key(), "192.0.2.31")
    await store.client.set(key, b"not a hash")
    answers = await asyncio.gather(store.take("192.0.2.30", SLOW, 3),
                                   store.take("192.0.2.31", SLOW, 3),
                                   store.take("192.0.2.30", SLOW, 3),
                                   return_exceptions=True)
    assert answers[0] == answers[2] == 0.0
    assert isinstance(answers[1], redis.exceptions.ResponseError)
    assert await store.client.get(key) == b"not a hash"  # left as it was


async def test_redis_unreachable_fails_every_take_of_the_group() -> None:
    s = Store.connect("redis://127.0.0.1:1/0", shards=1, secret=b"l" * 32)
    try:
        answers = await asyncio.gather(*(s.take(f"192.0.2.{i}", SLOW, 3) for i in range(3)),
                                       return_exceptions=True)
    finally:
        await s.close()
    assert all(isinstance(a, redis.exceptions.ConnectionError) for a in answers), answers


async def test_the_limiter_off_calls_nothing() -> None:
    s = Store.connect("redis://127.0.0.1:1/0", shards=1, secret=b"l" * 32)  # no Redis there
    try:
        assert await s.take("192.0.2.1", 0, 1) == 0.0
    finally:
        await s.close()


# -- through uvicorn --------------------------------------------------------------------

#: Burst 6: one take for registering the metric, five for reports.
BURST = 6
LIMITED = {"LDP_RATE_LIMIT_PER_SECOND": str(SLOW), "LDP_RATE_LIMIT_BURST": str(BURST)}


@pytest.fixture()
def collector(redis_server: RedisServer, tmp_path: Path) -> Iterator[ServiceProcess]:
    """The collector with the limiter on, a uvicorn subprocess over the flushed Redis."""
    with flushed_collector(redis_server, log_dir=tmp_path, extra_env=LIMITED) as service:
        yield service


async def post(client: httpx.AsyncClient, envs: list[Envelope]) -> httpx.Response:
    return await client.post("/v1/reports", json=encode_batch(envs), headers=auth(INGEST_KEY))


async def tallies(redis_url: str, epoch: int) -> tuple[list[int], int]:
    store = Store.connect(redis_url)
    try:
        spec = await store.get_metric("browser")
        assert spec is not None
        return (await store.read_tallies(spec, [epoch]))[epoch]
    finally:
        await store.close()


async def test_over_the_limit_is_429_counts_nothing_and_grouped_takes_count_once(
    collector: ServiceProcess, redis_server: RedisServer
) -> None:
    redis_url = redis_server.url
    epoch = today()
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=collector.url, timeout=30, limits=limits) as client:
        r = await client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        assert r.status_code == 201  # token 1 of 6
        envs = [envelope("browser", 1, epoch, i % 4, device=i) for i in range(12)]
        before = evalsha_calls(redis_url)
        with redis.Redis.from_url(redis_url) as admin:
            admin.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
        # Every request from 127.0.0.1: one bucket, five tokens left for twelve requests.
        answers = await asyncio.gather(*(post(client, [e]) for e in envs))
        calls = evalsha_calls(redis_url) - before
        assert {a.status_code for a in answers} == {200, 429}, [a.text for a in answers]
        passed = [a for a in answers if a.status_code == 200]
        refused = [a for a in answers if a.status_code == 429]
        assert len(passed) == BURST - 1 and len(refused) == len(envs) - BURST + 1
        assert all(a.json()["results"][0]["status"] == "accepted" for a in passed)
        for a in refused:
            assert a.json()["code"] == "rate_limited"
            assert int(a.headers["Retry-After"]) >= 1
        # The refused reports were not counted; their devices' tokens were not spent.
        counts, n = await tallies(redis_url, epoch)
        assert n == BURST - 1 and sum(counts) == BURST - 1
        assert calls < len(envs)  # takes grouped (and writes): fewer calls than requests
        # Still empty: a retry of a refused report is refused again, and counts nothing.
        again = await post(client, [envs[answers.index(refused[0])]])
        assert again.status_code == 429 and again.json()["code"] == "rate_limited"
    assert (await tallies(redis_url, epoch))[1] == BURST - 1


async def test_a_take_redis_cannot_do_fails_the_request_never_lets_it_through(
    collector: ServiceProcess, redis_server: RedisServer
) -> None:
    """The limiter fails closed: Redis up, the ingest possible, but the client's bucket
    unreadable: 503 store_unavailable, nothing counted; once readable, 200."""
    redis_url = redis_server.url
    epoch = today()
    async with httpx.AsyncClient(base_url=collector.url, timeout=30) as client:
        r = await client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        assert r.status_code == 201
        store = Store.connect(redis_url)
        try:
            key = client_key(await store.digest_key(), "127.0.0.1")
            assert await store.client.exists(key) == 1  # the bucket the collector keyed
            await store.client.delete(key)
            await store.client.set(key, b"not a hash")
            r = await post(client, [envelope("browser", 1, epoch, 1, device=1)])
            assert r.status_code == 503, r.text
            assert r.json()["code"] == "store_unavailable" and "Retry-After" in r.headers
            await store.client.delete(key)
        finally:
            await store.close()
        r = await post(client, [envelope("browser", 1, epoch, 1, device=1)])
        assert r.status_code == 200 and r.json()["accepted"] == 1
    assert (await tallies(redis_url, epoch))[1] == 1  # only the request after the fault


async def test_on_a_cluster_grouped_takes_are_one_call_per_bucket_each_counted_once(
    redis_cluster: RedisClusterProcesses,
) -> None:
    """Each client's bucket lives in a slot of its own: one call per bucket, in order."""
    for server in redis_cluster.servers:
        with redis.Redis(port=server.port) as client:
            client.flushall()
    nodes = [("127.0.0.1", s.port) for s in redis_cluster.servers]
    s = Store.connect(cluster_nodes=nodes, shards=1, secret=b"l" * 32)
    try:
        addresses = [f"192.0.2.{i % 5}" for i in range(20)]  # four takes each, interleaved
        waits = await asyncio.gather(*(s.take(a, SLOW, 3) for a in addresses))
        assert waits == [0.0] * 15 + [1000.0] * 5  # per client: three pass, the fourth waits
        for address in set(addresses):
            assert 0 <= await tokens_left(s, address) < 0.01
    finally:
        await s.close()
