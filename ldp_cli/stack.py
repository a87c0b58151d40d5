"""The running system of ``ldp up``: embedded Redis, collector, aggregator.

Each service is its own process (uvicorn ``--factory``, never imported here),
bound to a loopback port, with access logs off (no IP, no key in logs), and
stopped by its own pid in reverse order: aggregator, collector, then Redis
(SIGTERM: Redis flushes its append-only file, so data persists).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ldp_cli.keys import Keys
from ldp_cli.lock import DataLock
from ldp_server.redis_server import RedisServer, free_port
from ldp_server.service import ServiceError, UvicornService, spawn_uvicorn

__all__ = ["DEV_POW", "Service", "Stack", "StackError", "dev_pow"]

#: The install proof of work of ``ldp up`` / ``ldp demo`` in dev, unless the environment
#: sets one: no leading zero bits and a tiny scrypt, so a 5,000-device demo fleet
#: registers in about a second instead of ~1 s of a core per device.  Prod refuses
#: 0 bits (collector.settings): the difficulty there is the operator's.
DEV_POW = {"LDP_INSTALL_POW_N": "16", "LDP_INSTALL_POW_R": "1", "LDP_INSTALL_POW_BITS": "0"}


def dev_pow(environ: Mapping[str, str]) -> dict[str, str]:
    """``DEV_POW`` less what ``environ`` sets; nothing outside dev.

    >>> dev_pow({"LDP_INSTALL_POW_BITS": "4"})
    {'LDP_INSTALL_POW_N': '16', 'LDP_INSTALL_POW_R': '1'}
    >>> dev_pow({"LDP_ENV": "prod"})
    {}
    """
    if environ.get("LDP_ENV", "dev") != "dev":
        return {}
    return {k: v for k, v in DEV_POW.items() if k not in environ}


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
    #: What each service was started with, to start it again (supervision).
    env: dict[str, str] = field(default_factory=dict)
    #: Consecutive failed health probes per child ("redis", "collector", ...).
    misses: dict[str, int] = field(default_factory=dict)
    #: The data folder's lock (``ldp_cli.lock``), released last by ``stop``.
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
            redis = RedisServer.start(data_dir / "redis", bound=True, guarded=True)
            redis_url = redis.url
        stack = cls(data_dir, redis_url or f"cluster {cluster_nodes}", redis)
        try:
            target = (
                {"LDP_REDIS_CLUSTER_NODES": cluster_nodes, "LDP_REDIS_URL": ""}
                if cluster_nodes
                else {"LDP_REDIS_URL": str(redis_url), "LDP_REDIS_CLUSTER_NODES": ""}
            )
            env = {
                **dev_pow(os.environ),
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
            from collector.logs import uvicorn_log_config  # server extra: only to serve

            log_config.write_text(json.dumps(uvicorn_log_config("warning")))
        return spawn_uvicorn(
            f"{name}.app:create_app", {"LDP_ENV": os.environ.get("LDP_ENV", "dev"), **env},
            log_path=self.data_dir / "logs" / f"{name}.log", name=name, host=host, port=port,
            bound=True,  # the CLI has no other thread yet
            log_config=log_config,  # every line JSON, uvicorn's included
        )

    def url(self, name: str) -> str:
        return next(s.url for s in self.services if s.name == name)

    @property
    def collector_url(self) -> str:
        return self.url("collector")

    @property
    def aggregator_url(self) -> str:
        return self.url("aggregator")

    def issuer_key_id(self) -> str:
        """The key id (64 hex digits) of the token issuer this stack's collector signs
        with, read where the collector loads its key from (``LDP_TOKEN_KEY_FILE``, else
        Redis), not asked over HTTP: what a fleet run by this command pins.

        Call it once the collector is ready (it made the key then, if there was none).
        """
        from collector.token_crypto import TokenKey  # server extra: only to serve
        from collector.tokens import TOKEN_KEY

        path = os.environ.get("LDP_TOKEN_KEY_FILE")
        if path:
            dev = os.environ.get("LDP_ENV", "dev") != "prod"
            key = TokenKey.from_file(path, min_bits=1024 if dev else 2048)
            return key.public.key_id.hex()
        pem = asyncio.run(self._redis_get(TOKEN_KEY))
        if pem is None:
            raise StackError(f"the collector's token key is not in Redis ({TOKEN_KEY}) yet")
        return TokenKey.from_pem(pem).public.key_id.hex()

    async def _redis_get(self, key: str) -> bytes | None:
        from ldp_server.redis_client import make_client  # server extra: only to serve

        nodes = []
        for item in filter(None, self.env.get("LDP_REDIS_CLUSTER_NODES", "").split(",")):
            host, _, port = item.strip().rpartition(":")
            nodes.append((host or "127.0.0.1", int(port)))
        client = make_client(self.env.get("LDP_REDIS_URL") or None, nodes or None)
        try:
            value = await client.get(key)
        finally:
            await client.aclose()
        return value if isinstance(value, bytes) else None

    def dead(self) -> list[Service]:
        """Services that exited on their own."""
        return [s for s in self.services if not s.alive()]

    def supervise(self, probe: bool, *, patience: int = 3) -> list[tuple[str, str]]:
        """Restart every child that died, or (``probe``) failed ``patience`` health
        checks in a row (a hung process: its port open, no answer in 2 s); Redis
        first, on its own port and folder.  Returns (child, reason) per restart."""
        restarted: list[tuple[str, str]] = []
        if self.redis is not None:
            reason = self._verdict("redis", self.redis.process.poll(),
                                   self.redis.ping() if probe else None, patience)
            if reason:
                self.redis.kill()
                self.redis.restart()
                restarted.append(("redis", reason))
        for i, service in enumerate(self.services):
            healthy = _healthy(service.url) if probe else None
            reason = self._verdict(service.name, service.process.poll(), healthy, patience)
            if reason:
                service.kill()
                self.services[i] = self._spawn(service.name, service.host, service.port, self.env)
                self.services[i].wait_ready(timeout=60.0)
                restarted.append((service.name, reason))
        return restarted

    def _verdict(self, name: str, code: int | None, healthy: bool | None, patience: int) -> str:
        if code is not None:
            self.misses[name] = 0
            return f"exited with {code}"
        if healthy is None:
            return ""
        self.misses[name] = 0 if healthy else self.misses.get(name, 0) + 1
        if self.misses[name] >= patience:
            self.misses[name] = 0
            return f"no answer to {patience} health checks"
        return ""

    def stop(self) -> None:
        """Aggregator, collector, then Redis; each by its own pid; then the folder's lock."""
        for service in reversed(self.services):
            service.stop()
        if self.redis is not None:
            self.redis.stop()
        if self.lock is not None:
            self.lock.release()


def _healthy(url: str) -> bool:
    """GET /healthz answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2.0) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except (OSError, ValueError):
        return False
