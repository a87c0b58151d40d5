"""Unlinkable in time, the JS SDK: sdk-js/test/e2e-timing.ts against a real collector.

The collector accepts the simulated past epochs (``LDP_ACCEPTANCE_HOURS``); the
Node test drives devices on a simulated clock over 8 daily epochs and notes each
request as it leaves for the collector (see tests/client_sdk/test_token_timing.py,
the same for the Python SDK): from an install's second epoch on, no report batch
follows any of its token requests within the delay, only first epochs have their
token fetched in the flush that sends them, and the top-up moment and the hold
survive a restart.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import redis

from ldp_server.redis_server import RedisServer
from tests.support.servers import ADMIN_KEY, INGEST_KEY, auth, start_collector

SDK = Path(__file__).resolve().parents[2] / "sdk-js"
SPECS = [
    {"name": "js.tt.plan", "kind": "categorical", "domain": ["free", "pro"], "epsilon": 1.0,
     "mechanism": "grr"},
    {"name": "js.tt.theme", "kind": "categorical", "domain": ["dark", "light"], "epsilon": 1.0,
     "mechanism": "grr"},
]


def test_js_reports_never_follow_their_token_request_within_the_delay(
    built: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    with start_collector(redis_server.url, log_dir=tmp_path / "collector",
                         extra_env={"LDP_ACCEPTANCE_HOURS": str(24 * 30)}) as collector:
        for spec in SPECS:
            answer = httpx.post(f"{collector.url}/v1/metrics", json=spec, headers=auth(ADMIN_KEY),
                                timeout=10)
            assert answer.status_code in (200, 201), answer.text
        (tmp_path / "state").mkdir()
        env = {**os.environ, "LDP_E2E_URL": collector.url, "LDP_E2E_KEY": INGEST_KEY,
               "LDP_E2E_STATE": str(tmp_path / "state")}
        env.pop("LDP_ISSUER_KEYS", None)
        done = subprocess.run(["node", "--test", "dist/test/e2e-timing.js"], cwd=SDK, env=env,
                              capture_output=True, text=True, timeout=300)
    summary = [line for line in done.stdout.splitlines() if line.startswith("# ")]
    print("\n".join(summary))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "# fail 0" in summary and "# pass 3" in summary, summary
