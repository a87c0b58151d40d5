"""The locust load test end to end, briefly: no failures, and Redis counts = what locust sent.

Runs ``loadtest/run.sh`` (real Redis, the collector and the aggregator over uvicorn on
127.0.0.1, locust headless with master + workers) for a few seconds at a low rate.
No timing is asserted: timings live in benchmarks/.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Only look locust up: importing it here would gevent-monkey-patch the test process.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("locust") is None, reason="locust is in the dev extra"
)


@pytest.mark.timeout(120)
def test_loadtest_counts_match(tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "RUN_TIME": "5s",
        "USERS": "4",
        "SPAWN_RATE": "4",
        "PROCESSES": "2",
        "LDP_LT_THINK_MIN": "0.2",
        "LDP_LT_THINK_MAX": "0.5",
        "OUT_DIR": str(tmp_path / "out"),
    }
    done = subprocess.run(
        ["bash", str(ROOT / "loadtest" / "run.sh")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=110,
    )
    summary_path = tmp_path / "out" / "summary.md"
    summary = summary_path.read_text() if summary_path.exists() else ""
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "RESULT: OK" in summary
    rows = re.findall(r"^\| (lt\.[a-z_.]+) \| (\d+) \| (\d+) \| (\d+) \| (\w+) \|$",
                      summary, re.MULTILINE)
    assert len(rows) == 5, summary
    for name, sent, accepted, stored, match in rows:
        assert int(sent) > 0, f"{name}: nothing sent"
        assert sent == accepted == stored and match == "yes", f"{name}: {sent} {accepted} {stored}"
    failures = re.search(r"^\| \d+ \| (\d+) \|", summary, re.MULTILINE)
    assert failures is not None and failures.group(1) == "0", summary
