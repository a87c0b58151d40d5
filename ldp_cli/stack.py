"""The running system of ``ldp up``: embedded Redis, collector, aggregator.

Each service is its own process (uvicorn ``--factory``, never imported here),
bound to a loopback port, with access logs off (no IP, no key in logs), and
stopped by its own pid in reverse order: aggregator, collector, then Redis
(SIGTERM: Redis flushes its append-only file, so data persists).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from collector import processes
from collector.redis_server import RedisServer, free_port
from ldp_cli.keys import Keys

__all__ = ["Service", "Stack", "StackError"]


def _die_with_parent() -> None:
    """In the child (Linux): SIGTERM when the ``ldp`` process dies, even by SIGKILL.

    So a killed ``ldp up`` never leaves orphan services behind.  A no-op where
    prctl is unavailable.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


class StackError(RuntimeError):
    """A service did not start; the message holds the end of its log."""


def _start_redis(folder: Path, timeout: float = 10.0) -> RedisServer:
    """``RedisServer.start``, but in its own session and bound to our life.

    Its own session: a terminal's Ctrl-C reaches only ``ldp``, which then stops
    the services in order (Redis last).  PDEATHSIG: a killed ``ldp`` leaves no
    Redis behind.
    """
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    process = subprocess.Popen(
        RedisServer.argv(port, folder, "everysec", ()),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_die_with_parent,  # the CLI has no other thread yet
    )
    server = RedisServer(port, folder, "everysec", process)
    try:
        server.wait_ready(timeout)
    except BaseException:
        server.kill()
        raise
    return server


@dataclass
class Service:
    """One uvicorn subprocess."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, timeout: float) -> None:
        if processes.wait_http_ok(self.url + "/healthz", self.process, timeout):
            return
        if not self.alive():
            raise StackError(f"{self.name} exited with {self.process.returncode}:\n{self.tail()}")
        raise StackError(f"{self.name} not ready on {self.url} in {timeout:g}s:\n{self.tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        processes.stop(self.process, timeout)


@dataclass
class Stack:
    """Redis (embedded unless a URL is given), the collector and the aggregator."""

    data_dir: Path
    redis_url: str
    redis: RedisServer | None
    services: list[Service] = field(default_factory=list)

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
            redis = _start_redis(data_dir / "redis")
            redis_url = redis.url
        stack = cls(data_dir, redis_url or f"cluster {cluster_nodes}", redis)
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
            for name, port in (("collector", collector_port), ("aggregator", aggregator_port)):
                stack.services.append(stack._spawn(name, host, port or free_port(), env))
            for service in stack.services:
                service.wait_ready(timeout)
        except BaseException:
            stack.stop()
            raise
        return stack

    def _spawn(self, name: str, host: str, port: int, env: dict[str, str]) -> Service:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{name}.log"
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            f"{name}.app:create_app",
            "--host",
            host,
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
        full_env = {**os.environ, **env}
        full_env.setdefault("LDP_ENV", "dev")
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                argv,
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # the CLI has no other thread yet
            )
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host  # noqa: S104
        return Service(name, f"http://{shown}:{port}", process, log_path)

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
        """Aggregator, collector, then Redis; each by its own pid."""
        for service in reversed(self.services):
            service.stop()
        if self.redis is not None:
            self.redis.stop()
