"""A memoised metric's window through the real stack: SDK -> collector -> Redis -> aggregator.

300 SDK devices (a ``Fleet``, one fresh secret each) hold one fixed value of a
two-level GRR metric (d = 4, eps_1 = 1, eps_inf = 2) and report it in each of
10 daily epochs (an injected clock steps through the days); the real collector
(uvicorn on loopback) writes real Redis; the aggregator (uvicorn) serves the
window.  The window's stderr must be the correlated bound of
``aggregator.estimate`` (every device in every epoch: the bound is exact), well
above the naive one that treats the 3000 reports as independent, and the
intervals must cover the true shares; so must a 5-epoch sub-window, and the
series and compare endpoints serve the same variances.

"Covers" is asked at confidence 1 - 1e-7 per interval; with 8 such intervals
the test fails by chance with probability <= 1e-6 (normal approximation; the
window count is a sum over 300 independent devices).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ldp_core import Mechanism
from ldp_core.metric import MetricSpec
from ldp_server.redis_server import RedisServer
from tests.support.stack import Stack, StackSettings, start_stack

EPOCHS = 10
DOMAIN = ["free", "basic", "pro", "team"]
DEVICES_PER_VALUE = (120, 90, 60, 30)  # 300 devices
SHARES = [k / sum(DEVICES_PER_VALUE) for k in DEVICES_PER_VALUE]
STRICT = 1 - 1e-7
SPEC: dict[str, Any] = {
    "name": "plan_tier",
    "kind": "categorical",
    "domain": DOMAIN,
    "epsilon": 1.0,
    "mechanism": "grr",
    "epoch": "day",
    "longitudinal": {"epsilon_inf": 2.0},
    "min_reports": 100,
}


def correlated_and_naive(m: Mechanism, n: int, value: float, epochs: int) -> tuple[float, float]:
    """(stderr with the within-device bound, stderr as if reports were independent)."""
    c = min(max(value * n, 0.0), float(n))
    naive = m.count_variance(n, c)
    bound = naive + (epochs - 1) * m.permanent.count_variance(n, c)  # type: ignore[attr-defined]
    return math.sqrt(bound) / n, math.sqrt(naive) / n


@pytest.fixture()
def window(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[Stack, Mechanism]]:
    """The stack after EPOCHS days of reports, and the mechanism it runs.  The fleet's
    clock starts EPOCHS days back; the default acceptance window is 96 hours."""
    settings = StackSettings(acceptance_hours=24 * (EPOCHS + 2), clock_days_back=EPOCHS)
    with start_stack(redis_server, tmp_path, settings) as stack:
        (answer,) = stack.register(SPEC)
        m = MetricSpec.from_json(answer).build()  # the mechanism the stack runs
        assert m.levels == 2 and m.name == "grr"
        with stack.fleet() as fleet:
            devices = [
                (fleet.device(), DOMAIN[v])
                for v, k in enumerate(DEVICES_PER_VALUE)
                for _ in range(k)
            ]
            stack.record_daily(SPEC["name"], devices, EPOCHS)
            assert fleet.flush(30)
            counters = fleet.counters()
            assert (counters.sent, counters.dropped) == (EPOCHS * len(devices), {})
        yield stack.with_aggregator(), m


def test_memoised_window_through_the_real_stack(window: tuple[Stack, Mechanism]) -> None:
    stack, m = window
    first = stack.clock.first_day
    name = SPEC["name"]
    body = stack.get(
        f"/v1/estimates/{name}",
        timeout=30,
        start=first,
        end=first + EPOCHS,
        confidence=STRICT,
        series="epoch",
    )
    assert body["window"]["epochs"] == EPOCHS
    n = body["n"]
    assert n == EPOCHS * sum(DEVICES_PER_VALUE)
    estimate = body["estimate"]
    assert "10 epochs" in estimate["stderr_basis"]
    for row, share in zip(estimate["values"], SHARES, strict=True):
        bound, naive = correlated_and_naive(m, n, row["value"], EPOCHS)
        assert row["stderr"] == pytest.approx(bound, rel=1e-9)
        assert row["stderr"] > 1.4 * naive  # the naive interval is far too narrow here
        assert row["ci_low"] <= share <= row["ci_high"], (row, share)
    # The series: one epoch each, no correlation to count.
    assert len(body["series"]) == EPOCHS
    for epoch_row in body["series"]:
        values = epoch_row["estimate"]["values"]
        for row in values:
            one, naive = correlated_and_naive(m, epoch_row["n"], row["value"], 1)
            assert row["stderr"] == pytest.approx(one, rel=1e-9) and one == naive
    # A sub-window of 5 epochs uses T = 5.
    sub = stack.get(
        f"/v1/estimates/{name}", timeout=30, start=first + 2, end=first + 7, confidence=STRICT
    )
    assert sub["window"]["epochs"] == 5
    for row, share in zip(sub["estimate"]["values"], SHARES, strict=True):
        bound, _ = correlated_and_naive(m, sub["n"], row["value"], 5)
        assert row["stderr"] == pytest.approx(bound, rel=1e-9)
        assert row["ci_low"] <= share <= row["ci_high"], (row, share)
    # Compare serves the window's stderr: se_a + se_b of the window.
    versus = stack.get(
        f"/v1/estimates/{name}/compare",
        timeout=30,
        a="free",
        b="team",
        start=first,
        end=first + EPOCHS,
    )
    rows = {r["category"]: r for r in (versus["a"], versus["b"])}
    assert rows["free"]["stderr"] == pytest.approx(estimate["values"][0]["stderr"], rel=1e-12)
    assert rows["team"]["stderr"] == pytest.approx(estimate["values"][3]["stderr"], rel=1e-12)
