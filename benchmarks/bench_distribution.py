"""Distributions and quantiles: Square Wave + EMS, the hierarchical histogram and a flat
OUE histogram side by side; the coverage of the served intervals.

Run: ``.venv/bin/python benchmarks/bench_distribution.py [--quick]`` (all three
tables, or any of ``--accuracy``, ``--coverage`` (``--both``: both mechanisms at
every eps), ``--cost``); ``--sweep`` for the parameter sweeps (on other shapes
and seeds).  Data on [0, 1]:
``beta`` = Beta(2, 5); ``bimodal`` = 0.4 N(0.25, 0.06) + 0.6 N(0.7, 0.1), clipped.

1. Accuracy at n = 10^5, eps in {0.5, 1, 2, 4}, ``surveys`` surveys per cell,
   in one run: Wasserstein-1 to the population (as a share of the range), the
   mean absolute error of the 45 range shares [a, b] with a < b on the 0.1 grid,
   and of the quantiles p10, p25, p50, p75, p90, p99 (as a share of the range),
   for the served shape of Square Wave (grid k = 64, EMS), of the hierarchical
   histogram (B = 2, h = 4, isotonic CDF) and of OUE over d equal buckets
   (d in 8, 16, 32, 64, Norm-Sub, each bucket uniform inside; the best d per
   cell *with hindsight*).  OUE is the best flat frequency oracle here (its
   variance is never above OLH's).  Square Wave is the one served.
2. Coverage of the served 95% intervals at n = 10^5: quantiles (Woodruff on the
   unbiased CDF) and range shares (unbiased, normal), over ``populations`` drawn
   populations x ``trials`` independent tallies of each (vectorised: one
   multinomial per grid point per tally).
3. Cost of one served estimate.
4. ``--sweep``: W1 by EMS smoothing weight s, and by tree (B, h), on three other
   shapes (trimodal, exponential, uniform) and other seeds: where ``SMOOTHING``,
   ``BRANCHING``/``DEPTH`` and ``HIERARCHY_BELOW`` come from.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from aggregator.consistency import norm_sub
from aggregator.distribution import (
    DistributionEstimate,
    GridChannel,
    cdf_knots,
    ems,
    estimate_distribution,
    quantile_interval,
    range_weights,
    search_weights,
    wasserstein1,
)
from aggregator.estimate import FrequencyEstimate, estimate
from benchmarks._table import header, median_seconds, table
from ldp_core import mechanism
from ldp_core.mechanisms.hierarchical import HierarchicalHistogram
from ldp_core.mechanisms.square_wave import SquareWave

N = 100_000
EPSILONS = (0.5, 1.0, 2.0, 4.0)
OUE_BUCKETS = (8, 16, 32, 64)
SHAPES = ("beta", "bimodal")
SWEEP_SHAPES = ("trimodal", "exponential", "uniform")
QUANTILES = (0.5, 0.9, 0.99)
ERROR_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
RANGES = ((0.0, 0.2), (0.2, 0.4), (0.5, 1.0))
GRID = np.round(np.arange(0, 11) / 10, 1)
ALL_RANGES = tuple((float(a), float(b)) for i, a in enumerate(GRID) for b in GRID[i + 1 :])
Cdf = Callable[[np.ndarray], np.ndarray]


def draw(shape: str, n: int, seed: int) -> np.ndarray:
    gen = np.random.default_rng(seed)
    if shape == "beta":
        return gen.beta(2, 5, size=n)
    if shape == "bimodal":
        pick = gen.random(n) < 0.4
        return np.clip(np.where(pick, gen.normal(0.25, 0.06, n), gen.normal(0.7, 0.1, n)), 0, 1)
    if shape == "trimodal":
        c = gen.integers(0, 3, n)
        mu, sd = np.array([0.2, 0.5, 0.8])[c], np.array([0.05, 0.08, 0.05])[c]
        return np.clip(gen.normal(mu, sd), 0, 1)
    if shape == "exponential":
        return np.clip(gen.exponential(0.15, n), 0, 1)
    return gen.random(n)


def build(name: str, eps: float) -> GridChannel:
    return SquareWave(eps, 0.0, 1.0) if name == "square_wave" else HierarchicalHistogram(
        eps, 0.0, 1.0)


def served_cdf(m: GridChannel, values: np.ndarray, seed: int, smoothing: float | None = None
               ) -> Cdf:
    """The CDF of the shape the aggregator serves (or EMS at ``smoothing``)."""
    t = m.simulate_tallies(values, 1, np.random.default_rng(seed))[0]
    if smoothing is not None:
        masses = ems(m.transition(), t, max_iterations=3000, smoothing=smoothing)[0]
    else:
        masses = estimate_distribution(m, t, len(values)).masses
    return masses_cdf(masses)


def masses_cdf(masses: np.ndarray) -> Cdf:
    knots = cdf_knots(0.0, 1.0, len(masses) - 1)
    cum = np.concatenate([[0.0], np.cumsum(masses)])
    cum[-1] = 1.0
    return lambda x: np.interp(x, knots, cum)


def oue_cdf(values: np.ndarray, eps: float, buckets: int, seed: int) -> Cdf:
    m = mechanism("oue", epsilon=eps, domain_size=buckets)
    index = np.minimum((values * buckets).astype(np.int64), buckets - 1)
    t = m.simulate_tallies(index, 1, np.random.default_rng(seed))[0]
    e = estimate(m, t, len(values))
    assert isinstance(e, FrequencyEstimate)
    cum = np.concatenate([[0.0], np.cumsum(norm_sub(e.value))])
    edges = np.linspace(0.0, 1.0, buckets + 1)
    return lambda x: np.interp(x, edges, cum)


def errors(cdf: Cdf, values: np.ndarray) -> np.ndarray:
    """(W1, range-share MAE, quantile MAE) of an estimated CDF against the population."""
    ordered = np.sort(values)
    a, b = np.array(ALL_RANGES).T
    truth = (np.searchsorted(ordered, b, side="right") - np.searchsorted(ordered, a)) / len(values)
    ranges = float(np.mean(np.abs(cdf(b) - cdf(a) - truth)))
    x = np.linspace(0.0, 1.0, 4097)
    f = np.maximum.accumulate(cdf(x))
    q = np.array(ERROR_QUANTILES)
    estimated = x[np.minimum(np.searchsorted(f, q), len(x) - 1)]
    quantiles = float(np.mean(np.abs(estimated - np.quantile(values, q))))
    return np.array([wasserstein1(cdf, values, 0.0, 1.0), ranges, quantiles])


def accuracy_table(surveys: int) -> str:
    rows = []
    for shape in SHAPES:
        for i, eps in enumerate(EPSILONS):
            got: dict[str, list[np.ndarray]] = {}
            for s in range(surveys):
                values = draw(shape, N, 1000 * i + s)
                for name in ("square_wave", "hierarchical"):
                    got.setdefault(name, []).append(errors(served_cdf(build(name, eps), values, s),
                                                           values))
                for d in OUE_BUCKETS:
                    got.setdefault(f"oue{d}", []).append(errors(oue_cdf(values, eps, d, s), values))
            mean = {key: np.mean(v, axis=0) for key, v in got.items()}
            se = {key: np.std(v, axis=0, ddof=1) / np.sqrt(surveys) for key, v in got.items()}
            best = min(OUE_BUCKETS, key=lambda d: float(mean[f"oue{d}"][0]))
            auto = "square_wave"
            oue = mean[f"oue{best}"]
            cells = [f"{mean[n][0]:.4f} ± {se[n][0]:.4f}" for n in ("square_wave", "hierarchical")]
            rows.append([
                shape, f"{eps:g}", *cells, f"{oue[0]:.4f} ± {se[f'oue{best}'][0]:.4f} (d={best})",
                f"{auto} {mean[auto][0] / oue[0]:.2f}",
                " / ".join(f"{mean[n][1]:.4f}" for n in ("square_wave", "hierarchical"))
                + f" / {oue[1]:.4f}",
                " / ".join(f"{mean[n][2]:.4f}" for n in ("square_wave", "hierarchical"))
                + f" / {oue[2]:.4f}",
            ])
    return table(["data", "eps", "W1 SW+EMS", "W1 HH", "W1 best OUE", "served: W1 / OUE",
                  "range MAE SW / HH / OUE", "quantile MAE SW / HH / OUE"], rows)


def coverage_table(populations: int, trials: int, extra: tuple[str, ...] = ()) -> str:
    """Coverage of Square Wave's intervals at each eps (and of ``extra`` mechanisms')."""
    rows = []
    z = 1.959963984540054
    for shape in SHAPES:
        for eps in (0.5, 1.0, 4.0):
            for name in sorted({"square_wave", *extra}):
                m = build(name, eps)
                x, w, w2 = search_weights(m)
                hits = np.zeros(len(QUANTILES) + len(RANGES))
                widths = np.zeros(len(QUANTILES) + len(RANGES))
                for p in range(populations):
                    values = draw(shape, N, 50_000 + p)
                    truth_q = np.quantile(values, QUANTILES)
                    truth_r = [float(np.mean((values >= a) & (values <= b))) for a, b in RANGES]
                    share = m.simulate_tallies(values, trials, np.random.default_rng(p)) / N
                    # Every tally's unbiased CDF and its stderr in one product each.
                    f = share @ w
                    se = np.sqrt(np.maximum(share @ (w * w) - share @ w2, 0.0) / N)
                    for i, q in enumerate(QUANTILES):
                        for row in range(trials):
                            interval = quantile_interval(x, f[row], se[row], q, z)
                            hits[i] += interval.ci_low <= truth_q[i] <= interval.ci_high
                            widths[i] += interval.ci_high - interval.ci_low
                    for i, (a, b) in enumerate(RANGES):
                        d = _unshaped(m, share[0])
                        ranged = d.range_share(a, b)  # the served one, then every tally's
                        phi, phi2 = range_weights(m, a, b)
                        value = share @ phi
                        sd = np.sqrt(np.maximum(share @ (phi * phi) - share @ phi2, 0.0) / N)
                        assert abs(value[0] - ranged.value) < 1e-9
                        assert abs(sd[0] - (ranged.stderr or 0.0)) < 1e-9
                        hits[len(QUANTILES) + i] += np.sum(np.abs(value - truth_r[i]) <= z * sd)
                        widths[len(QUANTILES) + i] += np.sum(2 * z * sd)
                total = populations * trials
                rows.append([shape, f"{eps:g}", name, *(f"{h / total:.3f}" for h in hits),
                             " ".join(f"{w / total:.3f}" for w in widths)])
    head = [f"p{q * 100:g}" for q in QUANTILES] + [f"[{a:g},{b:g}]" for a, b in RANGES]
    return table(["data", "eps", "mechanism", *head,
                  "mean width p50/p90/p99, ranges"], rows)


def _unshaped(m: GridChannel, share: np.ndarray) -> DistributionEstimate:
    """The intervals' estimator alone (the served shape does not enter them)."""
    return DistributionEstimate(
        m=m, share=share, n=N, masses=np.zeros(m.k + 1), iterations=0, confidence=0.95,
        edges=np.linspace(0.0, 1.0, 17), quantiles_asked=QUANTILES)


def cost_table() -> str:
    rows = []
    for eps in (1.0, 4.0):
        for name in ("square_wave", "hierarchical"):
            m = build(name, eps)
            values = draw("beta", N, 7)
            t = m.simulate_tallies(values, 1, np.random.default_rng(7))[0]

            def served(m: GridChannel = m, t: np.ndarray = t) -> object:
                return estimate_distribution(m, t, N).to_json()

            d = estimate_distribution(m, t, N)
            rows.append([f"{eps:g}", name, str(m.num_counters), str(d.iterations),
                         f"{median_seconds(served, 3) * 1000:.0f} ms"])
    return table(["eps", "mechanism", "counters", "EMS iterations", "one estimate (served)"],
                 rows)


def sweep_table(surveys: int) -> str:
    """W1 by smoothing s (Square Wave) and by tree (B, h), on the sweep shapes."""
    weights = (0.0, 1 / 64, 1 / 32, 1 / 16, 0.1, 0.3)
    trees = ((2, 3), (2, 4), (2, 5), (4, 2), (4, 3))
    rows = []
    for shape in SWEEP_SHAPES:
        for i, eps in enumerate(EPSILONS):
            cells: dict[str, list[float]] = {}
            for s in range(surveys):
                values = draw(shape, N, 70_000 + 100 * i + s)
                for w in weights:
                    cdf = served_cdf(SquareWave(eps, 0.0, 1.0), values, s, smoothing=w)
                    cells.setdefault(f"s={w:.3g}", []).append(wasserstein1(cdf, values, 0, 1))
                for b, h in trees:
                    cdf = served_cdf(HierarchicalHistogram(eps, 0.0, 1.0, b, h), values, s)
                    cells.setdefault(f"B={b} h={h}", []).append(wasserstein1(cdf, values, 0, 1))
                for d in OUE_BUCKETS:
                    cells.setdefault(f"OUE {d}", []).append(
                        wasserstein1(oue_cdf(values, eps, d, s), values, 0, 1))
            rows.append([shape, f"{eps:g}", *(f"{np.mean(v):.4f}" for v in cells.values())])
    return table(["data", "eps", *cells], rows)


def main() -> None:
    quick = "--quick" in sys.argv
    if "--sweep" in sys.argv:
        surveys = 2 if quick else 6
        print(header(f"Sweep: W1 to the truth, n = {N:,}, mean of {surveys} surveys"))
        print(sweep_table(surveys))
        return
    surveys, populations, trials = (3, 2, 50) if quick else (20, 10, 200)
    parts = [a for a in ("--accuracy", "--coverage", "--cost") if a in sys.argv] or [
        "--accuracy", "--coverage", "--cost"]
    if "--accuracy" in parts:
        print(header(f"Accuracy at n = {N:,}, mean ± se of {surveys} surveys"))
        print(accuracy_table(surveys))
        print()
    if "--coverage" in parts:
        print(header(f"Coverage of 95% intervals, n = {N:,}, {populations} populations x "
                     f"{trials} tallies"))
        print(coverage_table(populations, trials,
                             ("square_wave", "hierarchical") if "--both" in sys.argv else ()))
        print()
    if "--cost" in parts:
        print(header("Cost of one served distribution estimate"))
        print(cost_table())


if __name__ == "__main__":
    main()
