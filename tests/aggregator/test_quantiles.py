"""The quantile bootstrap: its draws' law, its determinism, its cost bounds, the value served.

False-positive rates (each stated at the check):
- the fixed population's tallies: mean and variance of each cell over 4,000
  replicates against the exact sum of per-grid-point multinomials, |z| > 5.5 for
  the mean (3.8e-8 per cell) and the variance ratio outside [0.85, 1.18] (4,000
  draws of counts in the hundreds: the ratio's sd about 0.023, so 6.5 sd below
  and 7.8 sd above, < 1e-10 per cell); under 1e-6 for all cells together.
The coverage of the served intervals is tested in tests/aggregator/test_distribution.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.distribution import (
    _inverse,
    bootstrap_stderr,
    cdf_of_masses,
    estimate_distribution,
    search_weights,
)
from aggregator.projection import ProjectionTest, projection_centre
from aggregator.quantiles import (
    MAX_REPLICATES,
    MIN_REPLICATES,
    Bootstrap,
    CdfBootstrap,
    fixed_population,
    population_tallies,
    read_quantiles,
    tally_seed,
)
from ldp_core.mechanisms.hierarchical import HierarchicalHistogram
from ldp_core.mechanisms.square_wave import SquareWave
from tests.stats import z_for


def _tallies(eps: float, n: int, seed: int) -> tuple[SquareWave, np.ndarray]:
    m = SquareWave(eps, 0.0, 1.0)
    values = np.random.default_rng(seed).beta(2, 5, size=n)
    return m, m.simulate_tallies(values, 1, np.random.default_rng(seed + 1))[0]


@pytest.mark.parametrize(
    "bad", [MIN_REPLICATES - 1, MAX_REPLICATES + 1, 0, -5, True, 1000.0, "1000", None]
)
def test_replicates_outside_the_cost_bounds_are_refused_by_value(bad: object) -> None:
    with pytest.raises(ValueError, match=f"replicates must be an integer in .*got {bad!r}"):
        Bootstrap(replicates=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, True, 1.5, "7"])
def test_a_bad_seed_is_refused_by_value(bad: object) -> None:
    with pytest.raises(ValueError, match=f"seed must be None or an integer >= 0, got {bad!r}"):
        Bootstrap(seed=bad)  # type: ignore[arg-type]


def test_the_bounds_themselves_are_accepted() -> None:
    assert Bootstrap(MIN_REPLICATES).replicates == MIN_REPLICATES
    assert Bootstrap(MAX_REPLICATES, seed=0).seed == 0


def test_same_tallies_give_the_same_intervals_and_a_seed_changes_them() -> None:
    m, t = _tallies(1.0, 20_000, 5)
    plan = Bootstrap(MIN_REPLICATES)
    first = estimate_distribution(m, t, 20_000, bootstrap=plan).quantile_intervals((0.5, 0.9))
    again = estimate_distribution(m, list(t), 20_000, bootstrap=plan).quantile_intervals((0.5, 0.9))
    assert first == again
    seeded = [
        estimate_distribution(
            m, t, 20_000, bootstrap=Bootstrap(MIN_REPLICATES, seed=s)
        ).quantile_intervals((0.5, 0.9))
        for s in (1, 2)
    ]
    assert seeded[0] != seeded[1]
    # One bootstrap for all the quantiles asked: asking one alone gives the same interval.
    alone = estimate_distribution(m, t, 20_000, bootstrap=plan).quantile(0.9)
    assert alone == first[1]
    # Other tallies, another seed.
    assert tally_seed(t) != tally_seed(t + np.eye(len(t), dtype=np.int64)[0])


def test_the_interval_holds_the_value_and_the_stderr_is_the_replicates_spread() -> None:
    m, t = _tallies(2.0, 20_000, 9)
    d = estimate_distribution(m, t, 20_000, bootstrap=Bootstrap(MIN_REPLICATES, seed=3))
    x, _, _ = search_weights(m)
    replicate = read_quantiles(x, d.bootstrap_cdf().replicate, (0.5, 0.99))
    for i, interval in enumerate(d.quantile_intervals((0.5, 0.99))):
        assert interval.ci_low <= interval.value <= interval.ci_high
        # The replicates' sd, or None when they are skewed (issue 40: bootstrap_stderr).
        assert interval.stderr == bootstrap_stderr(replicate[:, i])
        if interval.stderr is not None:
            assert interval.stderr == pytest.approx(np.std(replicate[:, i], ddof=1))
        assert 0.0 <= interval.ci_low < interval.ci_high <= 1.0


def test_the_interval_inverts_the_bootstrap_test_of_the_cdf() -> None:
    # An estimator whose CDF error is biased up by 0.05 at every point with spread
    # +-0.02: the interval is where F_hat(x) - q lies in [0.03, 0.07].
    x = np.linspace(0.0, 1.0, 1001)
    own = x.copy()
    replicate = own + 0.05 + np.linspace(-0.02, 0.02, 401)[:, None]
    boot = CdfBootstrap(x, np.clip(x + 0.05, 0, 1), replicate, own)
    stderr, low, high = boot.interval(0.5, boot.bands(0.95))
    lo_err, hi_err = np.quantile(np.linspace(-0.02, 0.02, 401), [0.025, 0.975]) + 0.05
    assert (low, high) == pytest.approx((0.5 - hi_err + 0.05, 0.5 - lo_err + 0.05), abs=1e-3)
    # The quantile-scale spread of the replicates: 0.02 / sqrt(3) for a uniform shift.
    assert stderr == pytest.approx(0.04 / np.sqrt(12), rel=0.02)


@pytest.mark.parametrize("kind", [SquareWave, HierarchicalHistogram])
def test_the_value_is_the_tests_centre_and_the_shapes_quantile_is_beside_it(kind: type) -> None:
    # Issue 40: the value is where F_hat less the null's median error reaches q (the
    # test the interval inverts, at level 0), so value and interval are one estimator;
    # the shape's own quantile (the value before) is served as ``smoothed``.
    m = kind(0.5, 0.0, 1.0)
    values = np.random.default_rng(21).beta(2, 5, size=20_000)
    t = m.simulate_tallies(values, 1, np.random.default_rng(22))[0]
    d = estimate_distribution(m, t, 20_000, bootstrap=Bootstrap(MIN_REPLICATES, seed=1))
    x, _, _ = search_weights(m)
    qs = (0.5, 0.99)
    shape = read_quantiles(x, cdf_of_masses(d.masses, 0.0, 1.0)(x), qs)[0]
    boot = d.bootstrap_cdf()
    for q, own, interval in zip(qs, shape, d.quantile_intervals(qs), strict=True):
        test = ProjectionTest(boot, q, d.confidence)
        assert interval.value == pytest.approx(
            projection_centre(test, (interval.ci_low, interval.ci_high)))
        assert interval.smoothed == pytest.approx(own)
        assert interval.ci_low <= interval.value <= interval.ci_high


def test_read_quantiles_matches_the_scalar_inverse() -> None:
    gen = np.random.default_rng(4)
    x = np.linspace(0.0, 1.0, 33)
    cdf = np.sort(gen.random((50, 33)), axis=1)
    cdf[:, 0], cdf[:, -1] = 0.0, 1.0
    got = read_quantiles(x, cdf, (0.01, 0.5, 0.99))
    for r in range(50):
        assert got[r].tolist() == pytest.approx([_inverse(x, cdf[r], q) for q in (0.01, 0.5, 0.99)])


def test_fixed_population_keeps_n_and_the_shares() -> None:
    masses = np.random.default_rng(1).dirichlet(np.ones(65))
    people = fixed_population(masses, 100_003)
    assert people.sum() == 100_003
    assert np.all(np.abs(people - masses * 100_003) < 1)


@pytest.mark.parametrize("kind", [SquareWave, HierarchicalHistogram])
def test_population_tallies_have_the_law_of_per_grid_point_multinomials(kind: type) -> None:
    m = kind(1.0, 0.0, 1.0)
    rows = m.transition()
    people = fixed_population(np.random.default_rng(2).dirichlet(np.ones(m.k + 1)), 30_000)
    draws = population_tallies(rows, people, 4000, np.random.default_rng(3))
    assert np.all(draws.sum(axis=1) == 30_000)
    mean = people @ rows
    var = people @ (rows * (1 - rows))
    z = (draws.mean(axis=0) - mean) / np.sqrt(var / len(draws))
    assert np.all(np.abs(z) < z_for(3.8e-8)), z
    ratio = draws.var(axis=0, ddof=1) / var
    assert np.all((ratio > 0.85) & (ratio < 1.18)), ratio


def test_the_bootstrap_population_is_the_served_shape_and_its_cdf_the_target() -> None:
    # F_G, what the replicates estimate, is the CDF of the fixed population's grid law
    # (the unbiased weights through the exact channel give back phi exactly), and that
    # law is the served shape to within one person per grid point.
    m, t = _tallies(1.0, 20_000, 13)
    d = estimate_distribution(m, t, 20_000, bootstrap=Bootstrap(MIN_REPLICATES, seed=0))
    boot = d.bootstrap_cdf()
    people = fixed_population(d.masses, 20_000)
    assert np.abs(people / 20_000 - d.masses).max() <= 1 / 20_000
    assert boot.own == pytest.approx(cdf_of_masses(people / 20_000, 0.0, 1.0)(boot.x), abs=1e-9)
    assert boot.replicate.shape == (MIN_REPLICATES, len(boot.x))
    assert np.all(np.diff(boot.replicate, axis=1) >= 0)  # each replicate's CDF is monotone


def test_a_confidence_the_replicates_cannot_resolve_gets_normal_tails() -> None:
    # 1 - 1e-8 with 1,000 replicates: 5e-6 replicates per tail.  The band is then the
    # median -+ z sd of the error, not the extreme replicates (which would claim 1 - 1e-8
    # for what is about a 1 - 1e-3 interval).
    x = np.linspace(0.0, 1.0, 5)
    noise = np.random.default_rng(8).normal(0.0, 0.01, size=(1000, 1))
    boot = CdfBootstrap(x, x, x + noise, x)
    low, high = boot.bands(1 - 1e-8)
    z = 5.730729  # the normal's 1 - 5e-9 quantile
    sd = float(np.std(noise, ddof=1))
    assert high == pytest.approx(np.median(noise) + z * sd)
    assert low == pytest.approx(np.median(noise) - z * sd)
    assert (high - low)[0] > 2 * float(np.abs(noise).max())
    # At 0.95, 25 replicates per tail: empirical quantiles.
    assert boot.bands(0.95)[1] == pytest.approx(np.quantile(noise, 0.975))
