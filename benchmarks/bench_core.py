"""Mechanism core benchmark: device randomize, simulation and aggregation.

Run: ``.venv/bin/python benchmarks/bench_core.py`` (also part of ``ldp bench``).
Each figure is a median over repeated runs on this machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aggregator import estimate
from benchmarks._table import header, median_seconds, table
from ldp_core import Mechanism, mechanism
from ldp_core.simulate import tallies


def build(name: str, d: int, epsilon: float = 1.0) -> Mechanism:
    if name == "one_bit_mean":
        return mechanism(name, epsilon=epsilon, lo=0.0, hi=100.0)
    if name == "binary_rr":
        return mechanism(name, epsilon=epsilon)
    return mechanism(name, epsilon=epsilon, domain_size=d)


def device_table(calls: int = 2000) -> str:
    rows = []
    for name, d, goal in [
        ("binary_rr", 2, ""),
        ("one_bit_mean", 2, ""),
        ("grr", 1024, "<= 20"),
        ("olh", 1024, "<= 20"),
        ("sue", 1024, ""),
        ("oue", 1024, "<= 200"),
    ]:
        m = build(name, d)
        value = 42.0 if m.kind == "mean" else 1 % m.domain_size
        seconds = median_seconds(
            lambda m=m, value=value: [m.randomize(value) for _ in range(calls)]
        )
        rows.append((name, d, f"{seconds / calls * 1e6:.1f}", goal))
    return table(("mechanism", "d", "us per report (OS CSPRNG)", "goal us"), rows)


def simulation_table(n: int = 1_000_000) -> str:
    rows = []
    rng = np.random.default_rng(0)
    for name, d in [("grr", 1024), ("oue", 1024), ("olh", 1024), ("grr", 16), ("oue", 16)]:
        m = build(name, d)
        values = rng.integers(0, d, size=n)
        seconds = median_seconds(lambda m=m, values=values: tallies(m, values, seed=1), repeats=3)
        rows.append((name, d, f"{n:,}", f"{n / seconds / 1e6:.1f}M"))
    return table(("mechanism", "d", "n", "simulated reports/s (goal >= 1M)"), rows)


def aggregation_table() -> str:
    rows = []
    for name, d in [("olh", 1024), ("oue", 1024), ("grr", 1024)]:
        m = build(name, d)
        for n in (100_000, 1_000_000, 10_000_000):
            t, _ = tallies(m, np.random.default_rng(1).integers(0, d, size=n), seed=2)
            seconds = median_seconds(lambda m=m, t=t, n=n: estimate(m, t, n), repeats=3)
            rows.append((name, d, f"{n:,}", m.num_counters, f"{seconds * 1e3:.1f}"))
    return table(
        ("mechanism", "d", "n", "counters", "aggregation ms (goal < 1000, flat in n)"), rows
    )


def main() -> None:
    print(header("Mechanism core"))
    print("### Device randomize\n" + device_table() + "\n")
    print("### Vectorised simulation\n" + simulation_table() + "\n")
    print("### Aggregation (support counts + estimate with intervals)\n" + aggregation_table())


if __name__ == "__main__":
    main()
