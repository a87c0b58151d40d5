"""A distribution metric through the real stack: SDK -> collector -> Redis -> aggregator.

600 SDK devices (a ``Fleet``) record known values of a numeric metric that
serves the mean, the distribution and quantiles; the real collector (uvicorn on
loopback) writes real Redis, which then holds only the Square Wave's cell
counters (flat in n); the aggregator (uvicorn) answers with the buckets, the
quantiles and the mean, each interval covering the truth.

"Covers" is asked at confidence 1 - 1e-8 per interval: with 8 buckets, 3
quantiles and the mean (12 intervals) the test fails by chance with
probability <= 1.2e-7 (normal approximation over 600 independent reports).
The estimator's target is the law of the value rounded to the grid and spread
over its cell: each value moves by at most 1.5 h (h = 100/64), so a quantile
of it is within 1.5 h of the population's (that slack is added), and a
bucket's share differs by the few values near its edges, far below the
intervals' half-width (about 0.3 here).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from ldp_core.metric import MetricSpec
from ldp_server.redis_server import RedisServer
from tests.support.servers import ANALYST_KEY, auth
from tests.support.stack import Stack, StackSettings, start_stack

STRICT = 1 - 1e-8
DEVICES = 600
SPEC: dict[str, Any] = {
    "name": "e2e_latency",
    "kind": "numeric",
    "lo": 0.0,
    "hi": 100.0,
    "epsilon": 4.0,
    "statistics": ["mean", "distribution", "quantiles"],
    "min_reports": 1,
}
MEAN_ONLY: dict[str, Any] = {
    "name": "e2e_mean_only",
    "kind": "numeric",
    "lo": 0.0,
    "hi": 100.0,
    "epsilon": 4.0,
    "min_reports": 1,
}
#: Device k's value: a skewed spread with a tail (quantiles differ from the mean).
VALUES = np.round(100 * np.random.default_rng(5).beta(2, 5, size=DEVICES), 1)


@pytest.fixture()
def stack(redis_server: RedisServer, tmp_path: Path) -> Iterator[Stack]:
    with start_stack(redis_server, tmp_path, StackSettings()) as stack:
        _, mean_only = stack.register(SPEC, MEAN_ONLY)
        assert mean_only["mechanism"] != "square_wave"
        with stack.fleet() as fleet:
            for value in VALUES:
                device = fleet.device()
                result = device.record(SPEC["name"], float(value))
                assert result.ok, result
            assert fleet.flush(60)
            assert fleet.counters().sent == DEVICES
        yield stack.with_aggregator()


def test_distribution_quantiles_and_mean_end_to_end(stack: Stack) -> None:
    m = MetricSpec.from_json(SPEC).build()
    assert m.name == "square_wave"
    # Redis holds only the cells' counters for the metric (M of them, whatever n).
    with redis.Redis(port=stack.redis.port) as client:
        tally_keys = [k for k in client.scan_iter(match="ldp:{m:e2e_latency:*}:t")]
        fields = {f for key in tally_keys for f in client.hkeys(key)}
    counters = {int(f) for f in fields if f.isdigit()}
    assert tally_keys and counters <= set(range(m.num_counters))
    assert fields - {str(i).encode() for i in counters} <= {b"n"}  # the report count at most

    body = stack.get(
        f"/v1/estimates/{SPEC['name']}", confidence=STRICT, buckets=8, quantiles="0.25,0.5,0.9"
    )
    assert body["n"] == DEVICES and body["mechanism"] == "square_wave"
    estimate = body["estimate"]
    assert estimate["ci_low"] <= VALUES.mean() <= estimate["ci_high"]
    buckets = estimate["distribution"]["buckets"]
    assert len(buckets) == 8
    assert sum(b["smoothed"] for b in buckets) == pytest.approx(1.0)
    for b in buckets:
        inside = (b["low"] <= VALUES) & ((b["high"] > VALUES) | (b["high"] == 100.0))
        assert b["ci_low"] <= inside.mean() <= b["ci_high"], (b, inside.mean())
    for row in estimate["quantiles"]:
        truth = float(np.quantile(VALUES, row["q"]))
        assert row["ci_low"] <= row["value"] <= row["ci_high"]
        slack = 1.5 * 100 / m.k  # type: ignore[attr-defined]
        assert row["ci_low"] - slack <= truth <= row["ci_high"] + slack, (row, truth)
    assert [row["q"] for row in estimate["quantiles"]] == [0.25, 0.5, 0.9]

    # The dashboard draws it: the band, the smoothed line, a mark per quantile.
    url = stack.aggregator_url
    login = httpx.post(f"{url}/login", data={"key": ANALYST_KEY}, headers={"Origin": url})
    assert login.status_code == 303, login.text
    page = httpx.get(
        f"{url}/", cookies={"ldp_dashboard": login.cookies["ldp_dashboard"]}, timeout=60
    )
    assert page.status_code == 200
    section = page.text[page.text.index('id="metric-e2e_latency"') :]
    figure = section[
        section.index("distribution-figure") : section.index(
            "</figure>", section.index("distribution-figure")
        )
    ]
    assert figure.count('class="band"') == 1 and figure.count('class="quantile"') == 3
    assert "<script" not in page.text

    # Bad asks are a 422 with a stable code; a mean-only metric has no distribution.
    for name, params in (
        (SPEC["name"], {"quantiles": "0.5,1.5"}),
        (SPEC["name"], {"quantiles": "median"}),
        (SPEC["name"], {"buckets": 0}),
        (MEAN_ONLY["name"], {"quantiles": "0.5"}),
    ):
        bad = httpx.get(
            f"{url}/v1/estimates/{name}", params=params, headers=auth(ANALYST_KEY), timeout=30
        )
        assert bad.status_code == 422, bad.text
        assert bad.json()["code"] == "bad_quantiles"
