"""``ldp up`` supervises its children: a dead or hung one is killed, reaped and restarted.

Every ``interval`` seconds each child is checked, Redis first: its process
(``poll()``, which also reaps a killed child, so none is left a zombie), then
its health with a deadline (``GET /healthz`` of each service, ``PING`` of the
embedded Redis).  A child that exited is restarted at once; one that fails
``hung_after`` health checks in a row is killed (SIGKILL) and restarted on the
same port (Redis on the same folder: it replays its append-only file).  A
restart that fails is retried with a doubling pause (at most 30 s).

Each event is one JSON line on the supervisor's output, and the state is kept
in DIR/status.json: ``running`` only while every child is alive and answered
its last check, ``degraded`` otherwise (``ldp status`` reads it).

>>> line = event_line("child_restarted", child="collector", reason="exited -9")
>>> sorted(json.loads(line))
['child', 'event', 'reason', 'ts']
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ldp_cli.stack import Service, Stack
from ldp_server import processes

__all__ = ["STATUS_FILE", "Supervisor", "event_line", "read_status"]

STATUS_FILE = "status.json"
MAX_PAUSE = 30.0


def event_line(event: str, **fields: Any) -> str:
    """One JSON log line: UTC timestamp, event name, fields."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
    return json.dumps({"ts": stamp, "event": event, **fields})


@dataclass
class _Child:
    name: str
    pid: Callable[[], int]
    exit_code: Callable[[], int | None]
    healthy: Callable[[], bool]
    restart: Callable[[], None]
    failures: int = 0
    restarts: int = 0
    up: bool = True
    retry_at: float = 0.0
    pause: float = 1.0


@dataclass
class Supervisor:
    """Checks and restarts the children of a ``Stack``; see the module docstring."""

    stack: Stack
    out: TextIO
    interval: float = 0.5
    deadline: float = 2.0
    hung_after: int = 3
    children: list[_Child] = field(default_factory=list)

    def __post_init__(self) -> None:
        stack = self.stack
        redis = stack.redis
        if redis is not None:
            self.children.append(_Child(
                "redis", lambda: redis.pid, lambda: redis.process.poll(), redis.ping,
                stack.restart_redis,
            ))
        for service in stack.services:
            self.children.append(self._service_child(service.name))
        self._write_status()

    def _service_child(self, name: str) -> _Child:
        def current() -> Service:
            return next(s for s in self.stack.services if s.name == name)

        def restart() -> None:
            self.stack.restart(name)

        return _Child(
            name,
            lambda: current().pid,
            lambda: current().process.poll(),
            lambda: processes.answers_ok(current().url + "/healthz", timeout=self.deadline),
            restart,
        )

    def run(self, stop: threading.Event) -> None:
        """Check every ``interval`` seconds until ``stop`` is set."""
        while not stop.wait(self.interval):
            self.check_once()

    def check_once(self) -> None:
        """One round over the children, Redis first; restarts what is dead or hung."""
        changed = False
        for child in self.children:
            code = child.exit_code()
            if code is None and child.healthy():
                child.failures = 0
                if not child.up:
                    child.up, changed = True, True
                continue
            if child.up:
                child.up, changed = False, True
                self._write_status()
            if code is None:
                child.failures += 1
                if child.failures < self.hung_after:
                    continue
                reason = f"no answer to {child.failures} health checks of {self.deadline:g}s"
            else:
                reason = f"exited {code}"
            changed |= self._restart(child, reason)
        if changed:
            self._write_status()

    def _restart(self, child: _Child, reason: str) -> bool:
        now = time.monotonic()
        if now < child.retry_at:
            return False
        self._log("child_down", child=child.name, pid=child.pid(), reason=reason)
        try:
            child.restart()
        except (RuntimeError, OSError) as exc:
            child.retry_at = now + child.pause
            self._log("restart_failed", child=child.name, error=str(exc).splitlines()[0],
                      retry_in_seconds=child.pause)
            child.pause = min(MAX_PAUSE, child.pause * 2)
            return False
        child.restarts += 1
        child.failures, child.up, child.pause, child.retry_at = 0, True, 1.0, 0.0
        self._log("child_restarted", child=child.name, pid=child.pid(), reason=reason,
                  restarts=child.restarts)
        return True

    def _log(self, event: str, **fields: Any) -> None:
        print(event_line(event, **fields), file=self.out, flush=True)

    @property
    def state(self) -> str:
        return "running" if all(c.up for c in self.children) else "degraded"

    def _write_status(self) -> None:
        body = {
            "state": self.state,
            "pid": os.getpid(),
            "children": {
                c.name: {"pid": c.pid(), "up": c.up, "restarts": c.restarts}
                for c in self.children
            },
        }
        path = self.stack.data_dir / STATUS_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, path)

    def clear(self) -> None:
        """Remove DIR/status.json (the stack stopped)."""
        (self.stack.data_dir / STATUS_FILE).unlink(missing_ok=True)


def read_status(data_dir: Path) -> dict[str, Any] | None:
    """DIR/status.json, or None."""
    try:
        raw = json.loads((data_dir / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None
