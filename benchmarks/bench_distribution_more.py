"""The cost table and the parameter sweeps of ``bench_distribution`` (run through it:
``--cost``, ``--sweep``, ``--smoothing``): the served estimate's CPU time, and W1 by
EMS smoothing weight and by tree (B, h) on shapes and seeds apart from the table's,
where ``SMOOTHING``, ``LOW_EPSILON_SMOOTHING`` and the hierarchy's
``BRANCHING``/``DEPTH`` come from; and ``--coverage --diagnose``, why a quantile
interval under-covers (``diagnosis_table``)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from aggregator.distribution import (
    DistributionEstimate,
    GridChannel,
    estimate_distribution,
    search_weights,
)
from aggregator.projection import ProjectionTest, projection_interval
from aggregator.quantiles import (
    DEFAULT_REPLICATES,
    Bootstrap,
    CdfBootstrap,
    bootstrap_cdf,
    fixed_population,
    monotone,
    population_tallies,
    read_quantiles,
    tally_seed,
)
from aggregator.shape import ems, smoothing_for, wasserstein1
from benchmarks._table import median_seconds, table
from benchmarks.bench_distribution import (
    EPSILONS,
    OUE_BUCKETS,
    QUANTILES,
    SWEEP_SHAPES,
    N,
    _covered,
    _unshaped,
    build,
    draw,
    oue_cdf,
    served_cdf,
)
from ldp_core._rng import WORD
from ldp_core.mechanisms.hierarchical import HierarchicalHistogram
from ldp_core.mechanisms.square_wave import SquareWave


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
                        wasserstein1(oue_cdf(values, eps, d, s), values, 0, 1)
                    )
            rows.append([shape, f"{eps:g}", *(f"{np.mean(v):.4f}" for v in cells.values())])
    return table(["data", "eps", *cells], rows)


def smoothing_table(surveys: int, epsilons: tuple[float, ...], shapes: tuple[str, ...]) -> str:
    """W1 of EMS by smoothing weight at low eps (seeds apart from the sweep's and the
    table's): mean, each weight's paired difference to 1/32 (± se), and the best OUE."""
    weights = (1 / 128, 1 / 64, 1 / 32)
    rows = []
    for shape in shapes:
        for i, eps in enumerate(epsilons):
            w1, oue = [], []
            for s in range(surveys):
                values = draw(shape, N, 80_000 + 100 * i + s)
                w1.append(
                    [
                        wasserstein1(
                            served_cdf(SquareWave(eps, 0.0, 1.0), values, s, smoothing=w),
                            values,
                            0,
                            1,
                        )
                        for w in weights
                    ]
                )
                oue.append(
                    [wasserstein1(oue_cdf(values, eps, d, s), values, 0, 1) for d in OUE_BUCKETS]
                )
            sw, flat = np.array(w1), np.array(oue)
            best = int(np.argmin(flat.mean(axis=0)))
            diff = sw - sw[:, -1:]
            se = diff.std(axis=0, ddof=1) / np.sqrt(surveys)
            rows.append(
                [
                    shape,
                    f"{eps:g}",
                    *(f"{m:.4f}" for m in sw.mean(axis=0)),
                    *(
                        f"{d:+.4f} ± {e:.4f}"
                        for d, e in zip(diff.mean(axis=0)[:-1], se[:-1], strict=True)
                    ),
                    f"{flat.mean(axis=0)[best]:.4f} (d={OUE_BUCKETS[best]})",
                ]
            )
    return table(
        [
            "data",
            "eps",
            "s=1/128",
            "s=1/64",
            "s=1/32",
            "1/128 - 1/32",
            "1/64 - 1/32",
            "best OUE (hindsight)",
        ],
        rows,
    )


def _cpu_seconds(run: Callable[[], object], repeats: int = 3) -> float:
    """Median CPU time of ``repeats`` calls (this process alone: comparable on a loaded
    machine, where wall time is not)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return float(np.median(times))


def cost_table() -> str:
    """The served estimate's cost, and of its parts: the shape and the quantile bootstrap."""
    rows = []
    for eps in (0.5, 1.0, 4.0):
        for name in ("square_wave", "hierarchical"):
            m = build(name, eps)
            values = draw("beta", N, 7)
            t = m.simulate_tallies(values, 1, np.random.default_rng(7))[0]
            d = estimate_distribution(m, t, N)

            def served(m: GridChannel = m, t: np.ndarray = t) -> object:
                return estimate_distribution(m, t, N).to_json()

            def shape(m: GridChannel = m, t: np.ndarray = t) -> object:
                return estimate_distribution(m, t, N)

            def intervals(d: DistributionEstimate = d) -> object:
                return d.quantile_intervals(QUANTILES)

            boot = d.bootstrap_cdf()

            def projections(boot: CdfBootstrap = boot) -> object:
                bands = boot.bands(0.95)
                return [
                    projection_interval(ProjectionTest(boot, q, 0.95), boot.interval(q, bands)[1:])
                    for q in QUANTILES
                ]

            rows.append(
                [
                    f"{eps:g}",
                    name,
                    str(m.num_counters),
                    str(d.iterations),
                    f"{_cpu_seconds(served) * 1000:.0f} ms",
                    f"{_cpu_seconds(shape) * 1000:.0f} ms",
                    f"{_cpu_seconds(intervals) * 1000:.0f} ms",
                    f"{_cpu_seconds(projections) * 1000:.0f} ms",
                    f"{median_seconds(served, 3) * 1000:.0f} ms",
                ]
            )
    return table(
        [
            "eps",
            "mechanism",
            "counters",
            "EMS iterations",
            "CPU: one estimate (served)",
            "of which the shape",
            "3 quantile intervals (B = 1,000)",
            "of which the I-projection bisections",
            "wall (loaded machine)",
        ],
        rows,
    )


def rounded_law(values: np.ndarray, k: int) -> np.ndarray:
    """The exact law of the randomly rounded values on the k + 1 grid points of [0, 1]
    (``ldp_core.mechanisms._grid.round_inputs``: up with probability ceil(frac W) / W)."""
    s = values * k
    j = np.minimum(np.floor(s), k).astype(np.int64)
    up = np.where(j < k, np.ceil((s - j) * WORD) / WORD, 0.0)
    law = np.bincount(j, weights=1 - up, minlength=k + 1)
    law += np.bincount(np.minimum(j + 1, k), weights=up, minlength=k + 1)
    out: np.ndarray = law / len(values)
    return out


def _channel_noise(m: GridChannel, masses: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(R, P): the served bootstrap's replicates of the unbiased CDF before the monotone
    step, less their population's own CDF (the same draws as ``bootstrap_cdf``)."""
    _, w, _ = search_weights(m)
    people = fixed_population(masses, N)
    gen = np.random.default_rng(tally_seed(counts))
    tallies = population_tallies(m.transition(), people, DEFAULT_REPLICATES, gen)
    own = ((people / N) @ m.transition()) @ w
    out: np.ndarray = tallies / N @ w - own
    return out


def _projected(own: np.ndarray, j: int, q: float) -> np.ndarray:
    """The CDF nearest ``own`` in KL whose value at point j is q: the mass below scaled
    to q, the mass above to 1 - q (the I-projection of the population onto the null)."""
    a = float(own[j])
    below = own * (q / a) if a > 0 else np.full_like(own, q)
    above = 1 - (1 - own) * ((1 - q) / (1 - a)) if a < 1 else np.full_like(own, q)
    out: np.ndarray = np.where(np.arange(len(own)) <= j, below, above)
    return out


def diagnosis_table(
    populations: int,
    trials: int,
    shapes: tuple[str, ...],
    epsilons: tuple[float, ...],
    first: int = 0,
) -> str:
    """Why a quantile interval under-covers (issue 15), on the coverage table's tallies
    (the same seeds: populations first, first + 1, ...).  Per tally: the served interval
    (bootstrap population G = the EMS shape); the same inversion with the **oracle**
    population (the true values' own rounded law, 2,000 replicates per population),
    which isolates G's mismatch from the pivot's; the test at the truth alone (F_hat(x0)
    - q inside the band at x0, with G's band and with the oracle's); and the **level**
    pivot, the CDF error taken where G's own CDF reaches q (the null population G
    shifted so that its q-quantile is x; the interval is then from where F_hat reaches
    q + e_lo to where it reaches q + e_hi); and the test at the truth with the
    **I-projection null** (``_projected``: G reweighted so that its CDF at x is q)
    carrying the replicates' own channel noise (``_channel_noise``), so no tally is
    redrawn.  Not served: docs/numeric.md."""
    rows = []
    for shape in shapes:
        for eps in epsilons:
            m = build("square_wave", eps)
            x, w, _ = search_weights(m)
            keys = ("served", "oracle", "level", "truth G", "truth oracle", "truth I")
            hits = {key: np.zeros(len(QUANTILES)) for key in keys}
            width = {key: np.zeros(len(QUANTILES)) for key in keys[:3]}
            total = 0
            for p in range(first, first + populations):
                values = draw(shape, N, 50_000 + p)
                truth = np.quantile(values, QUANTILES)
                counts = m.simulate_tallies(values, trials, np.random.default_rng(p))
                masses = ems(m.transition(), counts, smoothing=smoothing_for(eps))[0]
                oracle = bootstrap_cdf(
                    m.transition(),
                    w,
                    x,
                    rounded_law(values, m.k),
                    N,
                    Bootstrap(2000, seed=p),
                    counts[0],
                )
                o_band = np.quantile(oracle.replicate - oracle.own, [0.025, 0.975], axis=0)
                for row in range(trials):
                    total += 1
                    d = _unshaped(m, counts[row] / N, masses[row])
                    boot = d.bootstrap_cdf()
                    noise = _channel_noise(m, masses[row], counts[row])
                    served = d.intervals_from(boot, QUANTILES)
                    g_band = np.quantile(boot.replicate - boot.own, [0.025, 0.975], axis=0)
                    by_oracle = read_quantiles(x, boot.observed - o_band, QUANTILES)
                    for i, q in enumerate(QUANTILES):
                        t = truth[i]
                        # the level pivot: G's error where its own CDF reaches q
                        j = min(int(np.searchsorted(boot.own, q)), len(x) - 1)
                        e = np.quantile(boot.replicate[:, j] - boot.own[j], [0.025, 0.975])
                        by_level = read_quantiles(x, boot.observed[None, :], (q + e[0], q + e[1]))
                        ends = {
                            "served": (served[i].ci_low, served[i].ci_high),
                            "oracle": (by_oracle[0, i], by_oracle[1, i]),
                            "level": (by_level[0, 0], by_level[0, 1]),
                        }
                        for key, (low, high) in ends.items():
                            hits[key][i] += low <= t <= high
                            width[key][i] += high - low
                        at = float(np.interp(t, x, boot.observed)) - q
                        for key, band in (("truth G", g_band), ("truth oracle", o_band)):
                            lo, hi = np.interp(t, x, band[0]), np.interp(t, x, band[1])
                            hits[key][i] += lo <= at <= hi
                        # the I-projection null at the search point j0 next above the truth
                        j0 = min(int(np.searchsorted(x, t)), len(x) - 2)
                        null = _projected(boot.own, j0, q)
                        e_i = np.quantile(monotone(null + noise)[:, j0] - q, [0.025, 0.975])
                        hits["truth I"][i] += e_i[0] <= boot.observed[j0] - q <= e_i[1]
            rows.append(
                [
                    shape,
                    f"{eps:g}",
                    str(total),
                    *(_covered(int(h), total) for h in hits["served"]),
                    *(_covered(int(h), total) for h in hits["oracle"]),
                    *(
                        " ".join(f"{h / total:.3f}" for h in hits[key])
                        for key in ("truth G", "truth oracle", "truth I", "level")
                    ),
                    " / ".join(
                        " ".join(f"{v / total:.3f}" for v in width[key])
                        for key in ("served", "oracle", "level")
                    ),
                ]
            )
    return table(
        [
            "data",
            "eps",
            "tallies",
            *(f"p{q * 100:g} served [95% CI]" for q in QUANTILES),
            *(f"p{q * 100:g} oracle population [95% CI]" for q in QUANTILES),
            "test at the truth, G's band p50 p90 p99",
            "test at the truth, oracle band",
            "test at the truth, I-projection null",
            "level pivot p50 p90 p99",
            "mean width served / oracle / level",
        ],
        rows,
    )
