"""Group commit (``collector.store.group``): concurrent requests' reports in one script call.

In process against a real Redis (the grouping made certain: callers in one event
loop turn), then through a real uvicorn collector, where Redis' own
``CLIENT PAUSE WRITE`` holds a write in flight so that the next requests queue
into one group.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis
import redis.exceptions

from collector.store import Store, ValidReport
from collector.store.group import ALONE, GroupCommit
from collector.store.schema import tally_tag
from ldp_core.metric import MetricSpec
from ldp_core.wire import Envelope, encode_batch
from ldp_server.redis_server import RedisServer
from tests.support.reports import SPECS, envelope, today
from tests.support.servers import (
    ADMIN_KEY,
    INGEST_KEY,
    ServiceProcess,
    auth,
    flushed_collector,
    start_collector,
)

pytestmark = pytest.mark.anyio


def evalsha_calls(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


@pytest.fixture()
async def store(redis_url: str) -> AsyncIterator[Store]:
    s = Store.connect(redis_url, shards=1, secret=b"g" * 32)
    try:
        yield s
    finally:
        await s.close()


def report(spec: MetricSpec, epoch: int, token: str, counter: int) -> ValidReport:
    return ValidReport(spec, epoch, f"id-{token}-{counter}", token, (counter,))


async def test_one_turn_is_one_script_call_and_each_caller_gets_its_own(
    store: Store, redis_url: str
) -> None:
    spec, _ = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
    epoch = today()
    await store.ingest([report(spec, epoch, "warm", 0)])  # loads the script
    before = evalsha_calls(redis_url)
    answers = await asyncio.gather(
        store.ingest_grouped([report(spec, epoch, "a", 1), report(spec, epoch, "t", 2)]),
        store.ingest_grouped([report(spec, epoch, "t", 3)]),  # the same token, later
        store.ingest_grouped([report(spec, epoch, "b", 1), report(spec, epoch, "a", 0)]),
    )
    assert evalsha_calls(redis_url) - before == 1
    assert answers == [["accepted", "accepted"], ["duplicate"], ["accepted", "duplicate"]]
    # Counted: warm (0), a (1), t (2), b (1); the duplicates' counters were not.
    assert await store.read_tallies(spec, [epoch]) == {epoch: ([1, 2, 1, 0], 4)}


async def test_a_large_batch_is_written_alone(store: Store, redis_url: str) -> None:
    spec, _ = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
    epoch = today()
    await store.ingest([report(spec, epoch, "warm", 0)])
    before = evalsha_calls(redis_url)
    large = [report(spec, epoch, f"l{i}", i % 4) for i in range(ALONE)]
    answers = await asyncio.gather(
        store.ingest_grouped([report(spec, epoch, "s1", 1)]),
        store.ingest_grouped(large),
        store.ingest_grouped([report(spec, epoch, "s2", 2), report(spec, epoch, "s1", 3)]),
    )
    assert evalsha_calls(redis_url) - before == 2  # the large batch, then both small ones
    assert answers[0] == ["accepted"] and answers[1] == ["accepted"] * ALONE
    assert answers[2] == ["accepted", "duplicate"]  # s1 was in the group, first


async def test_a_failed_script_fails_every_caller_of_its_group_and_counts_nothing(
    store: Store, redis_url: str
) -> None:
    spec, _ = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
    epoch = today()
    # The first slot of the group has a dedupe key of the wrong type: the script
    # stops there with an error, before anything of the group is written.
    with redis.Redis.from_url(redis_url) as client:
        client.set(f"{tally_tag(spec, epoch - 1, 0)}:d", "not a hash")
    results = await asyncio.gather(
        store.ingest_grouped([report(spec, epoch - 1, "x", 1)]),
        store.ingest_grouped([report(spec, epoch, "y", 2)]),
        store.ingest_grouped([report(spec, epoch, "z", 3), report(spec, epoch, "w", 0)]),
        return_exceptions=True,
    )
    assert all(isinstance(r, redis.exceptions.ResponseError) for r in results), results
    assert await store.read_tallies(spec, [epoch - 1, epoch]) == {}
    # Nothing was counted: the same reports, alone, are all accepted now.
    assert await store.ingest_grouped([report(spec, epoch, "y", 2)]) == ["accepted"]


async def test_a_group_is_bounded_and_never_splits_a_caller() -> None:
    sizes: list[int] = []

    async def write(items: list[int]) -> list[int]:
        sizes.append(len(items))
        await asyncio.sleep(0)
        return items

    group: GroupCommit[int, int] = GroupCommit(write, limit=1000)
    batches = [list(range(n)) for n in (600, 300, 200, 1000, 1)]
    assert await asyncio.gather(*(group.submit(b) for b in batches)) == batches
    assert sizes == [900, 200, 1000, 1]  # 600 + 300, then 200 (+ 1000 > limit), ...
    with pytest.raises(ValueError, match="limit must be >= 1, got 0"):
        GroupCommit(write, limit=0)


async def test_a_caller_that_gave_up_before_its_group_left_is_not_written() -> None:
    written: list[list[str]] = []
    release = asyncio.Event()

    async def write(items: list[str]) -> list[str]:
        written.append(list(items))
        await release.wait()
        return ["ok"] * len(items)

    group: GroupCommit[str, str] = GroupCommit(write)
    first = asyncio.create_task(group.submit(["in flight"]))
    await asyncio.sleep(0.01)
    gone = asyncio.create_task(group.submit(["cancelled"]))
    kept = asyncio.create_task(group.submit(["kept"]))
    await asyncio.sleep(0.01)
    gone.cancel()
    release.set()
    assert await first == ["ok"] and await kept == ["ok"]
    assert written == [["in flight"], ["kept"]]


# -- through uvicorn --------------------------------------------------------------------

#: No rate limit: its per-request script is a Redis write too, which CLIENT PAUSE
#: would hold in an order of its own.
NO_RATE_LIMIT = {"LDP_RATE_LIMIT_PER_SECOND": "0"}


@pytest.fixture()
def collector(redis_server: RedisServer, tmp_path: Path) -> Iterator[ServiceProcess]:
    """The collector as a uvicorn subprocess over the flushed session Redis."""
    with flushed_collector(redis_server, log_dir=tmp_path, extra_env=NO_RATE_LIMIT) as service:
        yield service


async def post(client: httpx.AsyncClient, envs: list[Envelope]) -> httpx.Response:
    return await client.post("/v1/reports", json=encode_batch(envs), headers=auth(INGEST_KEY))


async def test_concurrent_requests_through_uvicorn_each_get_their_own_answer(
    collector: ServiceProcess, redis_server: RedisServer
) -> None:
    redis_url = redis_server.url
    epoch = today()
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=collector.url, timeout=30, limits=limits) as client:
        r = await client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        assert r.status_code == 201
        assert (await post(client, [envelope("browser", 1, epoch, 0)])).json()["accepted"] == 1
        firsts = [envelope("browser", 1, epoch, i % 4, device=i) for i in range(24)]
        # A retry of eight of them, each also sent concurrently: one of each pair counts.
        retries = firsts[:8]
        before = evalsha_calls(redis_url)
        with redis.Redis.from_url(redis_url) as admin:
            admin.execute_command("CLIENT", "PAUSE", 300, "WRITE")
        answers = await asyncio.gather(*(post(client, [e]) for e in firsts + retries))
        calls = evalsha_calls(redis_url) - before
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    statuses = [a.json()["results"][0]["status"] for a in answers]
    for i in range(8):  # which of a pair arrives first is the network's choice
        assert sorted((statuses[i], statuses[24 + i])) == ["accepted", "duplicate"]
    assert statuses[8:24] == ["accepted"] * 16
    assert calls < len(answers)  # the paused writes were grouped
    store = Store.connect(redis_url)
    try:
        spec = await store.get_metric("browser")
        assert spec is not None
        tallies = await store.read_tallies(spec, [epoch])
    finally:
        await store.close()
    assert tallies == {epoch: ([7, 6, 6, 6], 25)}  # the warm-up's 0 and devices 0..23


async def test_same_token_twice_in_one_group_over_http_counts_the_first(
    collector: ServiceProcess, redis_server: RedisServer
) -> None:
    redis_url = redis_server.url
    epoch = today()
    async with httpx.AsyncClient(base_url=collector.url, timeout=30) as client:
        r = await client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        assert r.status_code == 201
        assert (await post(client, [envelope("browser", 1, epoch, 0)])).json()["accepted"] == 1
        before = evalsha_calls(redis_url)
        with redis.Redis.from_url(redis_url) as admin:
            admin.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
        # One write held in flight; then two requests with one device's token (its
        # reports of one metric and epoch: the second is a duplicate) queue behind it.
        held = asyncio.create_task(post(client, [envelope("browser", 1, epoch, 1)]))
        await asyncio.sleep(0.3)
        first = asyncio.create_task(post(client, [envelope("browser", 1, epoch, 2, device=5)]))
        await asyncio.sleep(0.3)
        second = asyncio.create_task(post(client, [envelope("browser", 1, epoch, 3, device=5)]))
        answers = [(await t).json() for t in (held, first, second)]
        calls = evalsha_calls(redis_url) - before
    assert [a["results"][0]["status"] for a in answers] == ["accepted", "accepted", "duplicate"]
    assert calls == 2  # the held write, then ONE for both queued requests


async def test_redis_lost_under_a_group_fails_every_request_and_counts_none(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    epoch = today()
    service = start_collector(
        fresh_redis.url,
        log_dir=tmp_path,
        extra_env={**NO_RATE_LIMIT, "LDP_REDIS_TIMEOUT_SECONDS": "1"},
    )
    try:
        async with httpx.AsyncClient(base_url=service.url, timeout=60) as client:
            r = await client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
            assert r.status_code == 201
            assert (await post(client, [envelope("browser", 1, epoch, 0)])).json()["accepted"] == 1
            await asyncio.sleep(1.5)  # the append-only file is synced every second
            with redis.Redis.from_url(fresh_redis.url) as admin:
                admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
            envs = [envelope("browser", 1, epoch, i % 4, device=100 + i) for i in range(6)]
            held = asyncio.create_task(post(client, envs[:1]))
            await asyncio.sleep(0.3)
            queued = [asyncio.create_task(post(client, [e])) for e in envs[1:]]
            await asyncio.sleep(0.3)
            fresh_redis.kill()  # the held write never ran; the group behind it cannot
            answers = [await t for t in (held, *queued)]
            # On a failure, the collector's own log says which exception gave a 500.
            assert [a.status_code for a in answers] == [503] * 6, (
                [a.text for a in answers], service.tail(40)
            )
            assert {a.json()["code"] for a in answers} == {"store_unavailable"}
            fresh_redis.restart()
            again = await asyncio.gather(*(post(client, [e]) for e in envs))
            assert [a.json()["results"][0]["status"] for a in again] == ["accepted"] * 6
    finally:
        service.stop()
