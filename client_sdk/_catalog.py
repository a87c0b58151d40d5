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

A spec this SDK cannot build is skipped, never silently: one WARNING per
metric and reason (``metric x: spec skipped (bundled with the app): ...``),
counted in ``Counters.config_errors`` (``bundled_spec_invalid`` for the app's
own catalog, ``spec_unusable`` for the collector's or the cache's).  Only the
display-only fields the analyst API adds (``DISPLAY_FIELDS``: ``unit_text``)
are dropped before parsing; any other unknown field still refuses the spec,
since a field this SDK does not know may change what the mechanism does.

>>> cat.update([{"name": "plan", "kind": "boolean", "epsilon": 1.0,
...              "unit_text": "per device, per metric, per day"}], source="bundle")
1
>>> cat.update([{"name": "odd", "kind": "boolean", "epsilon": 1.0, "colour": "red"}],
...            source="bundle")
0
>>> cat.skipped()
{'bundled_spec_invalid': 1}
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

__all__ = ["DISPLAY_FIELDS", "Catalog", "bundle_issuer_keys", "load_bundle"]

log = logging.getLogger("client_sdk")

#: Fields the analyst API (``GET /v1/metrics`` of the aggregator, so an older
#: ``ldp metric list --json``) adds to a spec for people: not part of the spec, ignored.
DISPLAY_FIELDS = frozenset({"unit_text"})
#: Where specs come from (``Catalog.update``'s ``source``) -> their skip counter.
_SKIP_COUNTER = {"bundle": "bundled_spec_invalid", "collector": "spec_unusable",
                 "cache": "spec_unusable"}
_SOURCE_TEXT = {"bundle": "bundled with the app", "collector": "from the collector",
                "cache": "cached in state_dir"}


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
        #: (source, metric name, reason) of every spec skipped so far (each logged once).
        self._skips: set[tuple[str, str, str]] = set()
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

    def update(self, specs: Iterable[dict[str, Any]], *, save: bool = True,
               source: str = "collector") -> int:
        """Add or replace specs from their JSON form; returns how many were usable.

        A spec this SDK cannot build (unknown mechanism in an older SDK, a bad
        field) is skipped, logged and counted (see the module docstring): its
        metric stays unknown rather than breaking the rest.  ``source`` is
        "bundle", "collector" or "cache".
        """
        usable: dict[str, MetricSpec] = {}
        for data in specs:
            if isinstance(data, dict):
                data = {k: v for k, v in data.items() if k not in DISPLAY_FIELDS}
            try:
                spec = MetricSpec.from_json(data)
                spec.build()
            except (ValueError, TypeError, ImportError, KeyError) as exc:
                label = data.get("name") if isinstance(data, dict) else None
                self._skip(source, label, str(exc) or type(exc).__name__)
                continue
            current = usable.get(spec.name)
            if current is None or spec.version > current.version:
                usable[spec.name] = spec
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

    def skipped(self) -> dict[str, int]:
        """Specs skipped so far, by counter (``Counters.config_errors``)."""
        counts: dict[str, int] = {}
        for source, _, _ in list(self._skips):
            key = _SKIP_COUNTER.get(source, "spec_unusable")
            counts[key] = counts.get(key, 0) + 1
        return counts

    def _skip(self, source: str, name: object, reason: str) -> None:
        label = name if isinstance(name, str) else repr(name)
        with self._lock:
            if (source, label, reason) in self._skips:
                return
            self._skips.add((source, label, reason))
        log.warning("metric %s: spec skipped (%s), the metric stays unknown: %s", label,
                    _SOURCE_TEXT.get(source, source), reason)

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
            self.update([m for m in metrics if isinstance(m, dict)], save=False,
                        source="cache")
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
