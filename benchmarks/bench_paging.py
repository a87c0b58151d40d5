"""Bounded reads: what one estimate request costs, and whether /healthz waits for it.

A private redis-server and the aggregator (uvicorn, one worker, loopback).  A
categorical GRR metric over d values, daily epochs, every counter set in every
one of the 4 shards (the dense worst case of a busy metric), written through
the collector store's own ingest path.  For windows of growing length:

- the request's wall time and counters x epochs read per second (the bound
  ``LDP_MAX_READ_COUNTERS`` divided by this rate is the longest a request
  takes);
- /healthz latency, median and worst, polled every 50 ms while the request
  runs, against the idle median measured in the same run (the reference);
- the whole series read in pages of 8 epochs against one unpaged request.

Run: ``.venv/bin/python benchmarks/bench_paging.py [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._services import ANALYST_KEY, start_uvicorn
from benchmarks._table import header, table
from ldp_server.redis_server import RedisServer

__all__ = ["measure", "section"]

E0 = 20_000


def _get(url: str) -> tuple[float, bytes, dict[str, str]]:
    req = urllib.request.Request(url)  # noqa: S310 -- loopback
    req.add_header("Authorization", f"Bearer {ANALYST_KEY}")
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as resp:  # noqa: S310
        body = resp.read()
        return time.perf_counter() - start, body, dict(resp.headers)


def _fill(url: str, d: int, epochs: int) -> None:
    from tests.support.tallies import register, write_tallies

    spec = register(url, {"name": "dense", "kind": "categorical", "epoch": "day",
                          "domain": [f"v{i}" for i in range(d)], "epsilon": 1.0,
                          "mechanism": "grr", "min_reports": 1})
    # 16 reports per epoch and 8 per counter: each counter lands in (almost) every shard.
    write_tallies(url, spec, {E0 + k: ([8] * d, 16) for k in range(epochs)})


def _while(base: str, path: str) -> tuple[float, list[float]]:
    """Wall time of GET path, and the /healthz latencies polled meanwhile."""
    done: dict[str, float] = {}
    worker = threading.Thread(target=lambda: done.update(t=_get(base + path)[0]))
    latencies: list[float] = []
    worker.start()
    while worker.is_alive():
        latencies.append(_get(base + "/healthz")[0])
        time.sleep(0.05)
    worker.join()
    return done["t"], latencies


def measure(d: int, windows: tuple[int, ...]) -> list[list[Any]]:
    """One row per window length (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer.start(Path(tmp) / "redis")
        try:
            _fill(redis.url, d, max(windows))
            env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis.url, "LDP_ANALYST_KEYS": ANALYST_KEY,
                   "LDP_MAX_READ_COUNTERS": str(d * max(windows))}
            with start_uvicorn("aggregator.app:create_app", env, Path(tmp)) as agg:
                base = agg.url
                idle = statistics.median(_get(base + "/healthz")[0] for _ in range(20))
                rows = []
                for w in windows:
                    query = f"/v1/estimates/dense?start={E0}&end={E0 + w}"
                    seconds, lat = _while(base, query)
                    unpaged = _get(base + query + "&series=epoch")[0]
                    paged, link = 0.0, query + "&series=epoch&limit=8"
                    while link:
                        t, _, headers = _get(base + link)
                        paged += t
                        link = headers.get("link", "").partition(">")[0].lstrip("<")
                    rows.append([
                        f"{d} x {w}", f"{d * w:,}", f"{seconds:.2f} s",
                        f"{d * w / seconds:,.0f}",
                        f"{1000 * statistics.median(lat):.1f} ms" if lat else "-",
                        f"{1000 * max(lat):.0f} ms" if lat else "-", len(lat),
                        f"{1000 * idle:.1f} ms", f"{unpaged:.2f} s", f"{paged:.2f} s",
                    ])
                return rows
        finally:
            redis.stop()


def section(quick: bool = False) -> str:
    d, windows = (2048, (4, 16)) if quick else (4096, (8, 16, 32))
    rows = measure(d, windows)
    return header("Bounded reads: one estimate request and /healthz") + table(
        ["counters x epochs", "counter-epochs", "window estimate", "counter-epochs/s",
         "healthz median (during)", "healthz worst (during)", "polls", "healthz idle",
         "series unpaged", "series in pages of 8"],
        rows,
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    print(section(ap.parse_args().quick))
