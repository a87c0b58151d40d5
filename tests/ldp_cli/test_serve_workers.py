"""Several workers and /metrics: ``ldp serve`` drops a killed worker's live series;
plain ``uvicorn --workers N`` warns that each worker's /metrics is its own.

Real processes only: ``ldp serve collector --workers 2`` (and ``uvicorn --factory
collector.app:create_app --workers 2``) over a real Redis, scraped over HTTP; a
worker is killed with SIGKILL (no atexit runs, as in an OOM kill).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ldp_server import processes
from ldp_server.redis_server import free_port
from tests.support.servers import REPO_ROOT, collector_env, start_uvicorn

#: The start of the warning a worker logs (once) when its /metrics is its own only.
WARNING = "this worker's /metrics counts its own requests only"


def scrape(url: str) -> str:
    """One /metrics on a new connection (any worker may answer)."""
    answer = httpx.get(url + "/metrics", timeout=10)
    assert answer.status_code == 200
    return answer.text


def live_pids(text: str) -> set[int]:
    """The workers whose live (per-pid) process series a scrape holds."""
    return {int(p) for p in re.findall(r'ldp_process_start_time_seconds\{pid="(\d+)"\}', text)}


def workers(text: str) -> float:
    found = re.search(r"^ldp_workers (\S+)$", text, re.M)
    assert found, text[:2000]
    return float(found.group(1))


def requests_served(text: str) -> float:
    """Every /metrics answered so far, summed over the workers (a counter: never back)."""
    found = re.search(r'^ldp_http_request_duration_seconds_count\{method="GET",'
                      r'route="/metrics",service="collector",status="200"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def children(parent: int) -> set[int]:
    """The live (not zombie) worker processes of ``parent`` (multiprocessing spawn)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent and fields[0] != "Z" and b"spawn_main" in cmdline:
            found.add(int(entry.name))
    return found


def test_a_killed_worker_leaves_no_live_series_under_ldp_serve(
    redis_url: str, tmp_path: Path
) -> None:
    """SIGKILL one of two workers: uvicorn starts another; /metrics then says 2 workers
    (it said 3: the dead worker's live gauges stayed) and no series of the dead pid,
    while the counters keep what the dead worker counted."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LDP_", "PROMETHEUS"))}
    env.update(collector_env(redis_url), PYTHONPATH=str(REPO_ROOT))
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        serve = subprocess.Popen(
            [sys.executable, "-m", "ldp_cli.main", "serve", "collector", "--port", str(port),
             "--workers", "2"],
            env=env, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        assert processes.wait_http_ok(url + "/healthz", serve, 60), log.read_text()
        deadline = time.monotonic() + 60
        while len(seen := live_pids(scrape(url))) < 2 or len(children(serve.pid)) < 2:
            assert time.monotonic() < deadline, (seen, log.read_text())
            time.sleep(0.05)
        first = children(serve.pid)
        assert seen == first, (seen, first)
        before = requests_served(scrape(url))
        victim = min(first)
        os.kill(victim, signal.SIGKILL)

        deadline = time.monotonic() + 60
        while True:
            now = children(serve.pid)
            if len(now) == 2 and victim not in now:
                text = scrape(url)
                if live_pids(text) == now and workers(text) == 2:
                    break
            assert time.monotonic() < deadline, (victim, now, scrape(url)[:3000])
            time.sleep(0.2)
        assert f'pid="{victim}"' not in text
        assert requests_served(text) > before  # the dead worker's counts are kept
        assert WARNING not in log.read_text()  # the multiprocess folder is set
    finally:
        processes.stop(serve, 30)


def test_plain_uvicorn_with_workers_warns_once_per_worker(
    redis_url: str, tmp_path: Path
) -> None:
    """``uvicorn --workers 2`` without PROMETHEUS_MULTIPROC_DIR: each worker's /metrics is
    its own (not the service's), so each worker logs one WARNING that says so and how
    to fix it (it said nothing)."""
    env = collector_env(redis_url)
    with start_uvicorn("collector.app:create_app", env, log_dir=tmp_path, workers=2) as svc:
        deadline = time.monotonic() + 30
        while svc.log().count(WARNING) < 2:
            assert time.monotonic() < deadline, svc.log()
            time.sleep(0.2)
        for _ in range(4):
            scrape(svc.url)
    warnings = [line for line in svc.log().splitlines() if WARNING in line]
    assert len(warnings) == 2, warnings  # one per worker, not one per scrape
    assert all(line.startswith("WARNING:") and "PROMETHEUS_MULTIPROC_DIR" in line
               and "ldp serve" in line for line in warnings), warnings
