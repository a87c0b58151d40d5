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

from collections.abc import Iterator
from pathlib import Path

import pytest

from ldp_core.mechanisms.prefix_memo import LongitudinalPrefixOLH
from ldp_core.metric import MetricSpec
from ldp_server.redis_server import RedisServer
from tests.support.stack import Stack, StackSettings, start_stack
from tests.system.test_strings_e2e import DEVICES, HEAVY, values
from tests.system.test_strings_e2e import SPEC as STRING_SPEC

EPOCHS = 3
#: The string metric of test_strings_e2e (eps = 4 per report), memoised.
SPEC = {**STRING_SPEC, "name": "search_memo", "longitudinal": {"epsilon_inf": 8.0}}


@pytest.fixture()
def stack(redis_server: RedisServer, tmp_path: Path) -> Iterator[Stack]:
    settings = StackSettings(
        clock_days_back=EPOCHS - 1,  # the last epoch is today's
        # A window of 3 string epochs reads 3 x 325,632 counters: above the default cap.
        max_read_counters=EPOCHS * 325_632,
    )
    with start_stack(redis_server, tmp_path, settings) as stack:
        (answer,) = stack.register(SPEC)
        assert answer["mechanism"] == "prefix_olh"
        assert answer["params"]["levels"] == 2
        with stack.fleet() as fleet:
            devices = [fleet.device() for _ in range(DEVICES)]
            for _ in range(EPOCHS):
                for device, value in zip(devices, values(), strict=True):
                    assert device.record("search_memo", value).ok
                assert fleet.flush(120)
                stack.clock.advance()
            counters = fleet.counters()
            assert (counters.sent, counters.dropped) == (EPOCHS * DEVICES, {})
        yield stack.with_aggregator()


def test_memoised_strings_are_discovered_over_a_window(stack: Stack) -> None:
    body = stack.get("/v1/estimates/search_memo", confidence=1 - 1e-8)
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
