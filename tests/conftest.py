"""Shared fixtures: a real, throwaway redis-server per test session (never a fake)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldp_server.redis_server import RedisServer
from tests.support.servers import RedisClusterProcesses, ServiceProcess, flushed_collector
from tests.support.tokens import TEST_TOKEN_KEY

# Every collector of the suite (in process or not) signs and checks report tokens
# with the test issuer key, so test helpers can mint valid tokens.
os.environ.setdefault("LDP_TOKEN_KEY_FILE", str(TEST_TOKEN_KEY))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server on a free loopback port, shared by the session; FLUSHALL between users."""
    server = RedisServer.start(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of its own for a test that kills or restarts it."""
    server = RedisServer.start(tmp_path / "redis", appendfsync="always")
    try:
        yield server
    finally:
        server.stop()


# -- added by the collector (issue 4): a Redis Cluster and the collector over real HTTP --


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcesses]:
    """Three redis-server masters on loopback joined into one Redis Cluster."""
    cluster = RedisClusterProcesses.start(tmp_path_factory.mktemp("redis-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture()
def collector_service(redis_server: RedisServer, tmp_path: Path) -> Iterator[ServiceProcess]:
    """The collector as a uvicorn subprocess on a free 127.0.0.1 port, over a flushed
    session Redis; keys are tests.support.servers.ADMIN_KEY / INGEST_KEY / ANALYST_KEY."""
    with flushed_collector(redis_server, log_dir=tmp_path / "collector") as service:
        yield service


@pytest.fixture()
def anyio_backend() -> str:
    """Async tests (``pytest.mark.anyio``) run on asyncio."""
    return "asyncio"


@pytest.fixture()
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The session redis-server, emptied (FLUSHALL) for this test."""
    import redis

    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    yield redis_server.url
