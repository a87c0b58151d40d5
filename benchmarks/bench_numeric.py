"""Numeric metrics: the mean of Piecewise / Hybrid / auto beside 1BitMean.

Run: ``.venv/bin/python benchmarks/bench_numeric.py [surveys]`` (default 2000;
about 40 s).  Data: n = 2,000 values uniform over [0, 100] (1001 distinct
grid values).  For each eps and mechanism, ``surveys`` independent surveys
(vectorised device law, ``Mechanism.sample``) give the empirical MSE of the
mean, printed over the closed-form variance (``exact_mean_variance``: the
per-report variances summed, a ratio of 1 means the formula is right), and
the MSE over 1BitMean's measured in the same run.  ``grid cost``: the grid
Piecewise's worst-case variance over the continuous PM's closed form, minus 1,
and the input rounding's share of it (its bound 1/k^2).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from aggregator.estimate import exact_mean_variance
from benchmarks import _smoke
from benchmarks._table import header, table
from ldp_core import mechanism
from ldp_core.mechanisms.piecewise import PiecewiseMean
from ldp_core.registry import auto_choice

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
N = 2_000
LO, HI = 0.0, 100.0


def uniform_values(n: int = N, seed: int = 0) -> np.ndarray:
    """n values uniform over the 1001 grid values 0, 0.1, ..., 100."""
    return np.random.default_rng(seed).integers(0, 1001, size=n) / 10.0


def mse(name: str, epsilon: float, x: np.ndarray, surveys: int, seed: int) -> tuple[float, float]:
    """(empirical MSE of the mean, closed-form variance) over ``surveys`` surveys."""
    m = mechanism(name, epsilon=epsilon, lo=LO, hi=HI)
    gen = np.random.default_rng(seed)
    values = np.asarray(m.report_values()) if hasattr(m, "report_values") else None
    errors = []
    for _ in range(surveys):
        batch = m.sample(x, gen)
        if values is None:  # one bit: the 1BitMean estimator
            p, q = m.p_star, m.q_star
            share = (batch.mean() - q) / (p - q)
            errors.append(LO + share * (HI - LO) - x.mean())
        else:
            errors.append(values[batch].mean() - x.mean())
    return float(np.mean(np.square(errors))), exact_mean_variance(m, x)


def means_table(surveys: int = 2000) -> str:
    x = uniform_values()
    rows = []
    for i, eps in enumerate(EPSILONS):
        auto = auto_choice(eps, 2, kind="mean").chosen
        measured = {
            name: mse(name, eps, x, surveys, seed=100 * i + j)
            for j, name in enumerate(("one_bit_mean", "piecewise", "hybrid"))
        }
        base = measured["one_bit_mean"][0]
        pm = PiecewiseMean(eps, 0.0, 1.0)
        for name, (err, exact) in measured.items():
            rows.append([
                f"{eps:g}", name + (" (auto)" if name == auto else ""),
                f"{err:.4g}", f"{exact:.4g}", f"{err / exact:.3f}", f"{err / base:.4f}",
                f"{pm.grid_cost():+.3f} / {pm.rounding_cost():.4f}" if name == "piecewise" else "",
            ])
    return table(
        ["eps", "mechanism", "MSE", "closed form", "MSE/closed", "MSE/1BitMean",
         "grid cost / rounding share"],
        rows,
    )


def main() -> None:
    surveys = _smoke.size(int(sys.argv[1]) if len(sys.argv) > 1 else 2000, 20)
    _smoke.announce("bench_numeric")
    print(header(f"Means of numeric metrics: n = {N} uniform over [{LO:g}, {HI:g}], "
                 f"{surveys} surveys each"))
    print(means_table(surveys))


if __name__ == "__main__":
    main()
