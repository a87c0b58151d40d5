"""Distributions and quantiles: Square Wave + EMS against a bucketed OUE histogram,
and the coverage of the intervals.

Run: ``.venv/bin/python benchmarks/bench_distribution.py [--quick]`` (about
2.5 min; ``--quick`` under 1 min).  Data, on [0, 1]: ``beta`` = Beta(2, 5);
``bimodal`` = 0.4 N(0.25, 0.06) + 0.6 N(0.7, 0.1), clipped to [0, 1].

1. Wasserstein-1 (as a share of the range) of the estimated distribution to
   the population's, n = 10^5, at eps in {0.5, 1, 2, 4}, mean over ``SEEDS``
   surveys, in one run: Square Wave (grid k = 64) + EMS, against OUE over d
   equal buckets (d in 8, 16, 32, 64; the best d per eps is shown) with
   norm-sub, each bucket uniform inside.  OUE is the best frequency oracle
   here: its variance is never above OLH's (Wang et al. 2017), and d <= 64 is
   below OLH's crossover.
2. Coverage of nominal 95% intervals at n = 10^5, eps = 1 and 4: p50, p90,
   p99 (Woodruff intervals on the unbiased CDF) and three range shares
   (unbiased, normal), over ``surveys`` surveys each; and, for the record,
   the parametric bootstrap of EMS through the exact channel (basic
   intervals, R = 100 replicates) on a few surveys: it under-covers, which is
   why the served intervals are not bootstrapped.
3. Cost: one estimate (EMS + 3 quantiles + 16 buckets) and one R = 100
   bootstrap, median wall time.
4. ``--sweep``: W1 of EMS by smoothing weight s (and grid k), one survey per
   cell on seeds apart from table 1's: where ``SMOOTHING`` = 1/32 comes from.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from aggregator.consistency import norm_sub
from aggregator.distribution import (
    bootstrap_masses,
    cdf_knots,
    cdf_of_masses,
    ems,
    estimate_distribution,
    wasserstein1,
)
from aggregator.estimate import FrequencyEstimate, estimate
from benchmarks._table import header, median_seconds, table
from ldp_core import mechanism
from ldp_core.mechanisms.square_wave import SquareWave

N = 100_000
EPSILONS = (0.5, 1.0, 2.0, 4.0)
OUE_BUCKETS = (8, 16, 32, 64)
SHAPES = ("beta", "bimodal")
QUANTILES = (0.5, 0.9, 0.99)
RANGES = ((0.0, 0.2), (0.2, 0.4), (0.5, 1.0))


def draw(shape: str, n: int, seed: int) -> np.ndarray:
    gen = np.random.default_rng(seed)
    if shape == "beta":
        return gen.beta(2, 5, size=n)
    pick = gen.random(n) < 0.4
    return np.clip(np.where(pick, gen.normal(0.25, 0.06, n), gen.normal(0.7, 0.1, n)), 0, 1)


def sw_w1(values: np.ndarray, eps: float, seed: int) -> float:
    m = SquareWave(eps, 0.0, 1.0)
    t = m.simulate_tallies(values, 1, np.random.default_rng(seed))[0]
    d = estimate_distribution(m, t, len(values))
    return wasserstein1(cdf_of_masses(d.masses, 0.0, 1.0), values, 0.0, 1.0)


def oue_w1(values: np.ndarray, eps: float, buckets: int, seed: int) -> float:
    m = mechanism("oue", epsilon=eps, domain_size=buckets)
    index = np.minimum((values * buckets).astype(np.int64), buckets - 1)
    t = m.simulate_tallies(index, 1, np.random.default_rng(seed))[0]
    e = estimate(m, t, len(values))
    assert isinstance(e, FrequencyEstimate)
    shares = norm_sub(e.value)
    cum = np.concatenate([[0.0], np.cumsum(shares)])
    edges = np.linspace(0.0, 1.0, buckets + 1)
    return wasserstein1(lambda x: np.interp(x, edges, cum), values, 0.0, 1.0)


def w1_table(seeds: int) -> str:
    rows = []
    for shape in SHAPES:
        for i, eps in enumerate(EPSILONS):
            sw: list[float] = []
            oue: dict[int, list[float]] = {d: [] for d in OUE_BUCKETS}
            for s in range(seeds):
                values = draw(shape, N, 1000 * i + s)
                sw.append(sw_w1(values, eps, seed=s))
                for d in OUE_BUCKETS:
                    oue[d].append(oue_w1(values, eps, d, seed=s))
            best = min(OUE_BUCKETS, key=lambda d: float(np.mean(oue[d])))
            a, b = float(np.mean(sw)), float(np.mean(oue[best]))
            rows.append([shape, f"{eps:g}", f"{a:.4f}", f"{b:.4f} (d={best})",
                         " ".join(f"{np.mean(oue[d]):.4f}" for d in OUE_BUCKETS),
                         f"{a / b:.2f}"])
    return table(["data", "eps", "SW+EMS W1", "best OUE W1",
                  "OUE W1 at d = " + "/".join(map(str, OUE_BUCKETS)), "SW/OUE"], rows)


def coverage_table(surveys: int, bootstrap_surveys: int) -> str:
    rows = []
    for shape in SHAPES:
        for eps in (1.0, 4.0):
            m = SquareWave(eps, 0.0, 1.0)
            hits = np.zeros(len(QUANTILES) + len(RANGES))
            boot_hits = np.zeros(len(QUANTILES))
            widths = np.zeros(len(QUANTILES))
            for r in range(surveys):
                values = draw(shape, N, 50_000 + r)
                t = m.simulate_tallies(values, 1, np.random.default_rng(r))[0]
                d = estimate_distribution(m, t, N, quantiles=QUANTILES)
                truth = np.quantile(values, QUANTILES)
                for i, q in enumerate(QUANTILES):
                    interval = d.quantile(q)
                    hits[i] += interval.ci_low <= truth[i] <= interval.ci_high
                    widths[i] += interval.ci_high - interval.ci_low
                for i, (a, b) in enumerate(RANGES):
                    interval = d.range_share(a, b)
                    share = float(np.mean((values >= a) & (values <= b)))
                    hits[len(QUANTILES) + i] += interval.ci_low <= share <= interval.ci_high
                if eps == 1.0 and r < bootstrap_surveys:
                    boot_hits += _bootstrap_hits(m, d.masses, truth, seed=r)
            boot = (" ".join(f"{h / bootstrap_surveys:.2f}" for h in boot_hits)
                    if eps == 1.0 and bootstrap_surveys else "")
            rows.append([shape, f"{eps:g}",
                         *(f"{h / surveys:.3f}" for h in hits),
                         " ".join(f"{w / surveys:.3f}" for w in widths), boot])
    head = [f"p{q * 100:g}" for q in QUANTILES] + [f"[{a:g},{b:g}]" for a, b in RANGES]
    return table(["data", "eps", *head, "mean width p50/p90/p99",
                  f"EMS bootstrap p50/p90/p99 ({bootstrap_surveys} surveys)"], rows)


def _bootstrap_hits(m: SquareWave, masses: np.ndarray, truth: np.ndarray,
                    seed: int) -> np.ndarray:
    """Basic-bootstrap intervals of the EMS quantiles (R = 100): which cover the truth."""
    boot = bootstrap_masses(m, masses, N, 100, seed)
    knots = cdf_knots(m.lo, m.hi, m.k)
    hits = np.zeros(len(QUANTILES))
    for i, q in enumerate(QUANTILES):
        point = _ems_quantile(masses, knots, q)
        reps = np.array([_ems_quantile(row, knots, q) for row in boot])
        low, high = np.quantile(reps, [0.025, 0.975])
        hits[i] = 2 * point - high <= truth[i] <= 2 * point - low
    return hits


def _ems_quantile(masses: np.ndarray, knots: np.ndarray, q: float) -> float:
    cum = np.concatenate([[0.0], np.cumsum(masses)])
    cum[-1] = 1.0
    return float(np.interp(q, cum, knots))


def cost_table() -> str:
    rows = []
    for eps in (1.0, 4.0):
        m = SquareWave(eps, 0.0, 1.0)
        values = draw("beta", N, 7)
        t = m.simulate_tallies(values, 1, np.random.default_rng(7))[0]

        def served(m: SquareWave = m, t: np.ndarray = t) -> object:
            return estimate_distribution(m, t, N).to_json()

        d = estimate_distribution(m, t, N)
        start = time.perf_counter()
        bootstrap_masses(m, d.masses, N, 100, 1)
        boot = time.perf_counter() - start
        rows.append([f"{eps:g}", str(m.num_counters), str(d.iterations),
                     f"{median_seconds(served, 3) * 1000:.0f} ms", f"{boot:.2f} s"])
    return table(["eps", "counters", "EMS iterations", "one estimate (served)",
                  "EMS bootstrap R=100"], rows)


def sweep_table() -> str:
    weights = (0.0, 1 / 32, 0.1, 0.3, 1.0)
    rows = []
    for shape in SHAPES:
        for eps in EPSILONS:
            values = draw(shape, N, 77 + int(eps * 10))
            for k in (64, 128):
                m = SquareWave(eps, 0.0, 1.0, k)
                t = m.simulate_tallies(values, 1, np.random.default_rng(5))[0]
                cells = []
                for s in weights:
                    x, _ = ems(m.transition(), t, max_iterations=3000, smoothing=s)
                    cells.append(f"{wasserstein1(cdf_of_masses(x, 0, 1), values, 0, 1):.4f}")
                rows.append([shape, f"{eps:g}", str(k), *cells])
    return table(["data", "eps", "k", *(f"s={s:.3g}" for s in weights)], rows)


def main() -> None:
    quick = "--quick" in sys.argv
    if "--sweep" in sys.argv:
        print(header(f"EMS smoothing sweep: W1 to the truth, n = {N:,}, one survey each"))
        print(sweep_table())
        return
    seeds, surveys, boot = (2, 40, 4) if quick else (5, 200, 10)
    print(header(f"Wasserstein-1 to the truth, n = {N:,}, mean of {seeds} surveys"))
    print(w1_table(seeds))
    print()
    print(header(f"Coverage of 95% intervals, n = {N:,}, {surveys} surveys each"))
    print(coverage_table(surveys, boot))
    print()
    print(header("Cost of one distribution estimate (Square Wave, k = 64)"))
    print(cost_table())


if __name__ == "__main__":
    main()
