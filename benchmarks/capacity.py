"""A capacity model to a billion devices, from per-report costs measured on this machine.

Measured (one run, this machine):

- collector CPU per report: the real collector (one uvicorn worker, full
  validation and exactly-once dedupe) under loadgen with batches of 1000; the
  worker's CPU seconds (/proc/<pid>/stat) over the reports it accepted;
- Redis CPU per report: ``INFO cpu`` over the same run;
- Redis memory per report (the exactly-once state, ``INFO memory`` /
  ``MEMORY USAGE`` through ``benchmarks.bench_memory``) and per metric-epoch
  (the counters), at several n to show they are flat;
- bytes on the wire per report: a gzip batch of 1000 GRR reports.

Modelled: devices x metrics per day -> reports per day -> peak reports/s (peak
to average ``PEAK``); collector cores and Redis masters for CPU at ``UTIL``
utilisation; Redis memory for the counters (``RETENTION_DAYS`` of epochs, each
hot metric spread over ``SHARDS`` slots) plus the per-report state held for the
acceptance window (``WINDOW_DAYS``), in masters of ``MASTER_GIB`` usable; and
network.  The first resource to saturate is named per row.

    .venv/bin/python benchmarks/capacity.py [--quick]
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bench_ingest, bench_memory
from benchmarks._services import Stack, redis_cpu_seconds
from benchmarks._table import table
from ldp_core import mechanism
from ldp_core.wire import Envelope, encode_batch

PEAK = 3.0  # peak-to-average of reports/s over a day
UTIL = 0.6  # target CPU utilisation of a core
WINDOW_DAYS = 3  # exactly-once state is kept while an epoch accepts reports
RETENTION_DAYS = 31  # counters are kept this long
SHARDS = 4  # slots per hot metric-epoch
MASTER_GIB = 20.0  # usable memory of one Redis master
DEVICES = (10**6, 10**8, 10**9)
METRICS = (1, 20, 100)


@dataclass(frozen=True)
class Costs:
    """Per-report costs measured on this machine."""

    collector_cpu_us: float
    redis_cpu_us: float
    state_bytes: float
    counters_bytes: float
    wire_bytes: float
    reports_per_s: float


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wire_bytes_per_report(reports: int = 1000) -> float:
    """Bytes of one gzip JSON batch of GRR reports (d = 64), per report."""
    m = mechanism("grr", epsilon=1.0, domain_size=64)
    rng = random.Random(0)
    batch = [
        Envelope("bench.capacity", 1, 20_000, os.urandom(16).hex(), os.urandom(32).hex(),
                 m.encode(m.randomize(rng.randrange(64), rng=rng)))
        for _ in range(reports)
    ]
    return len(gzip.compress(orjson.dumps(encode_batch(batch)))) / reports


def measure_cpu(duration: float) -> tuple[float, float, float]:
    """(collector CPU us/report, Redis CPU us/report, reports/s) under batched load."""
    stack = Stack.start()
    try:
        collector = stack.collector(workers=1)
        stack.register(collector.url, bench_ingest.BENCH_SPEC)
        epoch = int(time.time() // 86_400)
        cpu_before, redis_before = _cpu_seconds(collector.pid), redis_cpu_seconds(stack.redis_url)
        result = bench_ingest.load(collector.url, 1000, duration, seed=1, epoch=epoch)
        cpu = _cpu_seconds(collector.pid) - cpu_before
        redis_cpu = redis_cpu_seconds(stack.redis_url) - redis_before
        accepted = max(int(result["accepted"]), 1)
        return 1e6 * cpu / accepted, 1e6 * redis_cpu / accepted, float(result["reports_per_s"])
    finally:
        stack.stop()


def measure(quick: bool) -> tuple[Costs, list[dict[str, float]]]:
    ns = (10**4, 10**5) if quick else (10**5, 10**6)
    memory = bench_memory.redis_memory(ns)
    flat = [
        {"n": float(r["n"]), "state_bytes": (r["dedupe"] + r["other"]) / r["n"],
         "counters_bytes": float(r["tally"])}
        for r in memory
    ]
    collector_us, redis_us, rate = measure_cpu(2.0 if quick else 8.0)
    costs = Costs(collector_us, redis_us, flat[-1]["state_bytes"], flat[-1]["counters_bytes"],
                  wire_bytes_per_report(), rate)
    return costs, flat


def model_rows(costs: Costs) -> list[tuple[str, ...]]:
    rows = []
    for devices in DEVICES:
        for metrics in METRICS:
            per_day = devices * metrics
            peak = per_day / 86_400 * PEAK
            collector_cores = peak * costs.collector_cpu_us / 1e6 / UTIL
            redis_cores = peak * costs.redis_cpu_us / 1e6 / UTIL
            state = per_day * WINDOW_DAYS * costs.state_bytes
            counters = metrics * RETENTION_DAYS * SHARDS * costs.counters_bytes
            memory_gib = (state + counters) / 2**30
            by_cpu, by_memory = math.ceil(redis_cores), math.ceil(memory_gib / MASTER_GIB)
            first = "Redis CPU" if by_cpu >= by_memory else "Redis memory"
            if collector_cores > max(by_cpu, by_memory) * 4:
                first = "collector CPU"
            rows.append((
                f"{devices:.0e}", str(metrics), f"{peak:,.0f}", f"{collector_cores:,.1f}",
                f"{max(by_cpu, by_memory, 1):,}", f"{memory_gib:,.1f}",
                f"{peak * costs.wire_bytes * 8 / 1e6:,.1f}", first,
            ))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller calibration runs")
    args = parser.parse_args()
    costs, flat = measure(args.quick)
    print("Per-report costs measured here (batches of 1000, one collector worker):\n")
    print(table(("measure", "value"), [
        ("collector CPU per report", f"{costs.collector_cpu_us:.2f} us"),
        ("Redis CPU per report", f"{costs.redis_cpu_us:.2f} us"),
        ("exactly-once state per report", f"{costs.state_bytes:.1f} bytes"),
        ("counters per metric-epoch (OLH, d = 1024)", f"{costs.counters_bytes / 1e6:.2f} MB"),
        ("gzip batch on the wire per report", f"{costs.wire_bytes:.1f} bytes"),
        ("reports/s, one worker", f"{costs.reports_per_s:,.0f}"),
    ]))
    print("\nFlat in n (one metric-epoch each):\n")
    print(table(("n", "state bytes/report", "counters bytes"), [
        (f"{r['n']:.0e}", f"{r['state_bytes']:.1f}", f"{r['counters_bytes']:,.0f}") for r in flat
    ]))
    print(f"\nModel (peak/average {PEAK:g}, {UTIL:.0%} CPU, state kept {WINDOW_DAYS} days, "
          f"counters {RETENTION_DAYS} days x {SHARDS} shards, {MASTER_GIB:g} GiB per master):\n")
    print(table(
        ("devices", "metrics/day", "peak reports/s", "collector cores", "Redis masters",
         "Redis GiB", "ingress Mbit/s", "saturates first"),
        model_rows(costs),
    ))


if __name__ == "__main__":
    main()
