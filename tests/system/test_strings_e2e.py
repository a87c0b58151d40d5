"""Strings nobody listed, through the real stack: SDK -> collector -> Redis -> aggregator.

2,000 SDK devices (a ``Fleet``) record one string each for a ``string`` metric
(a-z, at most 6 symbols, case folded, eps = 4); the real collector (uvicorn on
loopback) validates the reports and keeps only the prefix_olh counters per
epoch in real Redis; the aggregator discovers the strings (GET
/v1/estimates/{name}) and ``ldp estimate`` prints them.

Shares: "hello" 30% (recorded as "Hello" and "HELLO" too: one string after
case folding), "world" 20%, "ab" 10%, the rest 40% spread over 800 distinct
random strings.  At n = 2,000 and eps = 4 the last level holds ~1,000 reports:
"ab" (10%) is ~100 of them, over 9 null standard deviations, and its prefixes
are over 5 at the earlier levels, so each is discovered but with probability
< 1e-9.  Intervals are checked at 1 - 1e-8 each (3 of them).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldp_server.redis_server import RedisServer
from tests.support.servers import ANALYST_KEY
from tests.support.stack import Stack, StackSettings, start_stack

REPO_ROOT = Path(__file__).resolve().parents[2]
DEVICES = 2000
SPEC = {
    "name": "search",
    "kind": "string",
    "epsilon": 4.0,
    "max_length": 6,
    "alphabet": "a-z",
    "casefold": True,
    "min_reports": 1,
}
HEAVY = {"hello": 600, "world": 400, "ab": 200}


def values() -> list[str]:
    rng = random.Random(7)
    out = ["Hello", "HELLO", "hello"] * 200 + ["world"] * 400 + ["ab"] * 200
    tail = sorted(
        {
            "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 6)))
            for _ in range(900)
        }
        - set(HEAVY)
    )
    out += [tail[k % 800] for k in range(DEVICES - len(out))]
    return out


@pytest.fixture()
def stack(redis_server: RedisServer, tmp_path: Path) -> Iterator[Stack]:
    with start_stack(redis_server, tmp_path, StackSettings()) as stack:
        (answer,) = stack.register(SPEC)
        assert answer["mechanism"] == "prefix_olh"
        with stack.fleet() as fleet:
            for value in values():
                assert fleet.device().record("search", value).ok
            assert not fleet.device().record("search", "café").ok  # off the alphabet
            assert fleet.flush(120)
            counters = fleet.counters()
            assert (counters.sent, counters.dropped) == (DEVICES, {})
        yield stack.with_aggregator()


def test_strings_are_discovered_through_the_stack(stack: Stack) -> None:
    body = stack.get("/v1/estimates/search", confidence=1 - 1e-8)
    assert body["n"] == DEVICES and body["kind"] == "string"
    assert body["normalisation"] == "NFC, casefold"
    estimate = body["estimate"]
    listed = {row["category"]: row for row in estimate["values"] if row["confident"]}
    assert set(HEAVY) <= set(listed), list(listed)
    for value, count in HEAVY.items():
        row = listed[value]
        assert row["ci_low"] <= count / DEVICES <= row["ci_high"], row
    assert 0 < estimate["detection_threshold"] < 0.1
    assert sum(estimate["level_reports"]) == DEVICES

    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ldp_cli.main",
            "estimate",
            "search",
            "--url",
            stack.aggregator_url,
            "--key",
            ANALYST_KEY,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**env, "PYTHONPATH": str(REPO_ROOT), "LDP_DATA_DIR": "/nonexistent"},
    )
    assert done.returncode == 0, done.stderr
    assert "hello" in done.stdout and "not seen: a string below" in done.stdout
