"""DIR/status.json: what the supervision of ``ldp up`` (``ldp_cli.up.wait_for_signal``) sees.

``running`` only while every child is alive and answered its last health
check; ``degraded`` as soon as one has exited or missed a check, until it is
restarted and answers again.  The file is rewritten when that changes (or a
child's pid does) and removed when the stack stops; ``ldp status`` reads it
only while the folder's lock is held (``ldp_cli.lock``).

>>> snapshot = {"state": "running", "children": {"redis": {"pid": 7, "up": True}}}
>>> state_of(snapshot["children"])
'running'
>>> state_of({"redis": {"pid": 7, "up": False}})
'degraded'
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldp_cli.stack import Stack

__all__ = ["STATUS_FILE", "StatusFile", "read_status", "state_of"]

STATUS_FILE = "status.json"


def state_of(children: dict[str, dict[str, Any]]) -> str:
    """'running' iff every child is up."""
    return "running" if all(c["up"] for c in children.values()) else "degraded"


@dataclass
class StatusFile:
    """Keeps DIR/status.json in step with a ``Stack``'s children."""

    stack: Stack
    restarts: dict[str, int] = field(default_factory=dict)
    _last: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.update()

    def children(self) -> dict[str, dict[str, Any]]:
        stack, out = self.stack, {}
        if stack.redis is not None:
            out["redis"] = {"pid": stack.redis.pid,
                            "up": stack.redis.process.poll() is None
                            and not stack.misses.get("redis")}
        for s in stack.services:
            out[s.name] = {"pid": s.pid, "up": s.alive() and not stack.misses.get(s.name)}
        return out

    def update(self) -> None:
        """Rewrite the file if the state or a pid changed."""
        children = self.children()
        for name, child in children.items():
            before = self._last.get("children", {}).get(name)
            if before is not None and before["pid"] != child["pid"]:
                self.restarts[name] = self.restarts.get(name, 0) + 1
            child["restarts"] = self.restarts.get(name, 0)
        body = {"state": state_of(children), "pid": os.getpid(), "children": children}
        if body == self._last:
            return
        self._last = body
        path = self.stack.data_dir / STATUS_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, path)

    def clear(self) -> None:
        """Remove the file (the stack stopped)."""
        (self.stack.data_dir / STATUS_FILE).unlink(missing_ok=True)


def read_status(data_dir: Path) -> dict[str, Any] | None:
    """DIR/status.json, or None."""
    try:
        raw = json.loads((data_dir / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None
