"""One uvicorn subprocess serving an ASGI factory: the wrapper of ``ldp up``, tests, benchmarks.

The service is started by us (``uvicorn --factory``, never imported here),
on a port of the interface we choose (loopback by default), with access logs
off (no address, no key in logs) and its output in a log file; it is waited
for with a bounded deadline and stopped by its own pid.

>>> svc = start_uvicorn("collector.app:create_app", env, log_path=tmp / "c.log")  # doctest: +SKIP
>>> svc.url                                                                        # doctest: +SKIP
'http://127.0.0.1:18231'
>>> svc.stop()                                                                     # doctest: +SKIP
>>> uvicorn_argv("aggregator.app:create_app", "127.0.0.1", 8081)[1:5]
['-m', 'ldp_server.serve_asgi', 'aggregator.app:create_app', '--host']
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ldp_server import processes
from ldp_server.redis_server import free_port

__all__ = ["ServiceError", "UvicornService", "spawn_uvicorn", "start_uvicorn", "uvicorn_argv"]


class ServiceError(RuntimeError):
    """A service did not start; the message holds the end of its log."""


@dataclass
class UvicornService:
    """A uvicorn subprocess; ``name`` names it in messages (a service or its factory)."""

    name: str
    host: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        """Its base URL (a wildcard bind is reached on loopback)."""
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104
        return f"http://{shown}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        """What the process wrote to stdout and stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of its log."""
        return "\n".join(self.log().splitlines()[-lines:])

    def wait_ready(self, path: str = "/healthz", timeout: float = 30.0) -> None:
        """Poll ``path`` until it answers 200, else stop it and raise ServiceError."""
        if processes.wait_http_ok(self.url + path, self.process, timeout):
            return
        if not self.alive():
            raise ServiceError(f"{self.name} exited with {self.process.returncode}:\n"
                               f"{self.tail()}")
        self.stop()
        raise ServiceError(f"{self.name} not ready on {self.url}{path} in {timeout:g}s:\n"
                           f"{self.tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (graceful shutdown), then SIGKILL if it lingers."""
        processes.stop(self.process, timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, for fault tests."""
        processes.kill(self.process)

    def __enter__(self) -> UvicornService:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def uvicorn_argv(
    factory: str, host: str, port: int, workers: int = 1, log_level: str = "warning",
    log_config: Path | None = None,
) -> list[str]:
    """The command line of ``uvicorn --factory`` without access logs, through
    ``ldp_server.serve_asgi`` (header deadlines, a connection cap, and
    X-Forwarded-For only from ``LDP_TRUSTED_PROXIES``).

    ``log_config``: a JSON ``dictConfig`` file for uvicorn's own lines
    (``collector.logs.uvicorn_log_config``).
    """
    return [
        sys.executable, "-m", "ldp_server.serve_asgi", factory,
        "--host", host, "--port", str(port), "--workers", str(workers),
        "--log-level", log_level,
        *(["--log-config", str(log_config)] if log_config else []),
    ]


def spawn_uvicorn(
    factory: str,
    env: Mapping[str, str],
    *,
    log_path: Path,
    name: str | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    workers: int = 1,
    argv: Sequence[str] | None = None,
    cwd: Path | None = None,
    pythonpath: Sequence[Path] = (),
    bound: bool = False,
    log_config: Path | None = None,
) -> UvicornService:
    """Start ``uvicorn --factory <factory>`` with ``env`` over ours; do not wait.

    ``port`` None picks a free one; ``argv`` replaces the uvicorn command line
    (a launcher that takes the same factory and port); ``pythonpath`` goes in
    front of PYTHONPATH; ``bound``: own session, killed with us (``ldp up``).
    The log file is appended to.
    """
    chosen = port or free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **env}
    if pythonpath:
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (*map(str, pythonpath), full_env.get("PYTHONPATH", "")) if p
        )
    command = (
        list(argv) if argv is not None
        else uvicorn_argv(factory, host, chosen, workers, log_config=log_config)
    )
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=bound,
            preexec_fn=processes.die_with_parent if bound else None,
        )
    return UvicornService(name or factory, host, chosen, process, log_path)


def start_uvicorn(
    factory: str,
    env: Mapping[str, str],
    *,
    log_path: Path,
    ready_path: str = "/healthz",
    timeout: float = 30.0,
    host: str = "127.0.0.1",
    port: int | None = None,
    workers: int = 1,
    argv: Sequence[str] | None = None,
    cwd: Path | None = None,
    pythonpath: Sequence[Path] = (),
) -> UvicornService:
    """``spawn_uvicorn`` then ``wait_ready(ready_path, timeout)`` (stopped if never ready)."""
    service = spawn_uvicorn(factory, env, log_path=log_path, host=host, port=port,
                            workers=workers, argv=argv, cwd=cwd, pythonpath=pythonpath)
    service.wait_ready(ready_path, timeout)
    return service
