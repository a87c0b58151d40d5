"""Grid Piecewise and Hybrid means: unbiased, with the closed-form variance, audited.

The estimate's MSE over T simulated surveys, divided by the exact variance
(``exact_mean_variance``: the per-report variances summed), is a chi-square
mean of T terms: its sd is sqrt(2/T) = 0.0158 at T = 8000.  The bound
[0.9, 1.1] is 6.3 sd; with the skew of a chi-square the one-sided tail is
still below 1e-8 per check, and the 10 checks below err together with
probability < 1e-7.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from aggregator.estimate import estimate, exact_mean_variance
from ldp_core import Numeric, mechanism
from ldp_core.audit import audit
from ldp_core.mechanisms.piecewise import PiecewiseMean
from ldp_core.registry import auto_choice
from tests.stats import z_for

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
LO, HI = -5.0, 20.0
N, TRIALS = 1000, 8000


def values() -> np.ndarray:
    """N fixed values spread over [LO, HI], the extremes included."""
    return np.linspace(LO, HI, 21)[np.arange(N) % 21]


@pytest.mark.parametrize("name", ["piecewise", "hybrid"])
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_mean_is_unbiased_with_the_closed_form_variance(name: str, epsilon: float) -> None:
    m = mechanism(name, epsilon=epsilon, lo=LO, hi=HI)
    assert isinstance(m, Numeric)
    x = values()
    gen = np.random.default_rng(int(epsilon * 100) + len(name))
    cells = m.sample(np.tile(x, TRIALS), gen).reshape(TRIALS, N)
    means = np.asarray(m.report_values())[cells].mean(axis=1)
    exact = exact_mean_variance(m, x)
    ratio = float(((means - x.mean()) ** 2).mean() / exact)
    assert 0.9 < ratio < 1.1, ratio
    # The estimator reads the same numbers from the tallies.
    tally = np.bincount(cells[0], minlength=m.num_counters)
    e = estimate(m, tally, N)
    assert e.value == pytest.approx(means[0], rel=1e-9, abs=1e-9)
    # Its variance estimate from one tally of 8000 x 1000 reports is within 5%.
    total = cells.reshape(-1)
    pooled = m.mean_variance(np.bincount(total, minlength=m.num_counters), N * TRIALS)
    assert 0.95 < pooled * TRIALS / exact < 1.05


def test_intervals_cover_the_mean() -> None:
    """95% intervals over 2000 surveys of n = 2000: coverage is Bin(2000, 0.95) with
    sd 0.0049; [0.925, 0.975] is 5.1 sd (two-sided rate < 1e-6)."""
    m = mechanism("hybrid", epsilon=2.0, lo=LO, hi=HI)
    beta = np.random.default_rng(3).beta(2, 5, size=2000)
    x = np.round(beta * 50) / 50 * (HI - LO) + LO  # 51 distinct values: a fast sampler
    gen = np.random.default_rng(4)
    hits = 0
    for _ in range(2000):
        tally = np.bincount(m.sample(x, gen), minlength=m.num_counters)
        e = estimate(m, tally, len(x))
        hits += e.ci_low <= x.mean() <= e.ci_high
    assert 0.925 < hits / 2000 < 0.975


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 2.0, 4.0, 8.0])
def test_auto_is_never_worse_than_one_bit_mean(epsilon: float) -> None:
    choice = auto_choice(epsilon, 2, kind="mean")
    assert choice.variances[choice.chosen] <= choice.variances["one_bit_mean"]
    assert choice.variances[choice.chosen] <= 1.05 * min(choice.variances.values())
    chosen = mechanism(choice.chosen, epsilon=epsilon, lo=0.0, hi=1.0)
    bit = mechanism("one_bit_mean", epsilon=epsilon, lo=0.0, hi=1.0)
    assert chosen.average_variance() <= bit.average_variance()  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["one_bit_mean", "piecewise", "hybrid"])
def test_average_variance_is_the_mean_over_uniform_values(name: str) -> None:
    m = mechanism(name, epsilon=2.0, lo=0.0, hi=1.0)
    grid = np.linspace(0.0, 1.0, 20_001)
    if isinstance(m, Numeric):
        per_value = np.array([m.value_variance(float(v)) for v in grid])
    else:
        p, q = m.p_star, m.q_star
        pi = q + grid * (p - q)
        per_value = pi * (1 - pi) / (p - q) ** 2
    expected = float(np.trapezoid(per_value, grid))
    assert m.average_variance() == pytest.approx(expected, rel=1e-3)  # type: ignore[attr-defined]


def test_one_bit_mean_unit_variance_is_its_worst_case() -> None:
    m = mechanism("one_bit_mean", epsilon=1.0, lo=0.0, hi=1.0)
    p, q = m.p_star, m.q_star
    worst = max(
        (q + z * (p - q)) * (1 - q - z * (p - q)) / (p - q) ** 2 for z in np.linspace(0, 1, 101)
    )
    assert m.unit_variance() == pytest.approx(worst, rel=1e-12)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_grid_costs_at_most_one_percent(epsilon: float) -> None:
    m = PiecewiseMean(epsilon, 0.0, 1.0)
    assert m.grid_cost() <= 0.01
    assert m.rounding_cost() <= 0.01
    assert m.epsilon - 1e-6 < m.epsilon_actual <= m.epsilon


def test_output_distribution_is_the_sampler_law() -> None:
    """Cell counts of 200,000 draws against the exact law: |z| < z_for(1e-6, cells)."""
    m = mechanism("hybrid", epsilon=1.0, lo=LO, hi=HI)
    value = 3.7
    gen = np.random.default_rng(9)
    counts = np.bincount(m.sample(np.full(200_000, value), gen), minlength=m.num_counters)
    p = m.output_distribution(value)
    assert math.isclose(p.sum(), 1.0, rel_tol=1e-12)
    sd = np.sqrt(200_000 * p * (1 - p))
    assert np.all(np.abs(counts - 200_000 * p) <= z_for(1e-6, m.num_counters) * sd + 1e-9)


@pytest.mark.parametrize("name", ["piecewise", "hybrid"])
@pytest.mark.parametrize("epsilon", [0.5, 2.0, 8.0])
def test_audit_lower_bound_stays_below_epsilon(name: str, epsilon: float) -> None:
    """Clopper-Pearson at 0.999999: a bound above eps would be a real violation."""
    m = mechanism(name, epsilon=epsilon, lo=0.0, hi=1.0)
    r = audit(m, trials=200_000, confidence=1 - 1e-6, seed=5)
    assert not r.violation
    assert r.lower_bound <= m.epsilon
    assert r.null_control < 0.05
    assert r.lower_bound > 0.5 * m.epsilon_actual or epsilon > 4
