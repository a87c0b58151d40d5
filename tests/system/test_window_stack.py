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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from client_sdk import Fleet, UrllibTransport
from ldp_core import Mechanism
from ldp_core.metric import MetricSpec
from ldp_server.redis_server import RedisServer
from tests.support.servers import (
    ADMIN_KEY,
    ANALYST_KEY,
    INGEST_KEY,
    ServiceProcess,
    auth,
    start_collector,
    start_uvicorn,
)

DAY = 86_400
EPOCHS = 10
DOMAIN = ["free", "basic", "pro", "team"]
DEVICES_PER_VALUE = (120, 90, 60, 30)  # 300 devices
SHARES = [k / sum(DEVICES_PER_VALUE) for k in DEVICES_PER_VALUE]
STRICT = 1 - 1e-7
SPEC = {
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
def collector_service(redis_server: RedisServer, tmp_path: Path) -> Iterator[ServiceProcess]:
    """The collector, accepting reports of the last EPOCHS days (the fleet's clock starts
    EPOCHS days back; the default acceptance window is 96 hours)."""
    import redis

    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    extra = {"LDP_ACCEPTANCE_HOURS": str(24 * (EPOCHS + 2))}
    with start_collector(redis_server.url, log_dir=tmp_path / "collector",
                         extra_env=extra) as service:
        yield service


@pytest.fixture()
def stack(
    collector_service: ServiceProcess, redis_server: RedisServer, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    answer = httpx.post(f"{collector_service.url}/v1/metrics", json=SPEC,
                        headers=auth(ADMIN_KEY), timeout=10)
    assert answer.status_code in (200, 201), answer.text
    m = MetricSpec.from_json(answer.json()).build()  # the mechanism the stack runs
    assert m.levels == 2 and m.name == "grr"
    now = [time.time() - EPOCHS * DAY]
    first_epoch = int(now[0] // DAY)
    fleet = Fleet(collector_service.url, api_key=INGEST_KEY, background=False,
                  transport=UrllibTransport(use_env_proxies=False), clock=lambda: now[0])
    try:
        assert fleet.refresh_metrics(5)
        devices = [(fleet.device(), DOMAIN[v]) for v, k in enumerate(DEVICES_PER_VALUE)
                   for _ in range(k)]
        for _ in range(EPOCHS):
            for device, value in devices:
                result = device.record(SPEC["name"], value)
                assert result.ok, result
            now[0] += DAY
        assert fleet.flush(30)
        counters = fleet.counters()
        assert (counters.sent, counters.dropped) == (EPOCHS * len(devices), {})
    finally:
        fleet.close(0)
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis_server.url, "LDP_ANALYST_KEYS": ANALYST_KEY}
    with start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path / "agg") as agg:
        yield {"url": agg.url, "first": first_epoch, "m": m}


def _get(stack: dict[str, Any], path: str, **params: Any) -> dict[str, Any]:
    answer = httpx.get(stack["url"] + path, params=params, headers=auth(ANALYST_KEY), timeout=30)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_memoised_window_through_the_real_stack(stack: dict[str, Any]) -> None:
    first = stack["first"]
    name = SPEC["name"]
    body = _get(stack, f"/v1/estimates/{name}", start=first, end=first + EPOCHS,
                confidence=STRICT, series="epoch")
    assert body["window"]["epochs"] == EPOCHS
    n = body["n"]
    assert n == EPOCHS * sum(DEVICES_PER_VALUE)
    m: Mechanism = stack["m"]
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
    sub = _get(stack, f"/v1/estimates/{name}", start=first + 2, end=first + 7,
               confidence=STRICT)
    assert sub["window"]["epochs"] == 5
    for row, share in zip(sub["estimate"]["values"], SHARES, strict=True):
        bound, _ = correlated_and_naive(m, sub["n"], row["value"], 5)
        assert row["stderr"] == pytest.approx(bound, rel=1e-9)
        assert row["ci_low"] <= share <= row["ci_high"], (row, share)
    # Compare serves the window's stderr: se_a + se_b of the window.
    versus = _get(stack, f"/v1/estimates/{name}/compare", a="free", b="team",
                  start=first, end=first + EPOCHS)
    rows = {r["category"]: r for r in (versus["a"], versus["b"])}
    assert rows["free"]["stderr"] == pytest.approx(estimate["values"][0]["stderr"], rel=1e-12)
    assert rows["team"]["stderr"] == pytest.approx(estimate["values"][3]["stderr"], rel=1e-12)

