"""Square Wave on the integer grid: exact channel, epsilon, samplers that agree, unbiased mean.

False-positive rates: the chi-square two-sample test below rejects at
p < 1e-7 (one test per eps, 5 in all: < 1e-6 together); the mean's z-test at
|z| > 5.5 (two-sided rate 4e-8 per eps, 2e-7 for the 5).
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2 as chi2_law

from aggregator.estimate import estimate, exact_mean_variance
from ldp_core import Numeric, mechanism
from ldp_core.audit import audit
from ldp_core.mechanisms.square_wave import SquareWave, window_half_width
from ldp_core.metric import MetricSpec, SpecError
from tests.stats import z_for

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_exact_channel_and_its_epsilon(epsilon: float) -> None:
    m = SquareWave(epsilon, 0.0, 1.0)
    rows = [m.weights(j) for j in range(m.k + 1)]
    assert all(sum(row) == m.total for row in rows)
    # Every cell's ratio between any two rows is A/B at most, and ln(A/B) <= eps.
    for i in range(m.num_counters):
        column = [row[i] for row in rows]
        assert Fraction(max(column), min(column)) <= Fraction(m.a, m.b)
    assert math.log(m.a / m.b) <= m.epsilon_actual <= epsilon
    # The window is the paper's 2 b on the grid's scale.
    assert abs(m.cells - 2 * window_half_width(epsilon) * m.k) <= 0.5 or m.cells in (1, m.k)
    assert np.allclose(m.transition().sum(axis=1), 1.0)
    # The vectorised audit finds no more than eps and a null control of 0.
    report = audit(m, trials=100_000, seed=7)
    assert not report.violation and report.null_control == 0.0


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_device_path_and_simulation_have_one_law(epsilon: float) -> None:
    """Cells of 20,000 device-path reports against the multinomial simulation's."""
    m = SquareWave(epsilon, 0.0, 10.0)
    values = [10.0 * (i % 41) / 40 for i in range(20_000)]
    rng = random.Random(int(epsilon * 10))
    device = np.bincount([m.randomize(v, rng=rng) for v in values], minlength=m.num_counters)
    simulated = m.simulate_tallies(np.asarray(values), 1, np.random.default_rng(3))[0]
    both = device + simulated
    keep = both > 0
    expected = both[keep] / 2
    chi2 = float((((device[keep] - expected) ** 2 + (simulated[keep] - expected) ** 2)
                  / expected).sum())
    assert chi2_law.sf(chi2, int(keep.sum()) - 1) > 1e-7


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_the_report_is_an_unbiased_mean(epsilon: float) -> None:
    m = mechanism("square_wave", epsilon=epsilon, lo=-5.0, hi=20.0)
    assert isinstance(m, Numeric)
    x = np.linspace(-5.0, 20.0, 21)[np.arange(2000) % 21]
    t = m.simulate_tallies(x, 200, np.random.default_rng(int(epsilon * 7)))
    means = np.array([estimate(m, row, len(x)).value for row in t])
    z = (means.mean() - x.mean()) / math.sqrt(exact_mean_variance(m, x) / len(means))
    assert abs(z) < z_for(4e-8), z


def test_spec_statistics_pick_square_wave_and_name_errors() -> None:
    base = {"name": "latency", "kind": "numeric", "lo": 0, "hi": 500, "epsilon": 1.0}
    assert MetricSpec.from_json(base).statistics == ("mean",)
    assert MetricSpec.from_json(base).mechanism != "square_wave"
    spec = MetricSpec.from_json({**base, "statistics": ["distribution"]})
    assert spec.mechanism == "square_wave" and spec.serves_distribution
    assert MetricSpec.from_json(spec.to_json()) == spec  # the stored form round-trips
    for bad, field in (
        ({"statistics": ["median"]}, "statistics"),
        ({"statistics": []}, "statistics"),
        ({"statistics": "mean"}, "statistics"),
        ({"statistics": ["mean", "mean"]}, "statistics"),
        ({"statistics": ["quantiles"], "mechanism": "piecewise"}, "mechanism"),
        ({"statistics": ["quantiles"], "longitudinal": {"epsilon_inf": 4.0}}, "mechanism"),
    ):
        with pytest.raises(SpecError) as caught:
            MetricSpec.from_json({**base, **bad})
        assert field in caught.value.errors, (bad, caught.value.errors)
    with pytest.raises(SpecError) as caught:
        MetricSpec.from_json({"name": "b", "kind": "boolean", "epsilon": 1.0,
                              "statistics": ["mean"]})
    assert "statistics" in caught.value.errors
