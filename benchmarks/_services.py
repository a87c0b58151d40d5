"""Processes the service benchmarks start: Redis and uvicorn apps, all on 127.0.0.1.

Every process is started by us, waited for with a bounded deadline and stopped
by its own pid (SIGTERM, then SIGKILL).  Nothing here listens beyond loopback.

>>> with Stack.start(workers=1) as stack:          # doctest: +SKIP
...     spec = stack.register({"name": "b", "kind": "categorical", ...})
...     stack.collector_url
"""

from __future__ import annotations

import json
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from ldp_cli.stack import DEV_POW
from ldp_server.redis_server import RedisServer, free_port
from ldp_server.service import UvicornService
from ldp_server.service import start_uvicorn as kit_start_uvicorn

__all__ = [
    "ADMIN_KEY",
    "ANALYST_KEY",
    "INGEST_KEY",
    "REPO_ROOT",
    "Service",
    "Stack",
    "client_cpu_seconds",
    "redis_cpu_seconds",
    "start_uvicorn",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
ADMIN_KEY = "bench-admin-key-0123456789abcdef"
INGEST_KEY = "bench-ingest-key-0123456789abcdef"
ANALYST_KEY = "bench-analyst-key-0123456789abcdef"


#: A uvicorn subprocess serving one ASGI factory on 127.0.0.1:port (the server kit's).
Service = UvicornService


def start_uvicorn(
    factory: str,
    env: Mapping[str, str],
    log_dir: Path,
    *,
    workers: int = 1,
    ready_path: str = "/healthz",
    timeout: float = 60.0,
    nodelay: bool = True,
) -> Service:
    """``uvicorn --factory <factory>`` on a free loopback port with ``workers`` processes.

    With ``workers > 1`` and ``nodelay`` the workers are started by
    ``benchmarks/uvicorn_tcp.py`` (uvicorn's supervisor on an IPPROTO_TCP socket,
    so responses are not held by Nagle; see that module); ``nodelay=False`` runs
    plain ``uvicorn --workers N`` as shipped.
    """
    port = free_port()
    argv = None
    if workers > 1 and nodelay:
        argv = [sys.executable, str(REPO_ROOT / "benchmarks" / "uvicorn_tcp.py"), factory,
                str(port), str(workers)]
    return kit_start_uvicorn(
        factory, env, log_path=log_dir / f"uvicorn-{port}.log", port=port, workers=workers,
        argv=argv, ready_path=ready_path, timeout=timeout, cwd=REPO_ROOT,
        pythonpath=(REPO_ROOT,),
    )


def redis_cpu_seconds(url: str) -> float:
    """used_cpu_user + used_cpu_sys of the Redis server (its own accounting)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        return client_cpu_seconds(client)
    finally:
        client.close()


def client_cpu_seconds(client: Any) -> float:
    """``redis_cpu_seconds`` over a connected (synchronous) redis-py client."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


@dataclass
class Stack:
    """A private Redis and, on demand, collectors and other apps on loopback."""

    redis: RedisServer
    folder: Path
    services: list[Service] = field(default_factory=list)
    _tmp: tempfile.TemporaryDirectory[str] | None = None

    @classmethod
    def start(cls) -> Stack:
        """Start a private redis-server (append-only, everysec) in a temporary folder."""
        tmp = tempfile.TemporaryDirectory(prefix="ldp-bench-")
        folder = Path(tmp.name)
        server = RedisServer.start(folder / "redis")
        return cls(server, folder, [], tmp)

    @property
    def redis_url(self) -> str:
        return str(self.redis.url)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Collector settings: dev mode, bench keys, no rate limit, our Redis."""
        out = {
            "LDP_ENV": "dev",
            "LDP_REDIS_URL": self.redis_url,
            "LDP_ADMIN_KEYS": ADMIN_KEY,
            "LDP_INGEST_KEYS": INGEST_KEY,
            "LDP_ANALYST_KEYS": ANALYST_KEY,
            # The test issuer key: loadgen.py mints valid report tokens with it.
            "LDP_TOKEN_KEY_FILE": str(REPO_ROOT / "tests" / "support" / "token_key.pem"),
            "LDP_RATE_LIMIT_PER_SECOND": "0",
            "LDP_LOG_LEVEL": "WARNING",
            # Fleets register each device (the issuer's gate): a trivial proof of work.
            **DEV_POW,
        }
        out.update(extra or {})
        return out

    def collector(self, workers: int = 1, nodelay: bool = True,
                  extra: Mapping[str, str] | None = None) -> Service:
        """The real collector (full validation, exactly-once dedupe); ``extra``: more
        settings (e.g. ``LIMITER_ON``)."""
        svc = start_uvicorn(
            "collector.app:create_app", self.env(extra), self.folder, workers=workers,
            nodelay=nodelay,
        )
        self.services.append(svc)
        return svc

    def app(self, factory: str, workers: int = 1, ready_path: str = "/healthz",
            nodelay: bool = True) -> Service:
        """Any ASGI factory with the same environment (e.g. the minimal endpoint)."""
        svc = start_uvicorn(factory, self.env(), self.folder, workers=workers,
                            ready_path=ready_path, nodelay=nodelay)
        self.services.append(svc)
        return svc

    def flush_redis(self) -> None:
        """Drop every key (between runs, so memory and dedupe start clean)."""
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            client.flushall()
        finally:
            client.close()

    @staticmethod
    def register(collector_url: str, spec: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/metrics with the admin key -> the stored spec JSON (with version)."""
        request = urllib.request.Request(  # noqa: S310 - loopback URL we built
            collector_url + "/v1/metrics",
            data=json.dumps(spec).encode(),
            headers={"Authorization": f"Bearer {ADMIN_KEY}",
                     "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310
            stored: dict[str, Any] = json.loads(resp.read())
        return stored

    def stop(self) -> None:
        """Stop every process we started, by pid, then remove the folder."""
        for svc in self.services:
            svc.stop()
        self.services.clear()
        self.redis.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Stack:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
