"""Helpers of the fault tests: spawn the load generator, wait on its ledger, read Redis.

>>> proc = spawn_generator(url, out, seed=1, count=50, epoch=today())   # doctest: +SKIP
>>> wait_for_acks(out, 10, proc)                                        # doctest: +SKIP
>>> report = account(redis_url, ledger, batches, epoch)                 # doctest: +SKIP
>>> report.lost, report.double_counted                                  # doctest: +SKIP
(0, 0)
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from collector.store import Store
from ldp_server import processes
from tests.support.faults_load import Ledger, load_ledger
from tests.support.reports import SPECS, current
from tests.support.servers import ADMIN_KEY, REPO_ROOT, auth

__all__ = [
    "Accounting",
    "account",
    "register_browser",
    "spawn_generator",
    "spawn_ready",
    "stop_process",
    "wait_for_acks",
    "write_figures",
]

ARTIFACTS = REPO_ROOT / "test-artifacts"


#: SIGTERM, then SIGKILL if it lingers: by pid, processes the tests started.
stop_process = processes.stop


def spawn_ready(module: str, *args: object) -> subprocess.Popen[str]:
    """``python -m <module> <args>`` from the repository, once it printed "ready"."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        stop_process(proc)
        raise RuntimeError(f"{module} did not start: {line!r}")
    return proc


def spawn_generator(
    url: str, out: Path, *, seed: int, count: int, epoch: int, budget: float = 240.0
) -> subprocess.Popen[str]:
    """The generator process (tests.support.faults_load), started."""
    return spawn_ready("tests.support.faults_load", url, out, seed, count, epoch, budget)


def acks_so_far(out: Path) -> int:
    try:
        return sum(1 for line in (out / "acks.log").read_text().splitlines() if line)
    except FileNotFoundError:
        return 0


def wait_for_acks(out: Path, n: int, proc: subprocess.Popen[str], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while acks_so_far(out) < n:
        if proc.poll() is not None and acks_so_far(out) < n:
            raise AssertionError(f"the generator exited with {proc.returncode} early")
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {n} batches acknowledged in {timeout}s")
        time.sleep(0.01)


def wait_for_send(out: Path, timeout: float = 30.0) -> str:
    """Block until the generator logs a new "send" line; return it (to kill mid-batch)."""
    path = out / "attempts.log"
    start = path.stat().st_size if path.exists() else 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as f:
            f.seek(start)
            for line in f.read().splitlines():
                if line.startswith("send"):
                    return line
        time.sleep(0.002)
    raise AssertionError("the generator sent nothing")


def register_browser(url: str) -> None:
    r = httpx.post(url + "/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY), timeout=10)
    assert r.status_code in (200, 201), r.text


@dataclass(frozen=True)
class Accounting:
    """Acknowledged reports against what Redis holds afterwards."""

    reports_sent: int
    acknowledged: int
    acknowledged_distinct: int
    counted: int
    lost: int
    double_counted: int
    buckets_expected: list[int]
    buckets_counted: list[int]
    final_accepted: int
    final_duplicates: int
    rejected: int
    failed_attempts: dict[str, int]
    retried_batches: int


def account(
    redis_url: str, ledger: Ledger, batches: list[dict[str, Any]], epoch: int
) -> Accounting:
    ids = ledger.acknowledged_ids(batches)
    letters = Counter("".join(ledger.statuses.values()))

    async def read() -> tuple[list[int], int]:
        store = Store.connect(redis_url)
        try:
            spec = await store.get_metric("browser", 1)
            assert spec is not None
            tallies = await store.read_tallies(spec, [epoch])
            return tallies.get(epoch, ([0] * 4, 0))
        finally:
            await store.close()

    vector, n = asyncio.run(read())
    distinct = len(set(ids))
    return Accounting(
        reports_sent=sum(len(b["report_id"]) for b in batches),
        acknowledged=len(ids),
        acknowledged_distinct=distinct,
        counted=n,
        lost=max(0, distinct - n),
        double_counted=max(0, n - distinct),
        buckets_expected=ledger.expected_buckets(batches),
        buckets_counted=vector,
        final_accepted=letters["a"],
        final_duplicates=letters["d"],
        rejected=letters["r"],
        failed_attempts=dict(ledger.failed_attempts),
        retried_batches=sum(1 for a in ledger.attempts.values() if a > 1),
    )


def write_figures(name: str, figures: dict[str, Any]) -> None:
    """Keep the figures of a fault run in test-artifacts/faults-<name>.json (and print them)."""
    ARTIFACTS.mkdir(exist_ok=True)
    text = json.dumps(figures, indent=1, default=lambda o: asdict(o))
    (ARTIFACTS / f"faults-{name}.json").write_text(text)
    print(f"\n[{name}] {text}")


__all__ += ["acks_so_far", "load_ledger", "wait_for_send"]


def kill_on_evalsha(redis_port: int, kill: Callable[[], None], timeout: float = 30.0) -> bool:
    """Watch Redis with MONITOR and call ``kill`` as soon as an ingest script runs
    (the batch is applied in Redis; its answer is most likely not yet sent).
    False if no script ran within ``timeout``."""
    import redis

    deadline = time.monotonic() + timeout
    client = redis.Redis(port=redis_port, socket_timeout=timeout)
    try:
        with client.monitor() as m:  # type: ignore[no-untyped-call]
            while time.monotonic() < deadline:
                command = m.next_command()["command"]
                if command.upper().startswith("EVALSHA"):
                    kill()
                    return True
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        return False
    finally:
        client.close()
    return False


__all__ += ["kill_on_evalsha"]


def account_ids(redis_url: str, metric: str, acknowledged: set[str]) -> dict[str, int]:
    """Distinct acknowledged ids against the report count Redis holds for the metric over
    the epochs a test can span: the SDK stamps each report with its own clock's epoch, so
    a test that runs across midnight UTC has reports in two (the metric is fresh per test)."""

    async def read() -> int:
        store = Store.connect(redis_url)
        try:
            spec = await store.get_metric(metric)
            assert spec is not None
            now = current(spec.epoch_seconds)
            epochs = list(range(now - 2, now + 2))
            tallies = await store.read_tallies(spec, epochs)
            return sum(total for _, total in tallies.values())
        finally:
            await store.close()

    counted = asyncio.run(read())
    n = len(acknowledged)
    return {"acknowledged_distinct": n, "counted": counted,
            "lost": max(0, n - counted), "double_counted": max(0, counted - n)}


__all__ += ["account_ids"]
