"""Shared fixtures: a real, throwaway redis-server per test session (never a fake)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.redis_server import RedisServer


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
