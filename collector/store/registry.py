"""The metric registry in Redis: immutable specs, one version per change.

``create_metric`` stores a spec under the next version of its name unless it
is identical to the latest (one Lua call, ``schema.CREATE_LUA``); parsed specs
are cached per (name, version), which never change once written.

>>> await store.create_metric(spec)             # doctest: +SKIP
(MetricSpec(name='browser', version=1, ...), True)
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from collector.store.base import StoreBase
from collector.store.schema import SPEC_NAMES, as_text, canonical_json, spec_key
from ldp_core.metric import MetricSpec

__all__ = ["SpecRegistry"]


class SpecRegistry(StoreBase):
    """Metric specs: create, read one or many, list the latest of each name."""

    async def create_metric(self, spec: MetricSpec) -> tuple[MetricSpec, bool]:
        """Store ``spec`` (its version is ignored) -> (stored spec, created?).

        A new name gets version 1; a spec identical to the latest version of its
        name returns that version (created False); any other gets latest + 1.
        """
        body = spec.to_json()
        del body["version"]
        canonical = {k: v for k, v in body.items() if k != "params"}
        reply = await self._create(
            keys=[spec_key(spec.name), SPEC_NAMES],
            args=[canonical_json(canonical), orjson.dumps(body), spec.name],
        )
        version, created = int(reply[0]), bool(int(reply[1]))
        stored = await self.get_metric(spec.name, version)
        assert stored is not None
        return stored, created

    def _parse(self, name: str, version: int, raw: bytes | str) -> MetricSpec:
        key = (name, version)
        if key not in self._specs:
            data = orjson.loads(raw)
            data["version"] = version
            self._specs[key] = MetricSpec.from_json(data)
        return self._specs[key]

    async def get_metric(self, name: str, version: int | None = None) -> MetricSpec | None:
        """One version of a metric (the latest if ``version`` is None), or None."""
        if version is not None and (name, version) in self._specs:
            return self._specs[(name, version)]
        key = spec_key(name)
        if version is None:
            latest = await self.client.hget(key, "latest")
            if latest is None:
                return None
            version = int(latest)
        raw = await self.client.hget(key, f"v:{version}")
        return None if raw is None else self._parse(name, version, raw)

    async def get_metrics(
        self, wanted: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], MetricSpec]:
        """Many (name, version) at once (cached ones without a round trip)."""
        wanted = list(dict.fromkeys(wanted))
        out = {k: self._specs[k] for k in wanted if k in self._specs}
        missing = [k for k in wanted if k not in out]
        if missing:
            pipe = self.client.pipeline(transaction=False)
            for name, version in missing:
                pipe.hget(spec_key(name), f"v:{version}")
            for (name, version), raw in zip(missing, await pipe.execute(), strict=True):
                if raw is not None:
                    out[(name, version)] = self._parse(name, version, raw)
        return out

    async def known_names(self, names: Iterable[str]) -> set[str]:
        """Which of ``names`` are registered metrics (one round trip)."""
        ordered = sorted(set(names))
        if not ordered:
            return set()
        flags = await self.client.smismember(SPEC_NAMES, ordered)
        return {name for name, flag in zip(ordered, flags, strict=True) if flag}

    async def list_metrics(self) -> list[MetricSpec]:
        """The latest version of every metric, by name."""
        flat = await self._list(keys=[SPEC_NAMES])
        out = [
            self._parse(as_text(flat[i]), int(flat[i + 1]), flat[i + 2])
            for i in range(0, len(flat), 3)
        ]
        return sorted(out, key=lambda s: s.name)

    # -- ingest ------------------------------------------------------------------------
