"""Huge known domains: Hadamard response, CMS and HCMS at d = 2^20, n = 10^6, eps = 2.

For each mechanism: the counters the collector keeps (flat in n), the time to
simulate the tallies, the time to estimate every value of the domain with its
interval (``aggregator.estimate``), and the MSE over the closed-form variance
(1.0 = the stated intervals are the true spread), on Zipf(1.5) data.

    .venv/bin/python benchmarks/bench_huge_domain.py [--log2-domain 20] [--reports 1000000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from aggregator.estimate import FrequencyEstimate, estimate
from ldp_core import mechanism
from ldp_core.simulate import tallies


def rows(log2_domain: int, reports: int, epsilon: float) -> list[str]:
    d = 1 << log2_domain
    values = np.random.default_rng(0).zipf(1.5, reports) % d
    truth = np.bincount(values, minlength=d) / reports
    out = [
        f"d = 2^{log2_domain}, n = {reports:,}, eps = {epsilon:g}, Zipf(1.5)",
        "",
        "| mechanism | counters | simulate | all d estimates with intervals | MSE / theory |",
        "|---|---|---|---|---|",
    ]
    for name in ("hadamard", "cms", "hcms"):
        m = mechanism(name, epsilon=epsilon, domain_size=d)
        start = time.perf_counter()
        t, n = tallies(m, values, seed=1)
        simulated = time.perf_counter()
        e = estimate(m, t, n)
        done = time.perf_counter()
        assert isinstance(e, FrequencyEstimate)
        ratio = float(np.mean((e.value - truth) ** 2) / np.mean(e.stderr**2))
        out.append(
            f"| {name} | {m.num_counters:,} | {simulated - start:.2f} s | {done - simulated:.2f} s "
            f"| {ratio:.3f} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log2-domain", type=int, default=20)
    parser.add_argument("--reports", type=int, default=1_000_000)
    parser.add_argument("--epsilon", type=float, default=2.0)
    args = parser.parse_args()
    print("\n".join(rows(args.log2_domain, args.reports, args.epsilon)))


if __name__ == "__main__":
    main()
