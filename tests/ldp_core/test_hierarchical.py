"""The hierarchical histogram on a grid: exact channel, epsilon, unbiased inverse and mean.

False-positive rates: the checks on the channel, the inverse and the report
values are exact arithmetic (no randomness); the mean's z-test at |z| > 5.5
has a two-sided rate of 4e-8 per eps, 1.6e-7 for the 4.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from aggregator.estimate import estimate, exact_mean_variance
from ldp_core import Numeric, mechanism
from ldp_core.mechanisms.hierarchical import HierarchicalHistogram, level_oracle, linear_inverse
from ldp_core.metric import MetricSpec, SpecError
from tests.stats import z_for

EPSILONS = (0.5, 1.0, 2.0, 4.0)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_exact_channel_and_its_epsilon(epsilon: float) -> None:
    m = HierarchicalHistogram(epsilon, 0.0, 1.0)
    rows = [m.exact_row(j) for j in range(m.k + 1)]
    assert all(sum(row) == 1 for row in rows)
    # Every cell's ratio between any two grid points is one level's oracle ratio.
    worst = max(Fraction(max(col), min(col)) for col in zip(*rows, strict=True))
    assert math.log(worst) <= m.epsilon_actual <= epsilon
    assert m.epsilon_actual == max(o.epsilon_actual for o in m.oracles)
    # A report is one level's report: each level holds 1/h of the mass whatever the value.
    for row in rows:
        for level in range(m.depth):
            share = sum(row[m.offsets[level] : m.offsets[level + 1]])
            assert share == Fraction(1, m.depth)


def test_each_level_takes_the_oracle_of_lower_variance() -> None:
    assert [o.name for o in HierarchicalHistogram(0.5, 0, 1).oracles] == [
        "grr", "grr", "hadamard", "hadamard"]
    assert [o.name for o in HierarchicalHistogram(4.0, 0, 1).oracles] == ["grr"] * 4
    with pytest.raises(ValueError, match="branching"):
        HierarchicalHistogram(1.0, 0, 1, branching=1)
    with pytest.raises(ValueError, match="1024"):
        HierarchicalHistogram(1.0, 0, 1, branching=8, depth=4)
    assert level_oracle(1.0, 2).num_counters == 2


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_the_inverse_is_unbiased_for_every_grid_law(epsilon: float) -> None:
    for m in (HierarchicalHistogram(epsilon, 0.0, 1.0),
              HierarchicalHistogram(epsilon, 0.0, 1.0, branching=4, depth=3)):
        t = m.transition()
        p = linear_inverse(t)
        # E[share] = x T, so E[share P] = x T P = x for every grid law x.
        assert np.allclose(t @ p, np.eye(m.k + 1), atol=1e-9)
        # The report values average to the value itself: an unbiased mean.
        y = np.asarray(m.report_values())
        for v in (0.0, 0.137, 0.5, 0.91, 1.0):
            assert float(m.output_distribution(v) @ y) == pytest.approx(v, abs=1e-9)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_the_mean_is_unbiased_with_its_stated_variance(epsilon: float) -> None:
    m = mechanism("hierarchical", epsilon=epsilon, lo=10.0, hi=20.0)
    assert isinstance(m, Numeric)
    values = np.random.default_rng(3).beta(2, 5, 4000) * 10 + 10
    trials = m.simulate_tallies(values, 200, np.random.default_rng(4))
    means = np.array([float(estimate(m, t, len(values)).value) for t in trials])
    sd = math.sqrt(exact_mean_variance(m, values))
    z = (means.mean() - values.mean()) / (sd / math.sqrt(len(means)))
    assert abs(z) < z_for(4e-8), z
    stated = np.mean([m.mean_variance(t, len(values)) for t in trials])
    # Exact expectation over the stated one: 1 up to the rounding bound (<= 1.03 here);
    # the mean of 200 estimates has a relative sd under 1%, so [0.9, 1.1] fails only a
    # wrong formula (leaving out Var(v)/n, for one, gives 1.56 at eps = 4).
    assert 0.9 < stated / sd**2 < 1.1, stated / sd**2


def test_a_distribution_is_served_by_square_wave_only() -> None:
    """The hierarchy's 16-point grid biases range and quantile intervals (docs/numeric.md):
    a spec that asks it for a distribution is refused by name; ``auto`` is Square Wave."""
    def spec(eps: float, mech: str = "auto") -> MetricSpec:
        return MetricSpec.from_json({"name": "lat", "kind": "numeric", "lo": 0, "hi": 9,
                                     "epsilon": eps, "mechanism": mech,
                                     "statistics": ["distribution"]})
    assert spec(0.5).mechanism == "square_wave"
    with pytest.raises(SpecError) as info:
        spec(1.0, "hierarchical")
    assert "square_wave" in str(info.value)
    mean_only = MetricSpec.from_json({"name": "lat", "kind": "numeric", "lo": 0, "hi": 9,
                                      "epsilon": 1.0, "mechanism": "hierarchical"})
    assert mean_only.mechanism == "hierarchical"
