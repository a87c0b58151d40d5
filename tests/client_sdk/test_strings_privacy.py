"""A string metric on the device: no true string is spooled, kept or logged.

The SDK codes a string (NFC, casefold, the alphabet) and randomises it before
anything reaches the spool; a refused string is never quoted in a warning.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client, DeliveryConfig
from ldp_core.metric import MetricSpec
from tests.support.sdk_fixtures import spool_rows

KEY = "ingest-key-for-tests"
DAY = 86400.0
SEARCH = {"name": "search", "kind": "string", "epsilon": 4.0, "max_length": 6,
          "alphabet": "a-z", "casefold": True}


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_no_true_string_in_spool_state_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """40 epochs of the secret "Zebra" (a-z, case folded: code of "zebra").

    1. No file of the device and no log line holds the string (either case) or its code.
    2. Every spooled payload decodes as a prefix_olh report (one counter of 3 S g).
    3. Not the same payload every time: a report is a uniform level and seed (3 x 2048
       choices) then a GRR bucket, so 40 equal payloads have probability < 1e-100; a
       device spooling a fixed encoding of its value would fail.
    """
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    c = Client("http://127.0.0.1:9", api_key=KEY, state_dir=tmp_path, metrics=[SEARCH],
               background=False, clock=clock, delivery=DeliveryConfig(backoff_base=0.01))
    m = MetricSpec.from_json(SEARCH).build()
    code = m.check_value("zebra")
    try:
        for _ in range(40):
            assert c.record("search", "Zebra").ok
            clock.t += DAY
        assert c.record("search", "Zebra!").status == "invalid_value"  # off the alphabet
        c.flush(0.3)  # fails: the collector is a dead port, log lines are written
    finally:
        c.close(0.1)
    leaks = ["Zebra", "zebra", "ZEBRA", str(code)]
    for path in tmp_path.iterdir():
        if path.is_file():
            data = path.read_bytes()
            for leak in leaks:
                assert leak.encode() not in data, (path.name, leak)
    assert caplog.records
    for leak in leaks:
        assert leak not in caplog.text
    payloads: list[Any] = [json.loads(row[6]) for row in spool_rows(tmp_path)
                           if row[2] == "search"]
    assert len(payloads) == 40
    reports = [m.decode(p) for p in payloads]
    assert all(0 <= r < m.num_counters for r in reports)  # type: ignore[operator]
    assert len(set(reports)) > 1


SEARCH_MEMO = {**SEARCH, "name": "search_memo", "epsilon": 2.0,
               "longitudinal": {"epsilon_inf": 6.0}}


def test_memoised_string_survives_restarts_and_keeps_no_string(tmp_path: Path) -> None:
    """The memoised string form on the device: three epochs of "Zebra", a restart,
    three more with the same instantaneous seeds.

    1. Every report is randomize_memoised(code of "zebra", secret, memo_context(spec))
       with its seed: the documented derivation, so the JS port can be checked.
    2. After the restart the same three payloads come back (the permanent response
       is a function of the persisted secret, never stored), and all six share one
       (level, seed) row; a redrawn permanent response keeps the row with
       probability sum_j w_j^2 / S < 1e-3 and the three payloads with less.
    3. The lifetime ledger charged eps_inf once, under a keyed digest: no file holds
       the string or its code.
    """
    import random

    from client_sdk._device import memo_context, payload_text

    clock, rng = Clock(), random.Random()
    spec = MetricSpec.from_json(SEARCH_MEMO)
    m = spec.build()
    code = m.check_value("zebra")

    def three_reports() -> list[str]:
        c = Client("http://127.0.0.1:9", api_key=KEY, state_dir=tmp_path,
                   metrics=[SEARCH_MEMO], background=False, clock=clock, rng=rng)
        try:
            for seed in (1, 2, 3):
                rng.seed(seed)
                assert c.record("search_memo", "Zebra").ok
                clock.t += DAY
            (life,) = c.privacy_report().lifetime
            assert (life.memoised_values, life.spent) == (1, 6.0)
            return [row[6] for row in spool_rows(tmp_path)[-3:]]
        finally:
            c.close(0)

    before = three_reports()
    secret = (tmp_path / "device_secret").read_bytes()
    assert before == [
        payload_text(m.encode(m.randomize_memoised(  # type: ignore[attr-defined]
            code, secret, memo_context(spec), rng=random.Random(seed))))
        for seed in (1, 2, 3)
    ]
    after = three_reports()
    assert after == before
    rows = {m.decode(json.loads(p)) // m.g for p in before + after}  # type: ignore[attr-defined]
    assert len(rows) == 1
    for path in tmp_path.iterdir():
        if path.is_file():
            data = path.read_bytes()
            for leak in ("Zebra", "zebra", str(code)):
                assert leak.encode() not in data, (path.name, leak)
