"""Redis goes away for real (the server process is stopped) and comes back.

The collector answers 503 with Retry-After and /readyz false while Redis is
down, and recovers without a restart once the same server is back.
"""

from __future__ import annotations

import pytest

from collector.app import create_app
from collector.settings import Settings
from collector.store import Store
from ldp_core.wire import encode_batch
from ldp_server.redis_server import RedisServer
from tests.support.asgi import asgi_client
from tests.support.reports import SPECS, envelope, today
from tests.support.servers import ADMIN_KEY, INGEST_KEY, auth

pytestmark = pytest.mark.anyio


async def test_redis_down_gives_503_then_recovers(fresh_redis: RedisServer) -> None:
    settings = Settings(
        env="dev",
        redis_url=fresh_redis.url,
        admin_keys=ADMIN_KEY,
        ingest_keys=INGEST_KEY,
        redis_timeout_seconds=1.0,
    )
    epoch = today()
    async with asgi_client(create_app(settings)) as client:
        r = await client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        assert r.status_code == 201
        before = [envelope("browser", 1, epoch, 1) for _ in range(10)]
        r = await client.post("/v1/reports", json=encode_batch(before), headers=auth(INGEST_KEY))
        assert r.json()["accepted"] == 10

        fresh_redis.stop()
        during = [envelope("browser", 1, epoch, 2) for _ in range(5)]
        r = await client.post("/v1/reports", json=encode_batch(during), headers=auth(INGEST_KEY))
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "store_unavailable"
        assert r.headers["Retry-After"] == "1"
        r = await client.get("/readyz")
        assert r.status_code == 503 and r.json() == {"ready": False}
        r = await client.get("/v1/metrics", headers=auth(INGEST_KEY))
        assert r.status_code == 503
        assert (await client.get("/healthz")).status_code == 200  # the process itself is fine

        fresh_redis.restart()  # same port, replays the append-only file
        assert (await client.get("/readyz")).json() == {"ready": True}
        r = await client.post("/v1/reports", json=encode_batch(during), headers=auth(INGEST_KEY))
        assert r.status_code == 200 and r.json()["accepted"] == 5
        # The batch sent before the outage is still known: a retry is a duplicate.
        r = await client.post("/v1/reports", json=encode_batch(before), headers=auth(INGEST_KEY))
        assert r.json()["duplicates"] == 10

    store = Store.connect(fresh_redis.url)
    try:
        spec = await store.get_metric("browser")
        assert spec is not None
        assert await store.read_tallies(spec, [epoch]) == {epoch: ([0, 10, 5, 0], 15)}
    finally:
        await store.close()


async def test_collector_starts_while_redis_is_down(fresh_redis: RedisServer) -> None:
    settings = Settings(
        env="dev",
        redis_url=fresh_redis.url,
        admin_keys=ADMIN_KEY,
        ingest_keys=INGEST_KEY,
        redis_timeout_seconds=1.0,
    )
    fresh_redis.stop()
    async with asgi_client(create_app(settings)) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 503
        r = await client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        fresh_redis.restart()
        assert (await client.get("/readyz")).json() == {"ready": True}
        r = await client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        assert r.status_code == 201
        env = envelope("browser", 1, today(), 1)
        r = await client.post("/v1/reports", json=encode_batch([env]), headers=auth(INGEST_KEY))
        assert r.json()["accepted"] == 1
