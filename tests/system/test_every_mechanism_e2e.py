"""Every registered mechanism through the real stack: SDK -> collector -> Redis -> aggregator.

One metric per registered class (one- and two-level), chosen from the registry,
so a new mechanism is tested end to end by being registered.  400 SDK devices
(a ``Fleet``) record known values once; the real collector (uvicorn on
loopback) writes real Redis; the aggregator (uvicorn) serves the estimates,
whose intervals must cover the true shares (or mean).

"Covers" is asked at confidence 1 - 1e-8 per interval; with at most
15 metrics x 6 intervals the test fails by chance with probability <= 1e-6
(normal approximation over 400 independent reports).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ldp_core import Mechanism
from ldp_core.registry import classes
from ldp_server.redis_server import RedisServer
from tests.support.stack import Stack, StackSettings, start_stack

STRICT = 1 - 1e-8
DEVICES = 400
DOMAIN = ["a", "b", "c", "d", "e", "f"]
#: Category i is held by COUNTS[i] devices (400 in all).
COUNTS = (160, 100, 60, 40, 30, 10)
#: The numeric metrics: device k holds LOW + k % 5 * STEP.
LOW, STEP = 10.0, 20.0


def spec_of(cls: type[Mechanism]) -> dict[str, Any]:
    """A metric spec that runs ``cls`` (its kind, and two levels where it has them)."""
    name = f"e2e_{cls.name}_{cls.levels}"
    body: dict[str, Any] = {"name": name, "epsilon": 2.0, "mechanism": cls.name, "min_reports": 1}
    if cls.levels == 2:
        body["longitudinal"] = {"epsilon_inf": 4.0}
    if cls.kind == "frequency":
        body.update(kind="categorical", domain=DOMAIN)
    elif cls.kind == "string":  # the same categories, as strings nobody listed
        body.update(kind="string", max_length=6, alphabet="a-z")
    elif cls.kind == "binary":
        body.update(kind="boolean")
    else:
        body.update(kind="numeric", lo=0.0, hi=100.0)
    return body


SPECS = [spec_of(cls) for cls in classes()]


def value_of(spec: dict[str, Any], device: int) -> Any:
    if spec["kind"] in ("categorical", "string"):
        edges = [sum(COUNTS[: i + 1]) for i in range(len(COUNTS))]
        return DOMAIN[next(i for i, edge in enumerate(edges) if device < edge)]
    if spec["kind"] == "boolean":
        return device < 100  # a quarter say yes
    return LOW + device % 5 * STEP


def truth(spec: dict[str, Any]) -> list[float]:
    if spec["kind"] in ("categorical", "string"):
        return [k / DEVICES for k in COUNTS]
    if spec["kind"] == "boolean":
        return [0.25]
    return [sum(LOW + k % 5 * STEP for k in range(DEVICES)) / DEVICES]


@pytest.fixture()
def stack(redis_server: RedisServer, tmp_path: Path) -> Iterator[Stack]:
    with start_stack(redis_server, tmp_path, StackSettings()) as stack:
        for body, answer in zip(SPECS, stack.register(*SPECS), strict=True):
            assert answer["mechanism"] == body["mechanism"]
        with stack.fleet() as fleet:
            for k in range(DEVICES):
                device = fleet.device()
                for body in SPECS:
                    result = device.record(body["name"], value_of(body, k))
                    assert result.ok, (body["name"], result)
            assert fleet.flush(60)
            counters = fleet.counters()
            assert (counters.sent, counters.dropped) == (DEVICES * len(SPECS), {})
        yield stack.with_aggregator()


def test_every_registered_mechanism_end_to_end(stack: Stack) -> None:
    assert {body["mechanism"] for body in SPECS} >= {"hadamard", "grr", "olh", "oue"}
    for body in SPECS:
        result = stack.get(f"/v1/estimates/{body['name']}", timeout=30, confidence=STRICT)
        assert result["n"] == DEVICES
        estimate = result["estimate"]
        if body["kind"] == "string":
            check_discovered(body["name"], estimate)
            continue
        rows = estimate.get("values") or [estimate]
        for row, expected in zip(rows, truth(body), strict=True):
            assert row["ci_low"] <= expected <= row["ci_high"], (body["name"], row, expected)


def check_discovered(name: str, estimate: dict[str, Any]) -> None:
    """A string metric lists what it discovered (400 devices are too few to promise
    a discovery: tests/system/test_strings_e2e.py has a fleet for that).  Every
    listed string that was held and is confident has its share inside its interval
    (at 1 - 1e-8); the detection threshold is a share in (0, 1]; the level counts
    add up to the reports."""
    shares = dict(zip(DOMAIN, truth({"kind": "string"}), strict=True))
    for row in estimate["values"]:
        if row["category"] in shares and row["confident"]:
            assert row["ci_low"] <= shares[row["category"]] <= row["ci_high"], (name, row)
    assert 0 < estimate["detection_threshold"] <= 1
    assert sum(estimate["level_reports"]) == DEVICES
