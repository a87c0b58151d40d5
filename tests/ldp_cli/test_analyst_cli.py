"""``ldp estimate`` / ``ldp metric list`` as an analyst: dates, --since, --format, --consistent.

The real ``ldp`` command (a subprocess) against a live aggregator over a real
Redis (``tests/aggregator/analyst_world.py``), with the analyst key only.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ldp_server.redis_server import RedisServer
from tests.aggregator.analyst_world import PLANS, world
from tests.support.servers import ANALYST_KEY, REPO_ROOT


@pytest.fixture(scope="module")
def live(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    with world(redis_server, tmp_path_factory.mktemp("agg")) as w:
        yield w


def ldp(live: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    return subprocess.run(
        [sys.executable, "-m", "ldp_cli.main", *args, "--url", live["url"], "--key", ANALYST_KEY],
        capture_output=True, text=True, timeout=60, check=False,
        env={**env, "PYTHONPATH": str(REPO_ROOT), "LDP_DATA_DIR": "/nonexistent"},
    )


def day(epoch: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch * 86400))


def test_metric_list_goes_through_the_aggregator(live: dict[str, Any]) -> None:
    done = ldp(live, "metric", "list")
    assert done.returncode == 0, done.stderr
    assert "plan" in done.stdout and "beta_on" in done.stdout
    assert "per device, per metric, per hour" in done.stdout
    listed = json.loads(ldp(live, "metric", "list", "--json").stdout)   # a catalog file
    assert {m["name"] for m in listed["metrics"]} == {"plan", "beta_on"}
    assert not any("unit_text" in m for m in listed["metrics"])


def test_estimate_windows_by_date_and_since(live: dict[str, Any]) -> None:
    today = live["today"]
    week = ldp(live, "estimate", "plan", "--since", "7d")
    assert week.returncode == 0, week.stderr
    # The window asked (7 days to today), then the days in it that hold reports.
    assert (f"window: 7 days (epochs {today - 6}..{today}, {day(today - 6)} to {day(today)}"
            f" UTC), 2 days with reports (epochs {today - 3}..{today}") in week.stdout
    assert "n = 8000 reports" in week.stdout
    dated = ldp(live, "estimate", "plan", "--start", day(today - 3), "--end", day(today))
    assert (f"window: 3 days (epochs {today - 3}..{today - 1}, {day(today - 3)} to "
            f"{day(today - 1)} UTC), 1 day with reports") in dated.stdout
    assert "n = 4000 reports" in dated.stdout
    every = ldp(live, "estimate", "plan")
    assert "window: every day with reports: 3 days (epochs " in every.stdout, every.stdout
    bad = ldp(live, "estimate", "plan", "--start", "2026-02-30")
    assert bad.returncode == 1 and "bad_date" in bad.stderr and "2026-02-30" in bad.stderr


def test_an_empty_window_says_which_days_it_covers(live: dict[str, Any]) -> None:
    """A 30-day window without a report names its 30 days (it said "window: 0 day(s)")."""
    empty = ldp(live, "estimate", "plan", "--start", "2020-01-01", "--end", "2020-01-31")
    assert empty.returncode == 0, empty.stderr
    window = empty.stdout.splitlines()[1]
    assert window.startswith("window: 30 days (epochs 18262..18291, 2020-01-01 to 2020-01-30"
                             " UTC), no reports in it"), window
    assert "SUPPRESSED: no reports in the window" in empty.stdout


def test_a_closed_pipe_ends_ldp_quietly(live: dict[str, Any]) -> None:
    """``ldp estimate plan | head -0``: the reader is gone before ldp writes.  Exit 141
    (128 + SIGPIPE, what the shell reports for cat or grep cut short), nothing on stderr
    (it was a BrokenPipeError traceback).  The same for csv, the metric list and --help."""
    for args in (["estimate", "plan"], ["estimate", "plan", "--format", "csv", "--series"],
                 ["metric", "list"], ["--help"]):
        read, write = os.pipe()
        os.close(read)  # no reader left anywhere: the first write fails with EPIPE
        try:
            argv = args if args == ["--help"] else [*args, "--url", live["url"],
                                                    "--key", ANALYST_KEY]
            done = subprocess.run(
                [sys.executable, "-m", "ldp_cli.main", *argv], stdout=write,
                stderr=subprocess.PIPE, text=True, timeout=60, check=False,
                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            )
        finally:
            os.close(write)
        # argparse drops a --help it cannot write, and exits 0 (its choice); quiet too.
        expected = 0 if args == ["--help"] else 141
        assert (done.returncode, done.stderr) == (expected, ""), (args, done.stderr)


def test_estimate_consistent_column_and_exports(live: dict[str, Any]) -> None:
    plain = ldp(live, "estimate", "plan").stdout.splitlines()
    table = ldp(live, "estimate", "plan", "--consistent").stdout.splitlines()
    assert "consistent" not in plain[2] and table[2].split()[-1] == "consistent"
    rows = [line.split() for line in table[3:]]
    assert [r[0] for r in rows] == PLANS
    consistent = [float(r[-1]) for r in rows]
    assert all(v >= 0 for v in consistent) and abs(sum(consistent) - 1) < 1e-3
    body = json.loads(ldp(live, "estimate", "plan", "--format", "json", "--consistent").stdout)
    exported = ldp(live, "estimate", "plan", "--format", "csv", "--series", "--consistent")
    assert exported.returncode == 0, exported.stderr
    got = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert len(got) == len(PLANS) * 4
    assert float(got[0]["consistent"]) == body["estimate"]["values"][0]["consistent"]
    lines = ldp(live, "estimate", "plan", "--format", "jsonl").stdout.splitlines()
    assert [json.loads(x)["category"] for x in lines] == PLANS
