"""``ldp demo`` end to end at a small scale: real Redis, HTTP services, SDK fleet.

The demo's true values use a fixed seed, but the SDK randomises with the OS
CSPRNG (as on a device), so the estimates vary from run to run.  The check
that every estimate lies within 6 stderr of the truth fails with probability
<= 22 * 2e-9 < 1e-7 (normal approximation; 22 values at n = 2000).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from ldp_cli.keys import Keys
from ldp_cli.stack import Stack
from tests.support.servers import REPO_ROOT
from tests.support.tokens import TEST_TOKEN_KEY
from tests.support.tokens import test_key as issuer_key


def test_demo_small(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "ldp_cli.main", "demo", "--devices", "2000"],
        capture_output=True,
        text=True,
        timeout=240,  # four metrics (8,000 reports at 2,000 devices)
        cwd=REPO_ROOT,
        env=env,
        check=False,
    )
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, out[-3000:] + err[-3000:]
    # (a), (b), (c) in order.
    marks = [
        out.index(m)
        for m in (
            "(a) Randomised-response survey",
            "Randomised-response survey: 20,000 people",
            "(b) Privacy audit",
            "0 violations",
            "every day for a year",
            "(c) The system end to end",
            "demo.crashed v1: boolean, mechanism",
            "demo.browser v1: categorical, mechanism",
            "demo.session_minutes v1: numeric, mechanism",
            "demo.search v1: string, mechanism prefix_olh",
            "\ndashboard: http://",
            "stopped everything the demo started",
        )
    ]
    assert marks == sorted(marks)
    # The fleet pins the key of the issuer the demo started: no unpinned-key warning.
    pin = re.search(r"^token issuer key ([0-9a-f]{64}) \(pinned by the fleet\)$", out, re.M)
    assert pin and "without a pin" not in err and "not pinned" not in err
    # The progress bar goes to stderr, never to stdout.
    assert "2,000 devices reporting" in err and "8,000 reports delivered" in err
    assert "devices reporting" not in out
    # Each estimate with its epsilon, unit, n and interval, beside the truth.
    assert out.count("n = 2000 reports, 95% intervals") == 4
    assert "discovered without a list: 'weather'" in out  # 20% of the searches
    assert "epsilon = 2 per report, per device, per metric, per day" in out
    rows = re.findall(
        r"^(\S.*?)\s+(-?\d+\.\d+)\s+(\d+\.\d+)\s+\[\s*(-?\d+\.\d+),\s+(-?\d+\.\d+)\]\s+"
        r"(-?\d+\.\d+)\s+(yes|NO)$",
        out,
        re.M,
    )
    # Listed search terms below the discovery cut ("?") are not estimates of a value
    # chosen in advance (the winner's curse): the rows of the other metrics remain.
    rows = [r for r in rows if not r[0].startswith("?")]
    assert len(rows) == 1 + 20 + 1, out
    for label, value, stderr, _low, _high, truth, _inside in rows:
        assert abs(float(value) - float(truth)) <= 6 * float(stderr), label
    # Everything it started is stopped: the printed ports are closed, the folder is gone.
    for url in re.findall(r"^(?:collector|aggregator):\s+http://127\.0\.0\.1:(\d+)", out, re.M):
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", int(url))) != 0
    folder = re.search(r"^data:\s+(\S+)", out, re.M)
    assert folder and not Path(folder.group(1)).exists()


@pytest.mark.parametrize("where", ["redis", "key_file"])
def test_the_demo_pins_the_key_its_issuer_signs_with(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Stack.issuer_key_id`` reads the key where the collector loads it (dev: made
    once in Redis; else LDP_TOKEN_KEY_FILE), not over HTTP; it is the key served."""
    if where == "redis":
        monkeypatch.delenv("LDP_TOKEN_KEY_FILE", raising=False)
    else:
        monkeypatch.setenv("LDP_TOKEN_KEY_FILE", str(TEST_TOKEN_KEY))
    keys = Keys(*(secrets.token_urlsafe(32) for _ in range(3)))
    stack = Stack.start(tmp_path / "data", keys)
    try:
        pin = stack.issuer_key_id()
        request = urllib.request.Request(  # noqa: S310 (loopback)
            f"{stack.collector_url}/v1/tokens/key",
            headers={"Authorization": f"Bearer {keys.ingest}"})
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            served = json.loads(answer.read())["key_id"]
    finally:
        stack.stop()
    assert re.fullmatch(r"[0-9a-f]{64}", pin) and pin == served
    assert (pin == issuer_key().public.key_id.hex()) == (where == "key_file")
