"""The distribution estimator: the unbiased CDF, its stderr, and the coverage of intervals.

False-positive rates (each stated at the check):
- unbiasedness: |z| > 5.5 over 1000 surveys at 5 points (2e-7 together);
- stderr: the mean estimated variance over the empirical one of 1000 surveys
  (chi-square with 999 df over 999: sd 0.045) inside [0.75, 1.33], i.e. the
  empirical variance within 5.6 sd below and 7.4 sd above: < 2e-8 per point,
  < 1e-7 for the 5 (a wrong variance formula is off by far more);
- coverage: hits of 95% intervals over 300 surveys; if an interval covers at least
  0.93 (the goal's lower edge; the range shares' are normal, the quantiles' a
  bootstrap), hits are at least Bin(300, 0.93), and P[Bin(300, 0.93) <= 252] =
  8.2e-8 (exact), so the floor is 253 hits per figure (< 5e-7 for the 5).  The
  full coverage table at n = 10^5 is benchmarks/bench_distribution.py;
- the served p99 value's mean absolute error (eps = 1): stated at the test (2e-8).
Each test runs for both grid mechanisms (Square Wave, the hierarchical histogram):
the rates above double, all still below 1e-6 together.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from aggregator.distribution import (
    Bootstrap,
    GridChannel,
    cdf_of_masses,
    distribution_json,
    estimate_distribution,
    isotonic_masses,
    wasserstein1,
)
from aggregator.quantiles import MIN_REPLICATES
from ldp_core.mechanisms._grid import up_probability
from ldp_core.mechanisms.hierarchical import HierarchicalHistogram
from ldp_core.mechanisms.square_wave import SquareWave
from tests.stats import z_for

POINTS = np.array([0.5, 2.0, 3.3, 6.0, 9.5])
GRID_MECHANISMS = (SquareWave, HierarchicalHistogram)


def rounded_grid(m: GridChannel, values: np.ndarray) -> np.ndarray:
    """The exact law of the rounded value on the grid points, for known values."""
    out = np.zeros(m.k + 1)
    for v in values:
        j, f = up_probability(float(v), m.lo, m.hi, m.k)
        out[j] += 1 - f
        if f:
            out[j + 1] += f
    return out / len(values)


@pytest.mark.parametrize("kind", GRID_MECHANISMS)
def test_cdf_is_unbiased_with_the_stated_stderr(kind: type[GridChannel]) -> None:
    m = kind(2.0, 0.0, 10.0)
    values = np.linspace(0.0, 10.0, 37)[np.arange(5000) % 37] ** 2 / 10  # skewed, atoms
    expected = cdf_of_masses(rounded_grid(m, values), m.lo, m.hi)(POINTS)
    tallies = m.simulate_tallies(values, 1000, np.random.default_rng(11))
    got, var = [], []
    for t in tallies:
        d = estimate_distribution(m, t, len(values))
        f, se = d.cdf(POINTS)
        got.append(f)
        var.append(se**2)
    f_hat, v_hat = np.array(got), np.array(var)
    z = (f_hat.mean(axis=0) - expected) / (f_hat.std(axis=0, ddof=1) / np.sqrt(len(f_hat)))
    assert np.all(np.abs(z) < z_for(2e-7, checks=5)), z
    ratio = v_hat.mean(axis=0) / f_hat.var(axis=0, ddof=1)
    assert np.all((ratio > 0.75) & (ratio < 1.33)), ratio


@pytest.mark.parametrize("kind", GRID_MECHANISMS)
def test_intervals_cover_quantiles_and_range_shares(kind: type[GridChannel]) -> None:
    m = kind(2.0, 0.0, 1.0)
    quantiles, ranges = (0.5, 0.9), ((0.0, 0.2), (0.2, 0.4), (0.5, 1.0))
    hits = np.zeros(len(quantiles) + len(ranges))
    widths = []
    surveys = 300
    assert binom.cdf(252, surveys, 0.93) < 1e-7  # the floor's false-positive rate
    for r in range(surveys):
        gen = np.random.default_rng(100 + r)
        values = gen.beta(2, 5, size=20_000)
        t = m.simulate_tallies(values, 1, gen)[0]
        d = estimate_distribution(
            m, t, len(values), quantiles=quantiles, bootstrap=Bootstrap(MIN_REPLICATES)
        )
        truth = np.quantile(values, quantiles)
        for i, q in enumerate(quantiles):
            interval = d.quantile(q)
            hits[i] += interval.ci_low <= truth[i] <= interval.ci_high
            widths.append(interval.ci_high - interval.ci_low)
        for i, (a, b) in enumerate(ranges):
            interval = d.range_share(a, b)
            share = np.mean((values >= a) & (values <= b))
            hits[len(quantiles) + i] += interval.ci_low <= share <= interval.ci_high
        if r == 0:  # the served shape is close to the truth (W1 a share of the range)
            assert wasserstein1(cdf_of_masses(d.masses, 0.0, 1.0), values, 0.0, 1.0) < 0.02
    assert np.all(hits >= 253), hits / surveys
    assert 0 < np.mean(widths) < 0.1  # intervals that say something


def test_isotonic_shape_is_a_distribution_whose_cdf_is_nearest_the_unbiased_one() -> None:
    unbiased = np.array([0.2, -0.15, 0.1, 0.4, 0.5, -0.05])
    masses = isotonic_masses(unbiased)
    assert np.all(masses >= 0) and abs(masses.sum() - 1) < 1e-12
    cdf = np.cumsum(masses)[:-1]
    raw = np.cumsum(unbiased)[:-1]
    # Pool adjacent violators: the pooled blocks hold the mean of the raw sums they pool.
    assert cdf.tolist() == pytest.approx([0.125, 0.125, 0.15, 0.55, 1.0])
    assert np.all(np.diff(cdf) >= 0) and np.all(cdf <= 1)
    assert raw[:2].mean() == pytest.approx(cdf[0])


def test_a_hierarchical_metric_serves_the_same_json() -> None:
    m = HierarchicalHistogram(1.0, 0.0, 1.0)
    t = m.simulate_tallies(np.linspace(0, 1, 2000), 1, np.random.default_rng(0))[0]
    body = distribution_json(["distribution", "quantiles"], m, t, 2000, 0.95)
    assert len(body["distribution"]["buckets"]) == 16
    assert body["distribution"]["grid_points"] == 16
    assert "hierarchical" in body["distribution"]["method"]
    assert [q["q"] for q in body["quantiles"]] == [0.5, 0.9, 0.99]


def test_the_p99_interval_covers_at_small_eps_where_the_tail_is_flat() -> None:
    # eps = 1, n = 20,000: the monotone CDF reaches 0.99 in a flat, noisy tail.  An
    # interval built on the quantile scale (percentile, or basic about the smoothed
    # shape's quantile) covered 0.00-0.70 here; the served CDF-scale inversion must
    # cover at least 0.93 (the goal's lower edge): P[Bin(150, 0.93) <= 119] = 4.8e-8, so
    # the floor is 120 of 150 (a 0.6 coverage passes it with probability 1.4e-7).
    # The shape's p99 (served as ``smoothed`` since issue 40; it was the value, moved
    # into the interval): on 150 other surveys (seeds 70,000-70,149) its mean absolute
    # error was 0.083 (sd 0.071, se 0.0058), against 0.150 (se 0.0087) for the test's
    # centre read with G's band.  The ceiling 0.115 is 5.5 se above the former mean (a
    # false failure about 2e-8, normal mean of 150 bounded errors).  The value served
    # since issue 40 is the I-projection test's centre, the point its interval is built
    # around (0.130 here): a tail read less sharply, in exchange for a value its interval
    # and stderr describe (docs/numeric.md, "Issue 40").
    m = SquareWave(1.0, 0.0, 1.0)
    surveys = 150
    assert binom.cdf(119, surveys, 0.93) < 1e-7
    hits, widths, errors = 0, [], []
    for r in range(surveys):
        gen = np.random.default_rng(9_000 + r)
        values = gen.beta(2, 5, size=20_000)
        t = m.simulate_tallies(values, 1, gen)[0]
        d = estimate_distribution(m, t, 20_000, bootstrap=Bootstrap(MIN_REPLICATES))
        interval = d.quantile(0.99)
        truth = np.quantile(values, 0.99)
        hits += int(interval.ci_low <= truth <= interval.ci_high)
        widths.append(interval.ci_high - interval.ci_low)
        assert interval.smoothed is not None
        errors.append(abs(interval.smoothed - truth))
    assert hits >= 120, hits / surveys
    assert np.mean(widths) < 0.6  # not the whole upper half of the range
    assert np.mean(errors) < 0.115, np.mean(errors)
