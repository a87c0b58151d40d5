"""A fresh aggregator's first estimate of a metric (cold) against its second (warm).

The tallies and the /healthz polling of ``bench_paging`` (GRR over d values,
every counter set in each of 4 shards, /healthz every 50 ms while the request
runs).  Each round starts a new aggregator process over the same Redis, so
every round's first request is cold: lazily built tables, first use of the
worker threads.  The aggregator's CPU seconds for the request come from
/proc (its whole process).

Run: ``nice .venv/bin/python benchmarks/bench_cold_estimate.py [--rounds 3] [--d 4096]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._services import ANALYST_KEY, start_uvicorn
from benchmarks._table import header, table
from benchmarks.bench_paging import E0, _fill, _while
from ldp_server.redis_server import RedisServer

__all__ = ["measure", "section"]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(d: int, epochs: int, rounds: int) -> list[list[Any]]:
    """One row per (round, cold | warm) request."""
    rows: list[list[Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer.start(Path(tmp) / "redis")
        try:
            _fill(redis.url, d, epochs)
            env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis.url, "LDP_ANALYST_KEYS": ANALYST_KEY}
            query = f"/v1/estimates/dense?start={E0}&end={E0 + epochs}"
            for r in range(rounds):
                with start_uvicorn("aggregator.app:create_app", env, Path(tmp)) as agg:
                    for which in ("cold", "warm"):
                        cpu = _cpu_seconds(agg.pid)
                        seconds, lat = _while(agg.url, query)
                        cpu = _cpu_seconds(agg.pid) - cpu
                        rows.append([
                            r + 1, which, f"{d} x {epochs}", f"{seconds:.2f} s", f"{cpu:.2f} s",
                            f"{1000 * statistics.median(lat):.0f} ms" if lat else "-",
                            f"{1000 * max(lat):.0f} ms" if lat else "-", len(lat),
                        ])
        finally:
            redis.stop()
    return rows


def section(d: int = 4096, epochs: int = 8, rounds: int = 3) -> str:
    rows = measure(d, epochs, rounds)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return header(f"A fresh aggregator's first estimate (load average {load} at the end)") + table(
        ["round", "request", "counters x epochs", "wall", "aggregator CPU", "healthz median",
         "healthz worst", "polls"],
        rows,
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--epochs", type=int, default=8)
    args = ap.parse_args()
    print(section(args.d, args.epochs, args.rounds))
