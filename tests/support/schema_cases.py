"""What the two schemathesis test files share: parameters, settings, headers, counts.

>>> params = operation_params([("GET", "/healthz", 5)], no_input={"/healthz"}, slow_at=1000)
>>> [p.values[-1].value for p in params]        # no schema-invalid input to generate
['positive']
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation
from schemathesis.python import asgi as st_asgi

from tests.support.servers import REPO_ROOT, auth

__all__ = ["CaseCounts", "asgi_schema", "case_settings", "headers_for", "operation_params"]


@contextmanager
def asgi_schema(app: Any) -> Iterator[Any]:
    """The app's own /openapi.json, its cases served in-process (lifespan run by
    schemathesis, shut down on exit)."""
    try:
        yield schemathesis.openapi.from_asgi("/openapi.json", app)
    finally:
        st_asgi.shutdown_lifespans()


def operation_params(
    operations: Iterable[tuple[str, str, int]], no_input: set[str], slow_at: int
) -> list[Any]:
    """(method, path, cases, mode) per operation and generation mode; operations without
    parameters or body have no schema-invalid input, so only positive cases."""
    return [
        pytest.param(m, p, c, mode, marks=[pytest.mark.slow] if c >= slow_at else [])
        for m, p, c in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if mode.is_positive or p not in no_input
    ]


def case_settings(cases: int) -> Callable[[Any], Any]:
    """Hypothesis settings for ``cases`` cases of one mode (half of an operation's total)."""
    return settings(max_examples=cases // 2 or 1, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), phases=[Phase.generate])


def headers_for(case: Any, key: str | None) -> dict[str, str] | None:
    """The role's key, unless the case's own headers were generated invalid (e.g.
    Authorization left out): then it is sent as generated."""
    negative = case.meta is not None and case.meta.is_negative_at(ParameterLocation.HEADER)
    return auth(key) if key and not negative else None


class CaseCounts:
    """Cases run and statuses seen per operation, written to test-artifacts/<name>.json."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.statuses: dict[str, Counter[str]] = {}

    def record(self, label: str, mode: GenerationMode, status: int) -> None:
        self.seen[label] += 1
        self.statuses.setdefault(label, Counter())[f"{mode.value} {status}"] += 1

    def write(self, name: str) -> None:
        summary = {k: {"cases": self.seen[k], "statuses": dict(v)}
                   for k, v in self.statuses.items()}
        out = REPO_ROOT / "test-artifacts"
        out.mkdir(exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(summary, indent=1))
        print(f"\n{name}", json.dumps(summary))
