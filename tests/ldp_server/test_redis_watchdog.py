"""A frozen Redis (SIGSTOP of a redis-server this test started) still gives a bounded error.

``make_client`` bounds each command by one watchdog per event loop instead of
redis-py's per-command timers (``ldp_server.redis_client.WatchedConnection``).
A stopped redis-server accepts TCP data into its kernel buffers and never
answers: a read, a write larger than those buffers, and a request through the
aggregator over real HTTP must each fail (503 ``store_unavailable`` for the
request), never hang; once Redis resumes the same client works again.  The
``asyncio.wait_for`` / HTTP timeouts below are guards that turn a hang into a
failure (60 s, far above the 0.5 s bound), not timing assertions.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis.asyncio
import redis.exceptions

from ldp_server.redis_client import REDIS_ERRORS, WatchedConnection, make_client
from ldp_server.redis_server import RedisServer
from tests.support.servers import ANALYST_KEY, auth, start_uvicorn

BOUND = 0.5
GUARD = 60.0


@contextmanager
def frozen(server: RedisServer) -> Iterator[None]:
    os.kill(server.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)


def test_reads_and_writes_to_a_frozen_redis_fail_and_the_client_recovers(
    fresh_redis: RedisServer,
) -> None:
    async def run() -> None:
        client = make_client(fresh_redis.url, timeout=BOUND)
        try:
            assert await client.set("k", "v")
            assert isinstance(client, redis.asyncio.Redis)
            assert client.connection_pool.connection_class is WatchedConnection
            with frozen(fresh_redis):
                with pytest.raises(REDIS_ERRORS) as read:
                    await asyncio.wait_for(client.get("k"), GUARD)
                # A write far larger than the socket buffers: it blocks in the write.
                with pytest.raises(REDIS_ERRORS) as write:
                    await asyncio.wait_for(client.set("big", b"x" * (64 << 20)), GUARD)
                pipe = client.pipeline(transaction=False)
                pipe.get("k")
                pipe.incr("n")
                with pytest.raises(REDIS_ERRORS):
                    await asyncio.wait_for(pipe.execute(), GUARD)
            for caught in (read, write):
                assert isinstance(caught.value, redis.exceptions.RedisError), caught.value
            assert await asyncio.wait_for(client.get("k"), GUARD) == b"v"
        finally:
            await client.aclose()

    asyncio.run(run())


def test_a_frozen_redis_gives_the_aggregator_503_not_a_hang(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": fresh_redis.url, "LDP_ANALYST_KEYS": ANALYST_KEY,
           "LDP_REDIS_TIMEOUT_SECONDS": str(BOUND)}
    service = start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path)
    try:
        with httpx.Client(base_url=service.url, headers=auth(ANALYST_KEY),
                          timeout=GUARD) as http:
            assert http.get("/v1/estimates/nothing").json()["code"] == "unknown_metric"
            with frozen(fresh_redis):
                for path in ("/v1/estimates/nothing", "/readyz"):
                    resp = http.get(path)
                    assert resp.status_code == 503, (path, resp.text)
                    assert resp.json()["code"] == "store_unavailable"
                    assert "retry-after" in resp.headers
                assert http.get("/healthz").status_code == 200  # the process is alive
            assert http.get("/v1/estimates/nothing").json()["code"] == "unknown_metric"
            assert http.get("/readyz").status_code == 200
    finally:
        service.stop()
