"""The data folder of ``ldp up``: its API keys (0600) and the running endpoints.

    DIR/keys.json      {"admin": ..., "ingest": ..., "analyst": ...}   0600, made once
    DIR/endpoints.json {"collector": url, "aggregator": url}        while ``up`` runs
    DIR/redis/         the embedded Redis (append-only file)
    DIR/logs/          the services' logs (no key, no IP: access logs are off)

Keys are 32 random bytes from the OS CSPRNG, url-safe base64.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Keys",
    "clear_endpoints",
    "default_data_dir",
    "load_endpoints",
    "load_keys",
    "load_or_create_keys",
    "save_endpoints",
]

KEYS_FILE = "keys.json"
ENDPOINTS_FILE = "endpoints.json"


def default_data_dir() -> Path:
    """$LDP_DATA_DIR, else $XDG_DATA_HOME/ldp-telemetry (~/.local/share/ldp-telemetry)."""
    if os.environ.get("LDP_DATA_DIR"):
        return Path(os.environ["LDP_DATA_DIR"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "ldp-telemetry"


@dataclass(frozen=True)
class Keys:
    """One key per role."""

    admin: str
    ingest: str
    analyst: str

    def as_json(self) -> dict[str, str]:
        return {"admin": self.admin, "ingest": self.ingest, "analyst": self.analyst}


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def load_keys(data_dir: Path) -> Keys | None:
    """The saved keys, or None when the folder has none (or they are unreadable)."""
    try:
        raw = json.loads((data_dir / KEYS_FILE).read_text())
        return Keys(str(raw["admin"]), str(raw["ingest"]), str(raw["analyst"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_or_create_keys(data_dir: Path) -> tuple[Keys, bool]:
    """(keys, created now?); a new file is written 0600 with O_EXCL, never overwritten."""
    _private_dir(data_dir)
    path = data_dir / KEYS_FILE
    found = load_keys(data_dir)
    if found is not None:
        if os.stat(path).st_mode & 0o077:
            os.chmod(path, 0o600)
        return found, False
    keys = Keys(*(secrets.token_urlsafe(32) for _ in range(3)))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(keys.as_json(), out)
        out.flush()
        os.fsync(out.fileno())
    return keys, True


def save_endpoints(data_dir: Path, endpoints: dict[str, str]) -> None:
    (data_dir / ENDPOINTS_FILE).write_text(json.dumps(endpoints))


def load_endpoints(data_dir: Path) -> dict[str, str]:
    try:
        raw = json.loads((data_dir / ENDPOINTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def clear_endpoints(data_dir: Path) -> None:
    (data_dir / ENDPOINTS_FILE).unlink(missing_ok=True)
