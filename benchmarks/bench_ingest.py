"""Ingest benchmark: the real collector against a minimal endpoint and raw Redis.

Starts a private Redis, then the collector (``collector.app:create_app``, full
validation and exactly-once dedupe) with 1 and 2 uvicorn workers, and the
minimal FastAPI endpoint (``benchmarks.minimal_endpoint``) the same way; drives
each from a separate process (``benchmarks/loadgen.py``: pre-built requests,
keep-alive loopback connections, bounded time and count) at batch sizes 1,
100 and 1000.  In the same run it measures the raw Redis ceiling for the
same increments (redis-benchmark, pipelined HINCRBY; a redis-py pipeline loop
if redis-benchmark is not on PATH) and Redis' own CPU while it served.

Run: ``.venv/bin/python benchmarks/bench_ingest.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._services import INGEST_KEY, REPO_ROOT, Stack, redis_cpu_seconds
from benchmarks._table import header, table

__all__ = ["BENCH_SPEC", "IngestRun", "load", "one_run", "redis_ceiling", "section", "summarise"]

#: The metric every ingest run reports to (GRR, one counter per report).
BENCH_SPEC: dict[str, Any] = {
    "name": "bench.ingest", "kind": "categorical", "epsilon": 1.0, "mechanism": "grr",
    "domain": [f"v{i}" for i in range(64)], "epoch": "day", "min_reports": 1,
}
CONNECTIONS = {1: 8, 100: 4, 1000: 4}
PLAIN = "collector, plain uvicorn --workers"


@dataclass(frozen=True)
class IngestRun:
    """Median of repeated loadgen runs for one (server, workers, batch)."""

    server: str
    workers: int
    batch: int
    reports_per_s: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    redis_cores: float
    errors: int
    accepted_ok: bool
    exhausted: bool


def load(url: str, batch: int, duration: float, seed: int, epoch: int) -> dict[str, Any]:
    """One loadgen subprocess run; its JSON result plus Redis CPU is added by the caller."""
    argv = [
        sys.executable, str(REPO_ROOT / "benchmarks" / "loadgen.py"),
        "--url", url, "--key", INGEST_KEY, "--metric", BENCH_SPEC["name"],
        "--version", "1", "--epoch", str(epoch), "--mechanism", "grr",
        "--domain-size", str(len(BENCH_SPEC["domain"])), "--batch", str(batch),
        "--connections", str(CONNECTIONS.get(batch, 4)), "--duration", str(duration),
        "--seed", str(seed), "--max-reports", str(int(250_000 * duration)),
        "--max-requests", str(int(8_000 * duration)),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300 + duration, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def one_run(url: str, redis_url: str, batch: int, duration: float, seed: int,
            epoch: int) -> dict[str, Any]:
    """One loadgen run with the Redis CPU it caused.

    Redis CPU is sampled around the whole subprocess; the loadgen's own setup
    (building requests) does not touch Redis, so cores are charged to the
    measured window only.
    """
    before = redis_cpu_seconds(redis_url)
    result = load(url, batch, duration, seed, epoch)
    result["redis_cores"] = (redis_cpu_seconds(redis_url) - before) / result["seconds"]
    return result


def summarise(server: str, workers: int, batch: int, runs: list[dict[str, Any]]) -> IngestRun:
    """Medians of reports/s, p50, p99 and Redis cores over repeated runs."""

    def med(k: str) -> float:
        return statistics.median(float(x[k]) for x in runs)

    return IngestRun(
        server, workers, batch, med("reports_per_s"), med("requests_per_s"), med("p50_ms"),
        med("p99_ms"), med("redis_cores"), sum(int(x["errors"]) for x in runs),
        all(x["accepted"] == x["reports"] for x in runs), any(x["exhausted"] for x in runs),
    )


def redis_ceiling(redis_url: str, requests: int = 300_000) -> tuple[str, float]:
    """(method, HINCRBY/s) for pipelined increments of the same kind (random field of 64)."""
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    tool = shutil.which("redis-benchmark")
    if tool:
        out = subprocess.run(
            [tool, "-h", "127.0.0.1", "-p", port, "-n", str(requests), "-P", "100",
             "-c", "4", "-r", "64", "--csv", "HINCRBY", "bench:ceiling", "__rand_int__", "1"],
            capture_output=True, text=True, timeout=120, check=True,
        )
        last = out.stdout.strip().splitlines()[-1]
        return "redis-benchmark -P 100 -c 4", float(last.split(",")[1].strip('"'))
    import random

    import redis

    client = redis.Redis.from_url(redis_url)
    rng = random.Random(0)
    start = time.perf_counter()
    done = 0
    while done < requests:
        pipe = client.pipeline(transaction=False)
        for _ in range(1000):
            pipe.hincrby("bench:ceiling", str(rng.randrange(64)), 1)
        pipe.execute()
        done += 1000
    client.close()
    return "redis-py pipeline of 1000", done / (time.perf_counter() - start)


def _loop_note() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "The event loop here is asyncio's."
    return ("The event loop here is uvloop's (the server extra installs it), which sets "
            "TCP_NODELAY on every TCP socket itself: the plain rows are not stalled.")


def section(quick: bool = False) -> str:
    """The ingest tables (Markdown)."""
    duration = 1.5 if quick else 4.0
    repeats = 1 if quick else 3
    batches = (1, 100, 1000)
    worker_counts = (1,) if quick else (1, 2)
    runs: list[IngestRun] = []
    with Stack.start() as stack:
        epoch = int(time.time() // 86400)
        method, ceiling = redis_ceiling(stack.redis_url, 100_000 if quick else 500_000)
        for workers in worker_counts:
            # Both servers up at once, their runs interleaved (collector, minimal,
            # collector, ...): a drift of the machine's speed during the section then
            # weighs on both sides of every ratio alike.
            collector = stack.collector(workers)
            minimal = stack.app("benchmarks.minimal_endpoint:create_app", workers)
            try:
                stack.register(collector.url, BENCH_SPEC)
                for batch in batches:
                    pair: dict[str, list[dict[str, Any]]] = {"collector": [], "minimal": []}
                    for r in range(repeats):
                        seed = 7 * batch + workers + 1000 * r
                        for server, svc in (("collector", collector), ("minimal", minimal)):
                            pair[server].append(one_run(svc.url, stack.redis_url, batch,
                                                        duration, seed, epoch))
                    runs += [summarise(server, workers, batch, pair[server])
                             for server in ("collector", "minimal")]
            finally:
                for svc in (collector, minimal):
                    svc.stop()
                    stack.services.remove(svc)
            if workers > 1:
                # The same collector under plain `uvicorn --workers N` (Nagle on, see
                # benchmarks/uvicorn_tcp.py): one run per batch, for the record.
                svc = stack.collector(workers, nodelay=False)
                try:
                    for batch in (1, 100):
                        seed = 11 * batch + workers
                        runs.append(summarise(PLAIN, workers, batch, [
                            one_run(svc.url, stack.redis_url, batch, duration, seed, epoch)]))
                finally:
                    svc.stop()
                    stack.services.remove(svc)
    by_key = {(r.server, r.workers, r.batch): r for r in runs}
    rows = []
    for r in runs:
        ref = by_key.get(("minimal", r.workers, r.batch))
        ratio = ""
        if ref and r.server == "collector":
            ratio = f"{r.reports_per_s / ref.reports_per_s:.2f}"
        flags = []
        if r.errors:
            flags.append(f"{r.errors} errors")
        if r.server == "collector" and not r.accepted_ok:
            flags.append("accepted != sent")
        if r.exhausted:
            flags.append("generator ran out (lower bound)")
        rows.append((
            r.server, r.workers, r.batch, f"{r.reports_per_s:,.0f}", f"{r.requests_per_s:,.0f}",
            f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.redis_cores:.2f}", ratio,
            "; ".join(flags) or "ok",
        ))
    goals = []
    best_batched = max((r.reports_per_s for r in runs
                        if r.server == "collector" and r.batch >= 100), default=0.0)
    goals.append(("batched ingest (full validation + dedupe) >= 100,000 reports/s",
                  f"{best_batched:,.0f}", "met" if best_batched >= 100_000 else
                  f"missed ({best_batched / 100_000:.0%} of goal)"))
    for workers in worker_counts:
        col = by_key.get(("collector", workers, 1))
        ref = by_key.get(("minimal", workers, 1))
        if col and ref:
            share = col.requests_per_s / ref.requests_per_s
            goals.append((f"single-report requests/s >= 80% of minimal ({workers} worker(s))",
                          f"{share:.0%}", "met" if share >= 0.8 else "missed"))
    conns = ", ".join(f"{c} connections at batch {b}" for b, c in CONNECTIONS.items())
    text = [
        header("Ingest (POST /v1/reports over loopback HTTP)"),
        f"Load from a separate process ({conns}),"
        f" {duration:g} s per run, median of {repeats} run(s), the collector's and the "
        "minimal endpoint's runs interleaved; GRR over 64 values, one counter "
        "per report; every report a fresh device token and report id.  "
        "The generator shares the machine's cores with the server.  Multi-worker rows run "
        "uvicorn's own supervisor on a TCP_NODELAY listener (benchmarks/uvicorn_tcp.py); the "
        f"'{PLAIN}' rows (1 run) show `uvicorn --workers N` as shipped, whose listener "
        "loses TCP_NODELAY (Kludex/uvicorn#3149) under asyncio's loop: each keep-alive "
        "response then waits for a delayed ACK (~40 ms).  "
        f"{_loop_note()}\n",
        table(("server", "workers", "batch", "reports/s", "requests/s", "p50 ms", "p99 ms",
               "Redis CPU (cores)", "reports/s vs minimal", "check"), rows),
        "",
        f"Raw Redis ceiling, same run ({method}): {ceiling:,.0f} HINCRBY/s.\n",
        table(("goal", "measured", "verdict"), goals),
    ]
    return "\n".join(text) + "\n"


def main() -> None:
    """Print the ingest section."""
    ap = argparse.ArgumentParser(description="ingest benchmark")
    ap.add_argument("--quick", action="store_true")
    print(section(ap.parse_args().quick))


if __name__ == "__main__":
    main()
