"""The cost table and the parameter sweeps of ``bench_distribution`` (run through it:
``--cost``, ``--sweep``, ``--smoothing``): the served estimate's CPU time, and W1 by
EMS smoothing weight and by tree (B, h) on shapes and seeds apart from the table's,
where ``SMOOTHING``, ``LOW_EPSILON_SMOOTHING`` and the hierarchy's
``BRANCHING``/``DEPTH`` come from."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from aggregator.distribution import DistributionEstimate, GridChannel, estimate_distribution
from aggregator.shape import wasserstein1
from benchmarks._table import median_seconds, table
from benchmarks.bench_distribution import (
    EPSILONS,
    OUE_BUCKETS,
    QUANTILES,
    SWEEP_SHAPES,
    N,
    build,
    draw,
    oue_cdf,
    served_cdf,
)
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

            rows.append(
                [
                    f"{eps:g}",
                    name,
                    str(m.num_counters),
                    str(d.iterations),
                    f"{_cpu_seconds(served) * 1000:.0f} ms",
                    f"{_cpu_seconds(shape) * 1000:.0f} ms",
                    f"{_cpu_seconds(intervals) * 1000:.0f} ms",
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
            "wall (loaded machine)",
        ],
        rows,
    )
