"""A memoised numeric metric's window through the real stack: SDK -> collector -> Redis
-> aggregator.

200 SDK devices (a ``Fleet``, one fresh secret each) hold one fixed value of a
memoised Piecewise mean (on [0, 100], eps_1 = 1, eps_inf = 2; half at 12.5,
half at 71.3, off the grid) and report it in each of 8 daily epochs; the real
collector (uvicorn on loopback) writes real Redis; the aggregator (uvicorn)
serves the window.  Its stderr must be exactly the bound of
``window_mean_variance`` on the tallies Redis holds (read back through the
collector's store), larger than the independent-reports stderr of the same
tallies, and the interval must cover the true mean; so must a 3-epoch
sub-window.  (The window's coverage is measured in
tests/aggregator/test_window_numeric.py; here the plumbing is checked end to end.)

"Covers" is asked at confidence 1 - 1e-7 per interval; with 2 intervals the
test fails by chance with probability <= 2e-7 (normal approximation; the window
mean is a sum over 200 independent devices).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collector.store import Store
from ldp_core.mechanisms.piecewise_memo import LongitudinalPiecewise
from ldp_core.metric import MetricSpec
from ldp_server.redis_server import RedisServer
from tests.support.stack import Stack, StackSettings, start_stack

EPOCHS = 8
VALUES = (12.5, 71.3)
PER_VALUE = 100
TRUTH = sum(VALUES) / len(VALUES)
STRICT = 1 - 1e-7
SPEC: dict[str, Any] = {
    "name": "dwell_minutes",
    "kind": "numeric",
    "lo": 0.0,
    "hi": 100.0,
    "epsilon": 1.0,
    "mechanism": "piecewise",
    "epoch": "day",
    "longitudinal": {"epsilon_inf": 2.0},
    "min_reports": 100,
}


async def _window_tally(redis_url: str, spec: MetricSpec, epochs: range) -> tuple[np.ndarray, int]:
    store = Store.connect(redis_url)
    try:
        rows = await store.read_tallies(spec, list(epochs))
    finally:
        await store.close()
    total = sum(
        (np.asarray(t, dtype=np.int64) for t, _ in rows.values()),
        start=np.zeros(spec.build().num_counters, dtype=np.int64),
    )
    return total, sum(n for _, n in rows.values())


@pytest.fixture()
def window(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[Stack, MetricSpec]]:
    """The stack after EPOCHS days of reports (accepted: the collector takes the last
    EPOCHS days), and the metric as the collector registered it."""
    settings = StackSettings(acceptance_hours=24 * (EPOCHS + 2), clock_days_back=EPOCHS)
    with start_stack(redis_server, tmp_path, settings) as stack:
        (answer,) = stack.register(SPEC)
        spec = MetricSpec.from_json(answer)
        assert isinstance(spec.build(), LongitudinalPiecewise)
        with stack.fleet() as fleet:
            devices = [(fleet.device(), v) for v in VALUES for _ in range(PER_VALUE)]
            stack.record_daily(SPEC["name"], devices, EPOCHS)
            assert fleet.flush(60)
            assert fleet.counters().sent == EPOCHS * len(devices)
        yield stack.with_aggregator(), spec


def test_memoised_mean_window_through_the_real_stack(window: tuple[Stack, MetricSpec]) -> None:
    stack, spec = window
    m = spec.build()
    assert isinstance(m, LongitudinalPiecewise)
    first = stack.clock.first_day
    for start, end in ((first, first + EPOCHS), (first + 2, first + 5)):
        body = stack.get(
            f"/v1/estimates/{SPEC['name']}", timeout=30, start=start, end=end, confidence=STRICT
        )
        epochs = end - start
        assert body["window"]["epochs"] == epochs
        tally, n = asyncio.run(_window_tally(stack.redis.url, spec, range(start, end)))
        assert body["n"] == n == epochs * len(VALUES) * PER_VALUE
        estimate = body["estimate"]
        assert f"over {epochs} epochs" in estimate["stderr_basis"]
        bound = math.sqrt(m.window_mean_variance(tally, n, epochs))
        naive = math.sqrt(m.mean_variance(tally, n))
        assert estimate["stderr"] == pytest.approx(bound, rel=1e-9)
        assert estimate["value"] == pytest.approx(float(tally @ np.array(m.report_values())) / n)
        assert bound > naive  # the correlation term is counted
        assert estimate["ci_low"] <= TRUTH <= estimate["ci_high"], (estimate, TRUTH)
