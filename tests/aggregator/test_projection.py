"""The I-projection test of a quantile and its inversion (aggregator.projection).

No statistical assertion here (every check is exact or holds for any draw), so no
false-positive rate to state; the coverage of the served intervals is tested in
tests/aggregator/test_distribution.py and measured in docs/numeric.md.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.distribution import estimate_distribution
from aggregator.projection import (
    ProjectionTest,
    acceptance,
    first_true,
    monotone_column,
    projected,
    projection_interval,
)
from aggregator.quantiles import MIN_REPLICATES, Bootstrap, CdfBootstrap, monotone
from ldp_core.mechanisms.square_wave import SquareWave


def test_the_projection_is_a_cdf_through_q_with_each_sides_shape_kept() -> None:
    own = np.cumsum(np.random.default_rng(0).dirichlet(np.ones(40)))
    own[-1] = 1.0
    for j in (0, 7, 20, 38):
        for q in (0.01, 0.5, 0.99):
            null = projected(own, j, q)
            assert null[j] == pytest.approx(q)
            assert np.all(np.diff(null) >= -1e-15) and null[-1] == pytest.approx(1.0)
            # below x_j the CDF is scaled, above it the survival function is
            assert null[: j + 1] == pytest.approx(own[: j + 1] * q / own[j])
            assert 1 - null[j:] == pytest.approx((1 - own[j:]) * (1 - q) / (1 - own[j]))


def test_the_monotone_column_is_that_column_of_the_whole_monotone_step() -> None:
    c = np.random.default_rng(1).normal(0.5, 0.4, size=(50, 30))
    whole = monotone(c)
    for j in range(30):
        assert monotone_column(c, j) == pytest.approx(whole[:, j], abs=0)


def test_first_true_finds_the_change_from_any_start() -> None:
    for size in (1, 2, 5, 17):
        for change in range(size + 1):
            for start in range(size):
                assert first_true(lambda j, c=change: j >= c, start, size) == change


def _shifted(low_error: float, high_error: float, points: int = 1001) -> CdfBootstrap:
    # G is the truth (own = x, F_hat = x + bias), and the noise a shift per replicate,
    # the same at every point: then the null's monotone CDF at x_j is q + shift, for
    # every j, and the I-projection band is G's band.
    x = np.linspace(0.0, 1.0, points)
    shift = np.linspace(low_error, high_error, 401)[:, None] + 0 * x
    return CdfBootstrap(x, np.clip(x + 0.05, 0, 1), monotone(x + shift), x, shift)


def test_where_g_is_the_truth_the_interval_is_the_served_one() -> None:
    boot = _shifted(0.03, 0.07)
    for q in (0.3, 0.5, 0.9):
        _, low, high = boot.interval(q, boot.bands(0.95))
        test = ProjectionTest(boot, q, 0.95)
        assert projection_interval(test, (low, high)) == pytest.approx((low, high), abs=1e-3)
        # g_lo and g_hi are monotone here: the interval is the acceptance set's hull
        accepted, step = boot.x[acceptance(test)], boot.x[1]
        assert low - 1e-9 <= accepted[0] <= low + step + 1e-9  # 1e-9: ties in floats
        assert high - step - 1e-9 <= accepted[-1] <= high + 1e-9
        assert np.all(np.diff(np.flatnonzero(acceptance(test))) == 1)


def test_a_start_far_from_the_ends_finds_the_same_interval() -> None:
    boot = _shifted(-0.02, 0.02)
    test = ProjectionTest(boot, 0.5, 0.95)
    near = projection_interval(test, (0.45, 0.55))
    assert projection_interval(ProjectionTest(boot, 0.5, 0.95), (0.0, 1.0)) == near
    assert projection_interval(ProjectionTest(boot, 0.5, 0.95), (0.6, 0.2)) == near


def test_the_ends_of_a_served_interval_are_where_the_test_turns() -> None:
    # Real tallies: the point beside each end on the outside rejects (on that side) and
    # the one on the inside does not.  The served interval is this one.
    m = SquareWave(1.0, 0.0, 1.0)
    values = np.random.default_rng(3).beta(2, 5, size=20_000)
    t = m.simulate_tallies(values, 1, np.random.default_rng(4))[0]
    d = estimate_distribution(m, t, 20_000, bootstrap=Bootstrap(MIN_REPLICATES, seed=2))
    boot = d.bootstrap_cdf()
    qs = (0.5, 0.9, 0.99)
    for q, served in zip(qs, d.quantile_intervals(qs), strict=True):
        test = ProjectionTest(boot, q, d.confidence)
        _, low, high = boot.interval(q, boot.bands(d.confidence))
        assert projection_interval(test, (low, high)) == (served.ci_low, served.ci_high)
        x = boot.x
        lo = int(np.searchsorted(x, served.ci_low))  # first point at or above the low end
        hi = int(np.searchsorted(x, served.ci_high, side="right")) - 1  # last at or below
        assert lo == 0 or test.below(lo - 1) < 0
        assert test.below(lo) >= 0 or x[lo] == served.ci_low
        assert hi == len(x) - 1 or test.above(hi + 1) > 0
        assert test.above(hi) <= 0 or x[hi] == served.ci_high
        assert served.ci_low <= served.value <= served.ci_high


def test_the_test_needs_the_channel_noise() -> None:
    x = np.linspace(0.0, 1.0, 5)
    with pytest.raises(ValueError, match="channel noise, got None"):
        ProjectionTest(CdfBootstrap(x, x, x[None, :], x), 0.5, 0.95)
