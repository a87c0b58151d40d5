"""The running system of ``ldp up``: embedded Redis, collector, aggregator.

Each service is its own process (uvicorn ``--factory ldp_cli.serve:<name>_app``:
the app with its HTTP latency metrics; never imported here),
bound to a loopback port, with access logs off (no IP, no key in logs), and
stopped by its own pid in reverse order: aggregator, collector, then Redis
(SIGTERM: Redis flushes its append-only file, so data persists).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from collector.logs import uvicorn_log_config
from ldp_cli.keys import Keys
from ldp_cli.lock import DataLock
from ldp_server import processes
from ldp_server.redis_server import RedisServer, free_port
from ldp_server.service import ServiceError, UvicornService, spawn_uvicorn

__all__ = ["Service", "Stack", "StackError"]


#: A service did not start; the message holds the end of its log.
StackError = ServiceError

#: One uvicorn subprocess (the server kit's wrapper): name, url, process, tail().
Service = UvicornService


@dataclass
class Stack:
    """Redis (embedded unless a URL is given), the collector and the aggregator."""

    data_dir: Path
    redis_url: str
    redis: RedisServer | None
    services: list[Service] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    lock: DataLock | None = None

    @classmethod
    def start(
        cls,
        data_dir: Path,
        keys: Keys,
        *,
        host: str = "127.0.0.1",
        collector_port: int = 0,
        aggregator_port: int = 0,
        redis_url: str | None = None,
        cluster_nodes: str | None = None,
        timeout: float = 60.0,
    ) -> Stack:
        """Start everything (ports 0 = a free one); on failure stop what started.

        Without ``redis_url`` or ``cluster_nodes`` a real redis-server is started
        with append-only persistence in DIR/redis.
        """
        redis = None
        if not redis_url and not cluster_nodes:
            redis = RedisServer.start(data_dir / "redis", bound=True)
            redis_url = redis.url
        stack = cls(data_dir, redis_url or f"cluster {cluster_nodes}", redis, host=host)
        try:
            target = (
                {"LDP_REDIS_CLUSTER_NODES": cluster_nodes, "LDP_REDIS_URL": ""}
                if cluster_nodes
                else {"LDP_REDIS_URL": str(redis_url), "LDP_REDIS_CLUSTER_NODES": ""}
            )
            env = {
                **target,
                "LDP_ADMIN_KEYS": keys.admin,
                "LDP_INGEST_KEYS": keys.ingest,
                "LDP_ANALYST_KEYS": keys.analyst,
                "LDP_DATA_DIR": str(data_dir),
            }
            stack.env = env
            for name, port in (("collector", collector_port), ("aggregator", aggregator_port)):
                stack.services.append(stack._spawn(name, host, port or free_port(), env))
            for service in stack.services:
                service.wait_ready(timeout=timeout)
        except BaseException:
            stack.stop()
            raise
        return stack

    def _spawn(self, name: str, host: str, port: int, env: dict[str, str]) -> Service:
        log_config = self.data_dir / "logs" / "logging.json"
        if not log_config.exists():
            log_config.parent.mkdir(parents=True, exist_ok=True)
            log_config.write_text(json.dumps(uvicorn_log_config("warning")))
        return spawn_uvicorn(
            f"ldp_cli.serve:{name}_app", {"LDP_ENV": os.environ.get("LDP_ENV", "dev"), **env},
            log_path=self.data_dir / "logs" / f"{name}.log", name=name, host=host, port=port,
            bound=True,  # the CLI has no other thread yet
            log_config=log_config,  # every line JSON, uvicorn's included
        )

    def restart(self, name: str, timeout: float = 30.0) -> Service:
        """Kill the service ``name`` (SIGKILL, reaped) and start it again on its port."""
        index = next(i for i, s in enumerate(self.services) if s.name == name)
        old = self.services[index]
        old.kill()
        new = self._spawn(name, old.host, old.port, self.env)
        self.services[index] = new
        new.wait_ready(timeout=timeout)
        return new

    def restart_redis(self, timeout: float = 15.0) -> None:
        """Kill the embedded Redis (reaped: no zombie) and start it again on its port
        and folder; it replays its append-only file.  Done when every service's
        /readyz answers again (the collector then takes reports at once)."""
        assert self.redis is not None
        self.redis.kill()
        self.redis.restart()
        for service in self.services:
            if not processes.wait_http_ok(service.url + "/readyz", service.process, timeout):
                raise StackError(f"{service.name} not ready after the Redis restart")

    def url(self, name: str) -> str:
        return next(s.url for s in self.services if s.name == name)

    @property
    def collector_url(self) -> str:
        return self.url("collector")

    @property
    def aggregator_url(self) -> str:
        return self.url("aggregator")

    def dead(self) -> list[Service]:
        """Services that exited on their own."""
        return [s for s in self.services if not s.alive()]

    def stop(self) -> None:
        """Aggregator, collector, then Redis; each by its own pid; then the folder's lock."""
        for service in reversed(self.services):
            service.stop()
        if self.redis is not None:
            self.redis.stop()
        if self.lock is not None:
            self.lock.release()
