"""The embedded Redis as ``ldp up`` runs it: a password and noeviction (real redis-server).

- Without the password nothing answers but an authentication error; the password
  is in a 0600 file of the data folder and in a 0600 config file, never on the
  command line (``/proc/<pid>/cmdline``).
- ``maxmemory`` with ``noeviction``: a full Redis refuses a write (the collector
  answers 503 and the device retries) instead of evicting acknowledged data.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import redis

from ldp_server.redis_server import RedisServer


@pytest.fixture()
def guarded(tmp_path: Path) -> RedisServer:
    server = RedisServer.start(tmp_path / "redis", guarded=True, maxmemory="4mb")
    yield server  # type: ignore[misc]
    server.stop()


def test_a_guarded_redis_needs_its_password(guarded: RedisServer, tmp_path: Path) -> None:
    assert guarded.password and guarded.password in guarded.url
    with redis.Redis(port=guarded.port) as anonymous, pytest.raises(
        redis.exceptions.AuthenticationError
    ):
        anonymous.set("x", "1")
    with redis.Redis.from_url(guarded.url) as client:
        assert client.set("x", "1")
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    for name in ("redis.password", "redis.conf"):
        assert stat.S_IMODE((tmp_path / "redis" / name).stat().st_mode) == 0o600
    cmdline = Path(f"/proc/{guarded.pid}/cmdline").read_bytes()
    assert guarded.password.encode() not in cmdline
    # Restarting the same folder keeps the same password (the URL the services hold).
    before = guarded.url
    guarded.restart()
    assert guarded.url == before and guarded.ping()


def test_a_full_redis_refuses_writes_instead_of_evicting(guarded: RedisServer) -> None:
    with redis.Redis.from_url(guarded.url) as client:
        client.set("acknowledged", "kept")
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for i in range(10_000):
                client.set(f"filler:{i}", "x" * 4096)
        assert client.get("acknowledged") == b"kept"
