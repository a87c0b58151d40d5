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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from client_sdk import Fleet, UrllibTransport
from collector.store import Store
from ldp_core.mechanisms.piecewise_memo import LongitudinalPiecewise
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


@pytest.fixture()
def collector_service(redis_server: RedisServer, tmp_path: Path) -> Iterator[ServiceProcess]:
    """The collector, accepting reports of the last EPOCHS days."""
    import redis

    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    extra = {"LDP_ACCEPTANCE_HOURS": str(24 * (EPOCHS + 2))}
    with start_collector(redis_server.url, log_dir=tmp_path / "collector",
                         extra_env=extra) as service:
        yield service


async def _window_tally(redis_url: str, spec: MetricSpec, epochs: range) -> tuple[np.ndarray, int]:
    store = Store.connect(redis_url)
    try:
        rows = await store.read_tallies(spec, list(epochs))
    finally:
        await store.close()
    total = sum((np.asarray(t, dtype=np.int64) for t, _ in rows.values()),
                start=np.zeros(spec.build().num_counters, dtype=np.int64))
    return total, sum(n for _, n in rows.values())


@pytest.fixture()
def stack(
    collector_service: ServiceProcess, redis_server: RedisServer, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    answer = httpx.post(f"{collector_service.url}/v1/metrics", json=SPEC,
                        headers=auth(ADMIN_KEY), timeout=10)
    assert answer.status_code in (200, 201), answer.text
    spec = MetricSpec.from_json(answer.json())
    assert isinstance(spec.build(), LongitudinalPiecewise)
    now = [time.time() - EPOCHS * DAY]
    first_epoch = int(now[0] // DAY)
    fleet = Fleet(collector_service.url, api_key=INGEST_KEY, background=False,
                  transport=UrllibTransport(use_env_proxies=False), clock=lambda: now[0])
    try:
        assert fleet.refresh_metrics(5)
        devices = [(fleet.device(), v) for v in VALUES for _ in range(PER_VALUE)]
        for _ in range(EPOCHS):
            for device, value in devices:
                result = device.record(SPEC["name"], value)
                assert result.ok, result
            now[0] += DAY
        assert fleet.flush(60)
        assert fleet.counters().sent == EPOCHS * len(devices)
    finally:
        fleet.close(0)
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis_server.url, "LDP_ANALYST_KEYS": ANALYST_KEY}
    with start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path / "agg") as agg:
        yield {"url": agg.url, "first": first_epoch, "spec": spec, "redis": redis_server.url}


def _get(stack: dict[str, Any], **params: Any) -> dict[str, Any]:
    answer = httpx.get(f"{stack['url']}/v1/estimates/{SPEC['name']}", params=params,
                       headers=auth(ANALYST_KEY), timeout=30)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_memoised_mean_window_through_the_real_stack(stack: dict[str, Any]) -> None:
    spec: MetricSpec = stack["spec"]
    m = spec.build()
    assert isinstance(m, LongitudinalPiecewise)
    first = stack["first"]
    for start, end in ((first, first + EPOCHS), (first + 2, first + 5)):
        body = _get(stack, start=start, end=end, confidence=STRICT)
        epochs = end - start
        assert body["window"]["epochs"] == epochs
        tally, n = asyncio.run(_window_tally(stack["redis"], spec, range(start, end)))
        assert body["n"] == n == epochs * len(VALUES) * PER_VALUE
        estimate = body["estimate"]
        assert f"over {epochs} epochs" in estimate["stderr_basis"]
        bound = math.sqrt(m.window_mean_variance(tally, n, epochs))
        naive = math.sqrt(m.mean_variance(tally, n))
        assert estimate["stderr"] == pytest.approx(bound, rel=1e-9)
        assert estimate["value"] == pytest.approx(float(tally @ np.array(m.report_values())) / n)
        assert bound > naive  # the correlation term is counted
        assert estimate["ci_low"] <= TRUTH <= estimate["ci_high"], (estimate, TRUTH)
