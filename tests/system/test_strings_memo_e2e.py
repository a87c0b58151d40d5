"""The memoised string form through the real stack, over several epochs.

2,000 SDK devices (a ``Fleet`` with a settable clock) record the same string
in each of 3 daily epochs for a string metric with ``"longitudinal":
{"epsilon_inf": 8}`` (eps = 4 per report); the real collector (uvicorn,
loopback) validates and counts them in real Redis; the aggregator discovers
the strings over the 3-epoch window (GET /v1/estimates/{name}), its stderr
counting the correlation of one device's reports (``discover(epochs=3)``).

Shares: "hello" 30%, "world" 20%, "ab" 10% (as tests/system/test_strings_e2e.py).
"ab", the lightest, is ~300 of the ~3,000 last-level reports of the window; its
chance to be missed is below 1e-9 (the detection threshold, 0.044 at 95% power
on simulated windows of this fleet, is under half its share), and at confidence
1 - 1e-8 each of the three intervals misses with probability 1e-8.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from client_sdk import Fleet, UrllibTransport
from ldp_core.mechanisms.prefix_memo import LongitudinalPrefixOLH
from ldp_core.metric import MetricSpec
from ldp_server.redis_server import RedisServer
from tests.support.servers import (
    ADMIN_KEY,
    ANALYST_KEY,
    INGEST_KEY,
    ServiceProcess,
    auth,
    start_uvicorn,
)
from tests.system.test_strings_e2e import DEVICES, HEAVY, values

EPOCHS = 3
DAY = 86400.0
SPEC = {
    "name": "search_memo",
    "kind": "string",
    "epsilon": 4.0,
    "max_length": 6,
    "alphabet": "a-z",
    "casefold": True,
    "min_reports": 1,
    "longitudinal": {"epsilon_inf": 8.0},
}


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture()
def aggregator(
    collector_service: ServiceProcess, redis_server: RedisServer, tmp_path: Path
) -> Iterator[str]:
    answer = httpx.post(
        f"{collector_service.url}/v1/metrics", json=SPEC, headers=auth(ADMIN_KEY), timeout=10
    )
    assert answer.status_code in (200, 201), answer.text
    assert answer.json()["mechanism"] == "prefix_olh"
    assert answer.json()["params"]["levels"] == 2
    clock = Clock(time.time() - (EPOCHS - 1) * DAY)  # the last epoch is today's
    fleet = Fleet(
        collector_service.url,
        api_key=INGEST_KEY,
        background=False,
        clock=clock,
        transport=UrllibTransport(use_env_proxies=False),
    )
    try:
        assert fleet.refresh_metrics(5)
        devices = [fleet.device() for _ in range(DEVICES)]
        for _ in range(EPOCHS):
            for device, value in zip(devices, values(), strict=True):
                assert device.record("search_memo", value).ok
            assert fleet.flush(120)
            clock.t += DAY
        counters = fleet.counters()
        assert (counters.sent, counters.dropped) == (EPOCHS * DEVICES, {})
    finally:
        fleet.close(0)
    # A window of 3 string epochs reads 3 x 325,632 counters: above the default cap.
    env = {
        "LDP_ENV": "dev",
        "LDP_REDIS_URL": redis_server.url,
        "LDP_ANALYST_KEYS": ANALYST_KEY,
        "LDP_MAX_READ_COUNTERS": str(EPOCHS * 325_632),
    }
    with start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path / "agg") as agg:
        yield agg.url


def test_memoised_strings_are_discovered_over_a_window(aggregator: str) -> None:
    answer = httpx.get(
        f"{aggregator}/v1/estimates/search_memo",
        params={"confidence": 1 - 1e-8},
        headers=auth(ANALYST_KEY),
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["n"] == EPOCHS * DEVICES and body["kind"] == "string"
    assert body["epsilon_inf"] == 8.0
    estimate = body["estimate"]
    assert estimate["stderr_basis"].startswith("memoised: correlated reports")
    listed = {row["category"]: row for row in estimate["values"] if row["confident"]}
    assert set(HEAVY) <= set(listed), list(listed)
    for value, count in HEAVY.items():
        row = listed[value]
        assert row["ci_low"] <= count / DEVICES <= row["ci_high"], row
    assert sum(estimate["level_reports"]) == EPOCHS * DEVICES
    m = MetricSpec.from_json(SPEC).build()
    assert isinstance(m, LongitudinalPrefixOLH)
