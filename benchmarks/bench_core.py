"""Mechanism core benchmark: device randomize, simulation and aggregation.

Run: ``.venv/bin/python benchmarks/bench_core.py`` (also part of ``ldp bench``).
Each figure is a median over repeated runs on this machine.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aggregator import estimate
from benchmarks._table import header, median_seconds, median_seconds_within, table
from ldp_core import Mechanism, mechanism
from ldp_core.simulate import tallies


def build(name: str, d: int, epsilon: float = 1.0) -> Mechanism:
    if name == "one_bit_mean":
        return mechanism(name, epsilon=epsilon, lo=0.0, hi=100.0)
    if name == "binary_rr":
        return mechanism(name, epsilon=epsilon)
    return mechanism(name, epsilon=epsilon, domain_size=d)


def _randomize_many(m: Mechanism, value: float, calls: int) -> None:
    """``calls`` device-path randomisations of one value (OS CSPRNG)."""
    for _ in range(calls):
        m.randomize(value)


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
        seconds = median_seconds(functools.partial(_randomize_many, m, value, calls))
        rows.append((name, d, f"{seconds / calls * 1e6:.1f}", goal))
    return table(("mechanism", "d", "us per report (OS CSPRNG)", "goal us"), rows)


def simulation_table(n: int = 1_000_000) -> str:
    rows = []
    rng = np.random.default_rng(0)
    for name, d in [("grr", 1024), ("oue", 1024), ("olh", 1024), ("grr", 16), ("oue", 16)]:
        m = build(name, d)
        values = rng.integers(0, d, size=n)
        seconds = median_seconds(functools.partial(tallies, m, values, seed=1), repeats=3)
        rows.append((name, d, f"{n:,}", f"{n / seconds / 1e6:.1f}M"))
    return table(("mechanism", "d", "n", "simulated reports/s (goal >= 1M)"), rows)


def aggregation_table() -> str:
    rows = []
    for name, d in [("olh", 1024), ("oue", 1024), ("grr", 1024)]:
        m = build(name, d)
        for n in (100_000, 1_000_000, 10_000_000):
            t, _ = tallies(m, np.random.default_rng(1).integers(0, d, size=n), seed=2)
            seconds = median_seconds(functools.partial(estimate, m, t, n), repeats=3)
            rows.append((name, d, f"{n:,}", m.num_counters, f"{seconds * 1e3:.1f}"))
    return table(
        ("mechanism", "d", "n", "counters", "aggregation ms (goal < 1000, flat in n)"), rows
    )


GRID_MECHANISMS = ("grr", "oue", "olh")
GRID_DOMAINS = (16, 1024, 16384)


def device_grid_table(domains: tuple[int, ...] = GRID_DOMAINS, budget: float = 0.5) -> str:
    """Device ``randomize`` (OS CSPRNG) per report for every mechanism x d of the grid."""
    rows = []
    for name in GRID_MECHANISMS:
        for d in domains:
            m = build(name, d)
            calls = max(20, min(2000, 200_000 // d)) if name in ("oue", "sue") else 2000
            seconds, runs = median_seconds_within(
                functools.partial(_randomize_many, m, 1 % d, calls), repeats=5, budget=budget * 5
            )
            rows.append((name, d, m.num_counters, f"{seconds / calls * 1e6:.1f}",
                         f"{calls} calls x {runs}"))
    return table(("mechanism", "d", "counters", "us per report (OS CSPRNG)", "timed"), rows)


def simulation_grid_table(n: int, domains: tuple[int, ...] = GRID_DOMAINS) -> str:
    """``ldp_core.simulate.tallies`` reports/s for every mechanism x d of the grid."""
    rows = []
    for name in GRID_MECHANISMS:
        for d in domains:
            m = build(name, d)
            values = np.random.default_rng(0).integers(0, d, size=n)
            seconds, runs = median_seconds_within(
                functools.partial(tallies, m, values, seed=1), repeats=3, budget=20
            )
            rows.append((name, d, f"{n:,}", f"{n / seconds / 1e6:.2f}M", runs))
    return table(("mechanism", "d", "n", "simulated reports/s (goal >= 1M)", "runs"), rows)


def aggregation_grid_table(
    ns: tuple[int, ...], domains: tuple[int, ...] = GRID_DOMAINS, budget: float = 8.0
) -> str:
    """``aggregator.estimate`` time over mechanism x d x n; flat in n by construction.

    One column per n, so flatness reads along a row; the last column is the
    largest over the smallest n, measured in the same run.
    """
    rows = []
    for name in GRID_MECHANISMS:
        for d in domains:
            m = build(name, d)
            cells = []
            for n in ns:
                values = np.random.default_rng(n).integers(0, d, size=n)
                t, _ = tallies(m, values, seed=2)
                seconds, runs = median_seconds_within(
                    functools.partial(estimate, m, t, n), repeats=5, budget=budget
                )
                cells.append((seconds, runs))
            spread = max(c[0] for c in cells) / min(c[0] for c in cells)
            rows.append((
                name, d, m.num_counters,
                *(f"{sec * 1e3:,.1f}" + ("" if runs >= 3 else f" ({runs} run)")
                  for sec, runs in cells),
                f"{spread:.2f}",
            ))
    cols = ("mechanism", "d", "counters", *(f"ms at n = {n:,}" for n in ns),
            "max/min over n (flat = ~1)")
    return table(cols, rows)


def section(quick: bool = False) -> str:
    """The mechanisms section of ``run_all.py`` (Markdown)."""
    ns = (100_000, 1_000_000) if quick else (100_000, 1_000_000, 10_000_000)
    sim_n = 200_000 if quick else 1_000_000
    return "\n".join([
        header("Mechanisms (OLH / OUE / GRR, eps = 1)"),
        "### Device randomize (one report, OS CSPRNG)\n" + device_grid_table(
            budget=0.2 if quick else 0.5) + "\n",
        f"### Vectorised simulation (ldp_core.simulate.tallies, n = {sim_n:,})\n"
        + simulation_grid_table(sim_n) + "\n",
        "### Aggregation (support counts + estimate with intervals), median ms; "
        "goal < 1000 ms and flat in n\n" + aggregation_grid_table(ns, budget=3 if quick else 8),
    ]) + "\n"


def main() -> None:
    print(header("Mechanism core"))
    print("### Device randomize\n" + device_table() + "\n")
    print("### Vectorised simulation\n" + simulation_table() + "\n")
    print("### Aggregation (support counts + estimate with intervals)\n" + aggregation_table())


if __name__ == "__main__":
    main()
