"""Distributions and quantiles: Square Wave + EMS, the hierarchical histogram and a flat
OUE histogram side by side; the coverage of the served intervals.

Run: ``.venv/bin/python benchmarks/bench_distribution.py [--quick]`` (all three
tables, or any of ``--accuracy``, ``--coverage``, ``--cost``; for the coverage,
``--shapes beta,bimodal --eps 0.5,1,2,4 --populations P --trials T --first F``
choose the cells and the populations F..F+P-1, so that cells run as separate
processes, ``--tally-offset K`` seeds population p's tallies p + K (fresh tallies of
the same populations; 0, the default, gives the docs' tables), and ``--hull``
measures the z-test hull and range shares alone, with no bootstrap; ``--diagnose``
measures instead why a quantile interval under-covers: the oracle bootstrap
population, the test at the truth, the level pivot); ``--sweep`` for the
parameter sweeps (on other shapes and seeds), ``--smoothing [--eps 0.5,1
--surveys 20]`` for EMS weights 1/128..1/32 at low eps on those shapes.
``--accuracy --paired`` adds each row's paired difference to the best OUE and a one-sided test;
``--shapes``/``--eps``/``--surveys`` choose the rows.  Data on [0, 1]:
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
2. Coverage of the served 95% intervals at n = 10^5: quantiles (the inverted
   parametric bootstrap test of the monotone CDF under each point's
   I-projection null, ``aggregator.projection``; beside it, from the same
   replicates, the interval with G's band served before it, the width ratio,
   the tests per bisection, and on each population's first tally whether the
   acceptance set has gaps or reaches beyond the served ends; on the same
   tallies, the hull of the inverted z-test of the unbiased CDF, and from the
   same replicates the quantile-scale basic and percentile intervals, and the
   former Woodruff one; the served value's error beside the former value's and
   the shape's own) and range shares (unbiased, normal), over ``populations``
   drawn populations x ``trials`` independent tallies of each, with each
   figure's exact binomial 95% interval.
3. Cost of one served estimate, in CPU time, with its shape and its quantile
   bootstrap apart.
4. ``--sweep``: W1 by EMS smoothing weight s, and by tree (B, h), on three other
   shapes (trimodal, exponential, uniform) and other seeds: where ``SMOOTHING``,
   ``BRANCHING``/``DEPTH`` and ``HIERARCHY_BELOW`` come from.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from scipy.stats import beta as beta_dist
from scipy.stats import t as t_dist

from aggregator.consistency import norm_sub
from aggregator.distribution import (
    DistributionEstimate,
    Floats,
    GridChannel,
    Interval,
    _inverse,
    cdf_knots,
    cdf_of_masses,
    ems,
    estimate_distribution,
    range_weights,
    search_weights,
    wasserstein1,
)
from aggregator.estimate import FrequencyEstimate, estimate
from aggregator.projection import ProjectionTest, acceptance, projection_interval
from aggregator.quantiles import read_quantiles
from aggregator.shape import smoothing_for
from benchmarks import _smoke
from benchmarks._table import header, table
from ldp_core import mechanism
from ldp_core.mechanisms.hierarchical import HierarchicalHistogram
from ldp_core.mechanisms.square_wave import SquareWave

N = 100_000
EPSILONS = (0.5, 1.0, 2.0, 4.0)
OUE_BUCKETS = (8, 16, 32, 64)
SHAPES = ("beta", "bimodal")
SWEEP_SHAPES = ("trimodal", "exponential", "uniform")
QUANTILES = (0.5, 0.9, 0.99)
COVERAGE_EPSILONS = (0.5, 1.0, 2.0, 4.0)
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
    return (
        SquareWave(eps, 0.0, 1.0) if name == "square_wave" else HierarchicalHistogram(eps, 0.0, 1.0)
    )


def served_cdf(
    m: GridChannel, values: np.ndarray, seed: int, smoothing: float | None = None
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


def accuracy_table(
    surveys: int,
    shapes: tuple[str, ...] = SHAPES,
    epsilons: tuple[float, ...] = EPSILONS,
    paired: bool = False,
) -> str:
    """Mean ± se of each method's errors; with ``paired``, Square Wave's W1 minus OUE's
    per survey (the same population and seed for every method) and a one-sided test."""
    rows = []
    for shape in shapes:
        for eps in epsilons:
            got: dict[str, list[np.ndarray]] = {}
            for s in range(surveys):
                # the seeds of the former table: population 1000 i + s at the i-th eps
                values = draw(shape, N, 1000 * EPSILONS.index(eps) + s)
                for name in ("square_wave", "hierarchical"):
                    got.setdefault(name, []).append(
                        errors(served_cdf(build(name, eps), values, s), values)
                    )
                for d in OUE_BUCKETS:
                    got.setdefault(f"oue{d}", []).append(errors(oue_cdf(values, eps, d, s), values))
            mean = {key: np.mean(v, axis=0) for key, v in got.items()}
            se = {key: np.std(v, axis=0, ddof=1) / np.sqrt(surveys) for key, v in got.items()}
            best = min(OUE_BUCKETS, key=lambda d: float(mean[f"oue{d}"][0]))
            oue = mean[f"oue{best}"]
            cells = [f"{mean[n][0]:.4f} ± {se[n][0]:.4f}" for n in ("square_wave", "hierarchical")]
            extra = _paired_cells(got, best) if paired else []
            rows.append(
                [
                    shape,
                    f"{eps:g}",
                    *cells,
                    f"{oue[0]:.4f} ± {se[f'oue{best}'][0]:.4f} (d={best})",
                    f"{mean['square_wave'][0] / oue[0]:.2f}",
                    *extra,
                    " / ".join(f"{mean[n][1]:.4f}" for n in ("square_wave", "hierarchical"))
                    + f" / {oue[1]:.4f}",
                    " / ".join(f"{mean[n][2]:.4f}" for n in ("square_wave", "hierarchical"))
                    + f" / {oue[2]:.4f}",
                ]
            )
    paired_head = ["SW - best OUE (paired)", "t", "p (max over d)"] if paired else []
    return table(
        [
            "data",
            "eps",
            "W1 SW+EMS",
            "W1 HH",
            "W1 best OUE",
            "SW/OUE",
            *paired_head,
            "range MAE SW / HH / OUE",
            "quantile MAE SW / HH / OUE",
        ],
        rows,
    )


def _paired_cells(got: dict[str, list[np.ndarray]], best: int) -> list[str]:
    """The paired W1 difference to the best OUE (mean ± se), its t, and the largest
    one-sided p-value of "Square Wave's mean W1 is below OUE's" over every d.

    The goal holds at a row if it holds against every d (an intersection-union test:
    each test at level alpha gives level alpha, no correction), so the largest p
    answers the hindsight choice of d as well.
    """
    sw = np.array(got["square_wave"])[:, 0]
    diffs = {d: sw - np.array(got[f"oue{d}"])[:, 0] for d in OUE_BUCKETS}
    se = {d: float(v.std(ddof=1) / np.sqrt(len(v))) for d, v in diffs.items()}
    t = {d: float(v.mean()) / se[d] for d, v in diffs.items()}
    p = max(float(t_dist.cdf(t[d], len(sw) - 1)) for d in OUE_BUCKETS)
    return [f"{diffs[best].mean():+.4f} ± {se[best]:.4f}", f"{t[best]:.1f}", f"{p:.1g}"]


def quantile_interval(x: Floats, f: Floats, se: Floats, q: float, z: float) -> Interval:
    """The q-quantile of the unbiased CDF f (stderr se) at the points x, where a monotone
    version of f reaches q, with Woodruff's interval: its quantiles at q -+ z se, se
    taken at the estimate.  No longer served (3 of 18 coverage figures inside 93-97%):
    kept here beside the bootstrap interval that replaced it."""
    clipped = np.clip(f, 0.0, 1.0)
    # A monotone CDF: the mean of the running max from the left and min from the right.
    monotone = (np.maximum.accumulate(clipped) + np.minimum.accumulate(clipped[::-1])[::-1]) / 2
    value = _inverse(x, monotone, q)
    spread = z * float(np.interp(value, x, se))
    return Interval(
        value, None, _inverse(x, monotone, q - spread), _inverse(x, monotone, q + spread)
    )


def inverted_hull(
    x: np.ndarray, f: np.ndarray, sd: np.ndarray, q: float, z: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, pieces) per row: the hull of {x : |F_hat(x) - q| <= z sd(x)}, the
    inverted z-test of the unbiased CDF alone (measured, not served: docs/numeric.md), with
    F_hat -+ z sd linear between the points; pieces > 1 when the set has gaps."""

    def at_most(c0: np.ndarray, c1: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
        # on each segment t in [0, 1], the t where c0 + t (c1 - c0) <= level
        d = c1 - c0
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (level - c0) / d
        empty = ((d == 0) & (c0 > level)) | ((d > 0) & (t < 0)) | ((d < 0) & (t > 1))
        lo = np.where(empty, 2.0, np.where(d < 0, np.clip(t, 0, 1), 0.0))
        hi = np.where(empty, -1.0, np.where(d > 0, np.clip(t, 0, 1), 1.0))
        return lo, hi

    a, b = f - z * sd, f + z * sd
    lo1, hi1 = at_most(a[:, :-1], a[:, 1:], q)
    lo2, hi2 = at_most(-b[:, :-1], -b[:, 1:], -q)
    lo, hi = np.maximum(lo1, lo2), np.minimum(hi1, hi2)
    inside = lo <= hi
    step = np.diff(x)
    low = np.where(inside, x[:-1] + lo * step, np.inf).min(axis=1)
    high = np.where(inside, x[:-1] + hi * step, -np.inf).max(axis=1)
    joined = np.zeros_like(inside)
    joined[:, 1:] = inside[:, :-1] & (hi[:, :-1] >= 1) & (lo[:, 1:] <= 0)
    return low, high, (inside & ~joined).sum(axis=1)


def coverage_table(
    populations: int,
    trials: int,
    shapes: tuple[str, ...] = SHAPES,
    epsilons: tuple[float, ...] = COVERAGE_EPSILONS,
    first: int = 0,
    bootstrap: bool = True,
    tally_offset: int = 0,
) -> str:
    """Coverage of Square Wave's served 95% intervals (quantiles: the inverted bootstrap
    test of the CDF; beside them, on the same tallies, the inverted z-test of the
    unbiased CDF alone, the quantile-scale basic and percentile forms from the same
    replicates, and the former Woodruff one), over populations first, first + 1, ...
    The value errors: served (the shape's quantile moved into the interval), the former
    value (where F_hat less the bootstrap's median error reaches q), the shape's own.
    ``bootstrap=False`` (``--hull``): the z-test hull alone, no bootstrap (seconds).
    Population p's tallies are seeded p + ``tally_offset`` (``--tally-offset``; 0: the
    tables in docs/numeric.md), so fresh tallies of the same populations can be drawn."""
    rows = []
    z = 1.959963984540054
    for shape in shapes:
        for eps in epsilons:
            m = build("square_wave", eps)
            x, w, w2 = search_weights(m)
            nq = len(QUANTILES)
            keys = ("cdf", "hull", "basic", "percentile", "woodruff", "g band")
            hits = {key: np.zeros(nq) for key in keys}
            width, hull_width, gaps = np.zeros(nq), np.zeros(nq), np.zeros(nq)
            # the served interval before the I-projection (G's band), the tests per
            # bisection, and on each population's first tally the full acceptance set
            g_width, tests, scanned = np.zeros(nq), np.zeros(nq), 0
            split, beyond = np.zeros(nq), np.zeros(nq)
            error = np.zeros((3, nq))
            range_hits = np.zeros(len(RANGES))
            for p in range(first, first + populations):
                values = draw(shape, N, 50_000 + p)
                truth_q = np.quantile(values, QUANTILES)
                truth_r = [float(np.mean((values >= a) & (values <= b))) for a, b in RANGES]
                counts = m.simulate_tallies(
                    values, trials, np.random.default_rng(p + tally_offset)
                )
                share = counts / N
                f = share @ w
                se = np.sqrt(np.maximum(share @ (w * w) - share @ w2, 0.0) / N)
                for i, q in enumerate(QUANTILES):
                    low, high, pieces = inverted_hull(x, f, se, q, z)
                    hits["hull"][i] += np.sum((low <= truth_q[i]) & (truth_q[i] <= high))
                    hull_width[i] += np.sum(high - low)
                    gaps[i] += np.sum(pieces > 1)
                for i, (a, b) in enumerate(RANGES):
                    phi, phi2 = range_weights(m, a, b)
                    value = share @ phi
                    sd = np.sqrt(np.maximum(share @ (phi * phi) - share @ phi2, 0.0) / N)
                    range_hits[i] += np.sum(np.abs(value - truth_r[i]) <= z * sd)
                if not bootstrap:
                    continue
                # the served shape, one batch
                masses = ems(m.transition(), counts, smoothing=smoothing_for(eps))[0]
                for row in range(trials):
                    d = _unshaped(m, share[row], masses[row])
                    boot = d.bootstrap_cdf()
                    served = d.intervals_from(boot, QUANTILES)
                    if row == 0:  # the same as the API's
                        assert served == d.quantile_intervals(QUANTILES)
                    replicate = read_quantiles(x, boot.replicate, QUANTILES)
                    own = read_quantiles(x, boot.own, QUANTILES)[0]
                    raw = read_quantiles(x, boot.observed, QUANTILES)[0]
                    median = np.median(boot.replicate - boot.own, axis=0)
                    bands = boot.bands(0.95)
                    scanned += row == 0
                    former = read_quantiles(x, boot.observed - median, QUANTILES)[0]
                    ems_q = read_quantiles(x, cdf_of_masses(masses[row], 0.0, 1.0)(x), QUANTILES)[0]
                    for i, q in enumerate(QUANTILES):
                        t = truth_q[i]
                        hits["cdf"][i] += served[i].ci_low <= t <= served[i].ci_high
                        _, g_low, g_high = boot.interval(q, bands)
                        hits["g band"][i] += g_low <= t <= g_high
                        g_width[i] += g_high - g_low
                        test = ProjectionTest(boot, q, 0.95)
                        projection_interval(test, (g_low, g_high))
                        tests[i] += test.tests
                        if row == 0:
                            accepted = acceptance(test)
                            at = boot.x[accepted]
                            pieces = np.sum(np.diff(np.flatnonzero(accepted)) > 1)
                            split[i] += pieces > 0
                            beyond[i] += len(at) > 0 and (
                                at[0] < served[i].ci_low - 1e-9 or at[-1] > served[i].ci_high + 1e-9
                            )
                        lo, hi = np.quantile(replicate[:, i], [0.025, 0.975])
                        hits["percentile"][i] += lo <= t <= hi
                        hits["basic"][i] += raw[i] - (hi - own[i]) <= t <= raw[i] - (lo - own[i])
                        old = quantile_interval(x, f[row], se[row], q, z)
                        hits["woodruff"][i] += old.ci_low <= t <= old.ci_high
                        width[i] += served[i].ci_high - served[i].ci_low
                        kept = np.clip(former[i], served[i].ci_low, served[i].ci_high)
                        error[:, i] += abs(served[i].value - t), abs(kept - t), abs(ems_q[i] - t)
            total = populations * trials
            hull = [
                *(_covered(int(h), total) for h in hits["hull"]),
                " ".join(f"{v / total:.3f}" for v in hull_width),
                " ".join(f"{v / total:.2f}" for v in gaps),
                " ".join(f"{h / total:.3f}" for h in range_hits),
            ]
            boot = [
                *(_covered(int(h), total) for h in hits["cdf"]),
                " ".join(f"{v / total:.3f}" for v in width),
                *(" ".join(f"{h / total:.3f}" for h in hits[k]) for k in keys[2:5]),
                " / ".join(" ".join(f"{v / total:.4f}" for v in e) for e in error),
                *(_covered(int(h), total) for h in hits["g band"]),
                " ".join(f"{v / total:.3f}" for v in g_width),
                " ".join(f"{w / g:.2f}" for w, g in zip(width, g_width, strict=True)),
                " ".join(f"{v / total:.1f}" for v in tests),
                f"{scanned}: " + " ".join(f"{int(v)}" for v in split),
                " ".join(f"{int(v)}" for v in beyond),
            ]
            rows.append([shape, f"{eps:g}", *hull, *(boot if bootstrap else ["-"] * len(boot))])
    return table(
        [
            "data",
            "eps",
            *(f"p{q * 100:g} z-test hull [95% CI]" for q in QUANTILES),
            "mean width hull p50 p90 p99",
            "hull with gaps",
            "ranges " + " ".join(f"[{a:g},{b:g}]" for a, b in RANGES),
            *(f"p{q * 100:g} served [95% CI]" for q in QUANTILES),
            "mean width served",
            "quantile-scale basic p50 p90 p99",
            "percentile p50 p90 p99",
            "Woodruff p50 p90 p99",
            "abs error p50 p90 p99: served / former / shape",
            *(f"p{q * 100:g} G's band (served before) [95% CI]" for q in QUANTILES),
            "mean width G's band",
            "width ratio served / G's band",
            "tests per bisection",
            "scanned: acceptance set with gaps",
            "scanned: acceptance beyond the served ends",
        ],
        rows,
    )


def _covered(hits: int, total: int) -> str:
    """A coverage figure with its exact (Clopper-Pearson) 95% binomial interval."""
    lo = beta_dist.ppf(0.025, hits, total - hits + 1) if hits > 0 else 0.0
    hi = beta_dist.ppf(0.975, hits + 1, total - hits) if hits < total else 1.0
    return f"{hits / total:.3f} [{lo:.3f}, {hi:.3f}]"


def _unshaped(m: GridChannel, share: np.ndarray, masses: np.ndarray) -> DistributionEstimate:
    """The served estimate from a tally share and its EMS shape (computed in a batch)."""
    return DistributionEstimate(
        m=m,
        share=share,
        n=N,
        masses=masses,
        iterations=0,
        confidence=0.95,
        edges=np.linspace(0.0, 1.0, 17),
        quantiles_asked=QUANTILES,
    )


def _option(name: str, default: str) -> str:
    """The value after ``name`` on the command line, else ``default``."""
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main() -> None:
    # The cost table and the sweeps import this module's helpers (bench_distribution_more).
    more = importlib.import_module("benchmarks.bench_distribution_more")

    quick = "--quick" in sys.argv
    if "--smoothing" in sys.argv:
        surveys = int(_option("--surveys", "20"))
        epsilons = tuple(float(e) for e in _option("--eps", "0.5,1").split(","))
        print(header(f"EMS smoothing at low eps: W1, n = {N:,}, {surveys} surveys"))
        shapes = tuple(_option("--shapes", ",".join(SWEEP_SHAPES)).split(","))
        print(more.smoothing_table(surveys, epsilons, shapes))
        return
    if "--sweep" in sys.argv:
        surveys = 2 if quick else 6
        print(header(f"Sweep: W1 to the truth, n = {N:,}, mean of {surveys} surveys"))
        print(more.sweep_table(surveys))
        return
    surveys = int(_option("--surveys", "3" if quick else "20"))
    populations = _smoke.size(int(_option("--populations", "2" if quick else "10")), 1)
    trials = _smoke.size(int(_option("--trials", "20" if quick else "100")), 1)
    _smoke.announce("bench_distribution")
    shapes = tuple(_option("--shapes", ",".join(SHAPES)).split(","))
    epsilons = tuple(
        float(e) for e in _option("--eps", ",".join(f"{e:g}" for e in COVERAGE_EPSILONS)).split(",")
    )
    parts = [a for a in ("--accuracy", "--coverage", "--cost") if a in sys.argv] or [
        "--accuracy",
        "--coverage",
        "--cost",
    ]
    if "--accuracy" in parts:
        print(header(f"Accuracy at n = {N:,}, mean ± se of {surveys} surveys"))
        print(accuracy_table(surveys, shapes, epsilons, "--paired" in sys.argv))
        print()
    if "--coverage" in parts:
        print(
            header(
                f"Coverage of 95% intervals, n = {N:,}, {populations} populations x "
                f"{trials} tallies"
            )
        )
        first = int(_option("--first", "0"))
        if "--diagnose" in sys.argv:
            print(more.diagnosis_table(populations, trials, shapes, epsilons, first))
        else:
            print(
                coverage_table(
                    populations,
                    trials,
                    shapes,
                    epsilons,
                    first,
                    "--hull" not in sys.argv,
                    int(_option("--tally-offset", "0")),
                )
            )
        print()
    if "--cost" in parts:
        print(header("Cost of one served distribution estimate"))
        print(more.cost_table())


if __name__ == "__main__":
    main()
