"""The metric specs a device knows: fetched from the collector, cached on disk.

A device that fetched the specs once works offline: the catalog is written to
``<state_dir>/metrics.json`` (atomically) and read back at start.

>>> cat = Catalog(path=None)
>>> cat.update([{"name": "browser", "kind": "categorical", "domain": ["a", "b"],
...              "epsilon": 1.0, "mechanism": "grr", "version": 3}])
1
>>> cat.get("browser").version
3

A spec that differs from the known one under the same (name, version) is
refused, never swapped in: the metric is marked conflicted (``record`` answers
``spec_conflict``) until a higher version arrives, and a WARNING is logged once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from client_sdk._device import mechanism_fingerprint
from ldp_core.metric import MetricSpec

__all__ = ["Catalog", "bundle_issuer_keys", "load_bundle"]

log = logging.getLogger("client_sdk")


class Catalog:
    """Thread-safe name -> latest ``MetricSpec``, optionally cached in a file."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._specs: dict[str, MetricSpec] = {}
        #: category -> index per categorical metric (MetricSpec.index_of scans a tuple).
        self._indexes: dict[str, dict[str, int]] = {}
        #: name -> mechanism fingerprint of its current spec (memo context, ledger).
        self._fingerprints: dict[str, str] = {}
        #: name -> the version under which a different spec was offered (refused).
        self._conflicts: dict[str, int] = {}
        self._warned: set[tuple[str, int]] = set()
        self.loaded_from_disk = False
        #: Called (without the lock) after every ``update`` once registered: a Client
        #: registers after seeding, so each call is a fetch from the collector.
        self.listeners: list[Callable[[], None]] = []
        if path is not None:
            self._load(path)

    def get(self, name: str) -> MetricSpec | None:
        return self._specs.get(name)

    def index_of(self, spec: MetricSpec, value: object) -> int | float:
        """``spec.index_of(value)``, with a dict lookup for categories."""
        if type(value) is str:
            index = self._indexes.get(spec.name)
            if index is not None and spec.kind == "categorical":
                found = index.get(value)
                if found is not None and spec.domain[found] == value:
                    return found
        return spec.index_of(value)

    def fingerprint(self, spec: MetricSpec) -> str:
        """The mechanism fingerprint of ``spec`` (cached for the catalog's own specs)."""
        if self._specs.get(spec.name) is spec:
            return self._fingerprints[spec.name]
        return mechanism_fingerprint(spec)

    def conflicted(self, name: str) -> bool:
        """True while a changed spec under the current version of ``name`` was refused."""
        return name in self._conflicts

    def names(self) -> list[str]:
        return sorted(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def update(self, specs: Iterable[dict[str, Any]], *, save: bool = True) -> int:
        """Add or replace specs from their JSON form; returns how many were usable.

        A spec this SDK cannot build (unknown mechanism in an older SDK, a bad
        field) is skipped: its metric stays unknown rather than breaking the rest.
        """
        usable: dict[str, MetricSpec] = {}
        raw: list[dict[str, Any]] = []
        for data in specs:
            try:
                spec = MetricSpec.from_json(data)
                spec.build()
            except (ValueError, TypeError, ImportError, KeyError):
                continue
            current = usable.get(spec.name)
            if current is None or spec.version > current.version:
                usable[spec.name] = spec
                raw.append(data)
        with self._lock:
            for name, spec in usable.items():
                known = self._specs.get(name)
                if known is not None and spec.version == known.version and spec != known:
                    self._conflicts[name] = spec.version
                    if (name, spec.version) not in self._warned:
                        self._warned.add((name, spec.version))
                        log.warning("metric %s version %d changed under the same version:"
                                    " refused, no report until a new version", name,
                                    spec.version)
                elif known is None or spec.version > known.version:
                    self._specs[name] = spec
                    self._indexes[name] = {c: i for i, c in enumerate(spec.domain)}
                    self._fingerprints[name] = mechanism_fingerprint(spec)
                    self._conflicts.pop(name, None)
            if save and self._path is not None and usable:
                self._save(self._path)
        for listener in list(self.listeners):
            listener()
        return len(usable)

    def _save(self, path: Path) -> None:
        data = {"metrics": [spec.to_json() for spec in self._specs.values()]}
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with open(fd, "w", encoding="utf-8") as out:
            json.dump(data, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)

    def _load(self, path: Path) -> None:
        try:
            with open(path, encoding="utf-8") as src:
                data = json.load(src)
        except (OSError, ValueError):
            return
        metrics = data.get("metrics") if isinstance(data, dict) else None
        if isinstance(metrics, list):
            self.update([m for m in metrics if isinstance(m, dict)], save=False)
            self.loaded_from_disk = bool(self._specs)

    def after_fork(self) -> None:
        self._lock = threading.Lock()

    def purge_file(self) -> None:
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)


def load_bundle(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The spec JSON objects of a catalog file shipped with an app.

    The file holds what ``GET /v1/metrics`` answers (``{"metrics": [...]}``) or a
    plain list of specs.  A missing or unreadable file is a ``ConfigError`` that
    names it: a bundled catalog is part of the app, not a runtime condition.

    >>> import json, tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    ...     json.dump({"metrics": [{"name": "flag", "kind": "boolean", "epsilon": 1}]}, f)
    >>> [m["name"] for m in load_bundle(f.name)]
    ['flag']
    """
    from client_sdk._errors import ConfigError

    try:
        with open(path, encoding="utf-8") as src:
            data = json.load(src)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the metric catalog {os.fspath(path)!r}: {exc}") from None
    metrics = data.get("metrics") if isinstance(data, dict) else data
    if not isinstance(metrics, list) or not all(isinstance(m, dict) for m in metrics):
        raise ConfigError(f"metric catalog {os.fspath(path)!r} is not a list of specs"
                          " (nor {\"metrics\": [...]})")
    return metrics


def bundle_issuer_keys(path: str | os.PathLike[str]) -> list[str]:
    """The pinned issuer key ids of a catalog file (``"issuer_keys": [...]``), if any.

    >>> import json, tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    ...     json.dump({"metrics": [], "issuer_keys": ["ab" * 32]}, f)
    >>> bundle_issuer_keys(f.name) == ["ab" * 32]
    True
    """
    from client_sdk._errors import ConfigError

    try:
        with open(path, encoding="utf-8") as src:
            data = json.load(src)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the metric catalog {os.fspath(path)!r}: {exc}") from None
    keys = data.get("issuer_keys", []) if isinstance(data, dict) else []
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ConfigError(f"issuer_keys of {os.fspath(path)!r} must be a list of key ids")
    return keys
