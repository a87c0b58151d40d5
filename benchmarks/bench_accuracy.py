"""Accuracy report: bias, variance against the exact closed form, coverage, OLH at 10^7.

Run: ``.venv/bin/python benchmarks/bench_accuracy.py`` (part of ``ldp bench``).
The same experiments, with their pass/fail bands, are tests in
tests/aggregator/test_estimation.py; this script prints the measured figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aggregator import estimate, exact_count_variance, exact_mean_variance
from benchmarks._table import header, table
from ldp_core import Mechanism, mechanism
from ldp_core.simulate import tallies, tallies_many

COUNTS = np.array([800, 400, 300, 200, 150, 100, 50, 0])
TRIALS = 20_000


def _support(m: Mechanism, rows: np.ndarray) -> np.ndarray:
    return np.array([m.support_counts(r) for r in rows], dtype=np.float64)


def variance_table() -> str:
    rows = []
    n = int(COUNTS.sum())
    values = np.repeat(np.arange(len(COUNTS)), COUNTS)
    for name in ("grr", "sue", "oue", "olh", "binary_rr", "forced_response", "one_bit_mean"):
        for eps in (0.5, 1.0, 2.0, 4.0):
            if name == "one_bit_mean":
                m = mechanism(name, epsilon=eps, lo=0.0, hi=60.0)
                data = np.random.default_rng(1).gamma(2.0, 6.0, size=n).clip(0, 60)
                draws, _ = tallies_many(m, data, TRIALS, seed=4)
                est = 60.0 * (draws[:, 1] / n - m.q_star) / (m.p_star - m.q_star)
                ratio = np.array([est.var(ddof=1) / exact_mean_variance(m, data)])
                bias = np.array([(est.mean() - data.mean()) / np.sqrt(est.var() / TRIALS)])
            elif name in ("binary_rr", "forced_response"):
                m = mechanism(name, epsilon=eps)
                draws, _ = tallies_many(m, [1] * 740 + [0] * (n - 740), TRIALS, seed=3)
                est = (draws[:, 1] - n * m.q_star) / (m.p_star - m.q_star)
                exact = float(exact_count_variance(m, n, 740))
                ratio = np.array([est.var(ddof=1) / exact])
                bias = np.array([(est.mean() - 740) / np.sqrt(exact / TRIALS)])
            else:
                m = mechanism(name, epsilon=eps, domain_size=len(COUNTS))
                draws, _ = tallies_many(m, values, TRIALS, seed=7)
                est = (_support(m, draws) - n * m.q_star) / (m.p_star - m.q_star)
                exact = exact_count_variance(m, n, COUNTS)
                ratio = est.var(axis=0, ddof=1) / exact
                bias = (est.mean(axis=0) - COUNTS) / np.sqrt(exact / TRIALS)
            rows.append(
                (name, eps, f"{ratio.min():.3f} .. {ratio.max():.3f}", f"{np.abs(bias).max():.2f}")
            )
    return table(
        ("mechanism", "eps", "empirical / exact variance (per value)", "max |bias z|"), rows
    )


def coverage_table(trials: int = 10_000) -> str:
    rows = []
    counts = np.array([2000, 1200, 900, 500, 300, 100])
    for name in ("binary_rr", "grr", "oue", "olh", "sue", "one_bit_mean"):
        if name == "binary_rr":
            m = mechanism(name, epsilon=1.0)
            values: np.ndarray = np.array([1] * 1850 + [0] * 3150)
            truth = np.array([0.37])
        elif name == "one_bit_mean":
            m = mechanism(name, epsilon=1.0, lo=0.0, hi=100.0)
            values = np.random.default_rng(2).uniform(0, 100, size=5000)
            truth = np.array([values.mean()])
        else:
            m = mechanism(name, epsilon=1.0, domain_size=len(counts))
            values = np.repeat(np.arange(len(counts)), counts)
            truth = counts / counts.sum()
        draws, n = tallies_many(m, values, trials, seed=9)
        covered = np.zeros(len(truth))
        for row in draws:
            e = estimate(m, row, n)
            covered += (np.asarray(e.ci_low) <= truth) & (truth <= np.asarray(e.ci_high))
        cov = covered / trials
        rows.append((name, f"{cov.min():.2%} .. {cov.max():.2%}", trials))
    return table(("mechanism (eps = 1)", "95% interval coverage (per value)", "trials"), rows)


def olh_chi_square() -> str:
    d, n = 1024, 10_000_000
    m = mechanism("olh", epsilon=1.0, domain_size=d)
    weights = 1.0 / np.arange(1, d + 1) ** 1.1
    counts = np.random.default_rng(0).multinomial(n, weights / weights.sum())
    t, _ = tallies(m, np.repeat(np.arange(d), counts), seed=1)
    e = estimate(m, t, n)
    z = (np.asarray(e.value) * n - counts) / np.sqrt(exact_count_variance(m, n, counts))
    statistic = float((z**2).sum())
    p_value = float(stats.chi2.sf(statistic, d))
    return (
        f"OLH, d = {d}, eps = 1, n = 10^7 Zipf(1.1): sum of squared standardised errors "
        f"= {statistic:.1f} on {d} degrees of freedom (p = {p_value:.3f})"
    )


def main() -> None:
    print(header("Accuracy"))
    print("### Unbiasedness and variance (20,000 simulated surveys of n = 2000)\n")
    print(variance_table() + "\n")
    print("### Interval coverage\n")
    print(coverage_table() + "\n")
    print("### OLH at scale\n")
    print(olh_chi_square())


if __name__ == "__main__":
    main()
