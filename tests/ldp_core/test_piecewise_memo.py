"""The memoised Piecewise mean: exact channel, alpha-point rounding, lifetime, audits.

False-positive rate.  Each statistical check errs by chance with probability
<= ALPHA = 2e-8 (chi-square p-values, Clopper-Pearson intervals and audit bounds
at that level, normal bounds at z = 5.6), or < 1e-8 where a docstring says so;
the file has fewer than 30 such checks, so it errs with probability < 6e-7.
Chi-square tests have every expected count >= 5 (asserted).  Seeds are fixed.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from aggregator.estimate import estimate, exact_mean_variance
from ldp_core import Memoisable, Numeric, ReportError, WindowedNumeric, longitudinal
from ldp_core._rng import WORD
from ldp_core.audit import audit, cp_lower, cp_upper, epsilon_lower_bound
from ldp_core.mechanisms._grid import round_input
from ldp_core.mechanisms.piecewise import PiecewiseMean
from ldp_core.mechanisms.piecewise_memo import LongitudinalPiecewise
from ldp_core.metric import MetricSpec
from ldp_core.registry import auto_choice

LO, HI = -5.0, 20.0
PAIRS = ((0.5, 1.0), (1.0, 2.0), (1.0, 4.0), (2.0, 8.0))
CONTEXT = "latency/3f2a"
ALPHA = 2e-8  # per statistical check


def build(eps: float = 1.0, eps_inf: float = 4.0) -> LongitudinalPiecewise:
    m = longitudinal("piecewise", epsilon=eps, epsilon_inf=eps_inf, lo=LO, hi=HI)
    assert isinstance(m, LongitudinalPiecewise)
    return m


def secrets(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(32) for _ in range(count)]


def covers(k: int, n: int, p: float | Fraction, alpha: float = ALPHA) -> bool:
    """Whether the two-sided Clopper-Pearson interval (level alpha) for k/n holds p."""
    return cp_lower(k, n, alpha / 2) <= float(p) <= cp_upper(k, n, alpha / 2)


def fits(counts: np.ndarray, probabilities: np.ndarray) -> float:
    """The chi-square goodness-of-fit p-value of cell counts against a law, runs of
    adjacent cells pooled until each expects >= 5 (the outside of a narrow block)."""
    expected = counts.sum() * probabilities
    edges, run = [0], 0.0
    for i, e in enumerate(expected):
        run += e
        if run >= 5:
            edges.append(i + 1)
            run = 0.0
    edges[-1] = len(expected)  # a short last run joins the one before it
    got = np.add.reduceat(counts, edges[:-1])
    want = np.add.reduceat(expected, edges[:-1])
    assert want.min() >= 5 and len(want) > 10, want.min()
    return float(stats.chisquare(got, want).pvalue)


# -- the contract and the exact channel ------------------------------------------------------


@pytest.mark.parametrize(("eps", "eps_inf"), PAIRS)
def test_the_composed_channel_is_exact(eps: float, eps_inf: float) -> None:
    m = build(eps, eps_inf)
    assert (m.name, m.kind, m.levels, m.domain_size) == ("piecewise", "mean", 2, 2)
    assert isinstance(m, Numeric) and isinstance(m, WindowedNumeric)
    assert isinstance(m, Memoisable)
    # Recomputed here from the integer thresholds, independently of the module.
    base = m.permanent
    cells, k, total = base.cells, base.k, base.cells * base.a + base.k * base.b
    size = k + cells
    kappa = Fraction(m.keep, WORD)
    a_star = kappa * Fraction(base.a, total) + (1 - kappa) / size
    b_star = kappa * Fraction(base.b, total) + (1 - kappa) / size
    assert m.channel == (a_star, b_star)
    assert cells * a_star + (size - cells) * b_star == 1
    # eps_1 from the channel, outward, <= the request; one more unit of K would pass it.
    assert math.log(a_star / b_star) <= m.epsilon <= eps
    assert eps - m.epsilon < 1e-6
    assert m._epsilon_of(base, m._compose(base, m.keep + 1)) > eps
    assert base.epsilon_actual <= eps_inf == m.epsilon_inf
    # The audit's event has the channel's extreme ratio.
    p, q = m.audit_design().probabilities
    assert math.log(p / q) == pytest.approx(m.epsilon, abs=1e-9)
    # Wire form: one cell, refused out of range.
    r = m.randomize_memoised(3.7, bytes(32), CONTEXT, random.Random(1))
    assert m.decode(m.encode(r)) == r and m.counters(r) == (r,)
    with pytest.raises(ReportError):
        m.decode(m.num_counters)


def test_randomize_without_a_secret_refuses() -> None:
    with pytest.raises(ValueError, match="randomize_memoised"):
        build().randomize(3.0, rng=random.Random(0))


def test_a_numeric_spec_builds_it_and_auto_takes_it_where_it_is_better() -> None:
    spec = {"name": "latency", "kind": "numeric", "lo": LO, "hi": HI, "epsilon": 1.0,
            "longitudinal": {"epsilon_inf": 4.0}}
    for mech in ("piecewise", "auto"):
        m = MetricSpec.from_json({**spec, "mechanism": mech}).build()
        assert isinstance(m, LongitudinalPiecewise), mech
    # auto compares the two-level forms over 30 epochs: the bit keeps small eps_inf.
    for eps, eps_inf in PAIRS:
        choice = auto_choice(eps, 2, "mean", levels=2, epsilon_inf=eps_inf)
        assert choice.variances[choice.chosen] == min(choice.variances.values())
    assert auto_choice(0.5, 2, "mean", levels=2, epsilon_inf=1.0).chosen == "one_bit_mean"


# -- the samplers follow the channel ---------------------------------------------------------


def test_device_path_and_vectorised_sampler_follow_the_composed_law() -> None:
    """Reports of 3.7 (off the grid: rounding exercised), one per fresh device secret,
    and the vectorised sampler: chi-square against ``output_distribution`` (the
    composed channel), each at ALPHA."""
    m = build()
    value = 3.7
    law = m.output_distribution(value)
    assert math.isclose(law.sum(), 1.0, rel_tol=1e-12)
    rng = random.Random(3)
    device = [m.randomize_memoised(value, s, CONTEXT, rng) for s in secrets(20_000, 4)]
    assert fits(np.bincount(device, minlength=m.num_counters), law) > ALPHA
    gen = np.random.default_rng(5)
    sampled = m.sample(np.full(200_000, value), gen)
    assert fits(np.bincount(sampled, minlength=m.num_counters), law) > ALPHA


def test_permanent_responses_follow_the_lifetime_channel() -> None:
    """Over 20,000 secrets, B' follows the eps_inf Piecewise law of the value (alpha
    uniform over devices is the one-level rounding law): chi-square at ALPHA."""
    m = build()
    value = 3.7
    drawn = [m.permanent_response(value, s, CONTEXT) for s in secrets(20_000, 6)]
    law = m.permanent.output_distribution(value)
    assert fits(np.bincount(drawn, minlength=m.num_counters), law) > ALPHA


# -- alpha-point rounding ----------------------------------------------------------------------


def test_alpha_point_rounding_is_unbiased_over_devices() -> None:
    """P[grid point j + 1] over 20,000 secrets is T / 2**32 (CP at ALPHA)."""
    m = build()
    value = 3.7
    j, threshold = round_input(value, LO, HI, m.k)
    assert 0 < threshold < WORD  # off the grid
    points = [m.grid_point(value, s, CONTEXT) for s in secrets(20_000, 7)]
    assert set(points) == {j, j + 1}
    assert covers(points.count(j + 1), len(points), Fraction(threshold, WORD))


def test_a_device_rounds_a_drifting_value_to_at_most_two_points() -> None:
    """Per device the grid point is a non-decreasing function of the value: 200 values
    inside one grid step give at most two points, a fixed value always one.  The
    offset is per metric: at a value halfway between two points, another context
    agrees on all 50 devices with probability 2^-50 if the offsets are independent."""
    m = build()
    step = (HI - LO) / m.k
    for secret in secrets(50, 8):
        xs = [3.0 + step * i / 200 for i in range(200)]
        points = [m.grid_point(x, secret, CONTEXT) for x in xs]
        assert points == sorted(points) and len(set(points)) <= 2
        cell = m.permanent_response(3.3, secret, CONTEXT)
        assert all(m.permanent_response(3.3, secret, CONTEXT) == cell for _ in range(3))
    halfway = (89.5 / m.k) * (HI - LO) + LO
    assert round_input(halfway, LO, HI, m.k) == (89, WORD // 2)
    a = [m.grid_point(halfway, s, CONTEXT) for s in secrets(50, 9)]
    b = [m.grid_point(halfway, s, "other/1") for s in secrets(50, 9)]
    assert a != b


# -- memoisation: repeated reports do not average away -----------------------------------------


def test_reports_of_one_device_average_to_its_permanent_cell_not_its_value() -> None:
    """3000 reports of one value by one device: the share equal to B' is
    kappa + (1 - kappa)/M (CP at ALPHA), and the mean of y is E[y | B'] within
    z = 5.6 exact standard deviations (ALPHA).  The device is the one of 200 whose
    E[y | B'] is farthest from the value: more than 3 such tolerances away, so its
    3000 reports average to its memoised cell, not to its value."""
    m = build()
    value = 3.7
    t_values = np.asarray(m.t_values())
    t = 2 * (value - LO) / (HI - LO) - 1
    kappa = m.keep / WORD

    def expected(secret: bytes) -> float:  # E[y | B'] for this device
        cell = m.permanent_response(value, secret, CONTEXT)
        return float(kappa * t_values[cell] + (1 - kappa) * t_values.mean())

    secret = max(secrets(200, 10), key=lambda s: abs(expected(s) - t))
    cell = m.permanent_response(value, secret, CONTEXT)
    rng = random.Random(11)
    reports = np.array([m.randomize_memoised(value, secret, CONTEXT, rng) for _ in range(3000)])
    assert covers(int((reports == cell).sum()), 3000, kappa + (1 - kappa) / m.num_counters)
    given = expected(secret)
    spread = kappa * t_values[cell] ** 2 + (1 - kappa) * (t_values**2).mean() - given**2
    tolerance = stats.norm.isf(ALPHA / 2) * math.sqrt(spread / 3000)
    assert abs(t_values[reports].mean() - given) <= tolerance
    assert abs(given - t) > 3 * tolerance


def _pair_law(m: LongitudinalPiecewise, value: float) -> tuple[float, float, float]:
    """(mu, Cov(y1, y2), Var[(y1 - mu)(y2 - mu)]) of two reports of one device, exactly
    from the two levels' laws (B' ~ the permanent law; given B', reports i.i.d.)."""
    y = np.asarray(m.t_values())
    kappa = m.keep / WORD
    p1 = m.permanent.output_distribution(value)
    given = kappa * y + (1 - kappa) * y.mean()  # E[y | B' = c]
    mu = float(p1 @ given)
    second = kappa * (y - mu) ** 2 + (1 - kappa) * ((y - mu) ** 2).mean()  # E[(y-mu)^2 | c]
    cov = float(p1 @ (given - mu) ** 2)
    return mu, cov, float(p1 @ second**2) - cov**2


def test_two_reports_of_a_device_covary_by_the_permanent_variance() -> None:
    """The window bound assumes Cov(y_s, y_t) = V1(t), the permanent level's one-report
    variance: exact from the law, and measured on the memoised device path over
    20,000 devices within z_for(ALPHA) sd.  Reports independent given the value
    (covariance 0) would fail: the covariance is above 2 tolerances."""
    m = build(1.0, 2.0)
    value = 3.7
    mu, cov, var = _pair_law(m, value)
    assert cov == pytest.approx(m.permanent.t_variance(value), rel=1e-9)
    y = np.asarray(m.t_values())
    rng = random.Random(12)
    devices = secrets(20_000, 13)
    pairs = np.array([[m.randomize_memoised(value, s, CONTEXT, rng) for _ in range(2)]
                      for s in devices])
    products = (y[pairs[:, 0]] - mu) * (y[pairs[:, 1]] - mu)
    tolerance = stats.norm.isf(ALPHA / 2) * math.sqrt(var / len(devices))
    assert abs(products.mean() - cov) <= tolerance
    assert cov > 2 * tolerance


def test_365_reports_leak_no_more_than_epsilon_inf() -> None:
    """An audit over lifetimes: 4000 devices hold hi, 4000 hold lo, each sends 365
    reports; the attacker takes the most frequent cell (B' almost surely) and asks
    whether it is in hi's block.  The Clopper-Pearson lower bound on epsilon (at
    1 - ALPHA) stays <= eps_inf; the same attack on 365 one-level Piecewise reports
    at eps_1 (their mean) exceeds eps_inf, so the test can fail."""
    m = build(1.0, 2.0)
    k = m.k
    devices, epochs = 4000, 365
    gen = np.random.default_rng(14)

    def memoised_hits(value: float) -> int:
        permanent = m.permanent.sample(np.full(devices, value), gen)
        reports = m._instant_batch(np.repeat(permanent, epochs), gen).reshape(devices, epochs)
        modes = np.array([np.bincount(row).argmax() for row in reports])
        return int((modes >= k).sum())

    bound = epsilon_lower_bound(memoised_hits(HI), memoised_hits(LO), devices, 1 - ALPHA)
    assert bound <= m.epsilon_inf

    one = PiecewiseMean(1.0, LO, HI)
    y = np.asarray(one.report_values())

    def averaged_hits(value: float) -> int:
        reports = one.sample(np.full(devices * epochs, value), gen).reshape(devices, epochs)
        return int((y[reports].mean(axis=1) > (LO + HI) / 2).sum())

    leak = epsilon_lower_bound(averaged_hits(HI), averaged_hits(LO), devices, 1 - ALPHA)
    assert leak > m.epsilon_inf


# -- the estimator -------------------------------------------------------------------------------


@pytest.mark.parametrize(("eps", "eps_inf"), [(1.0, 4.0), (2.0, 8.0)])
def test_mean_is_unbiased_with_the_closed_form_variance(eps: float, eps_inf: float) -> None:
    """One report per device (a fresh permanent each): MSE over 4000 surveys of 1000
    over the exact variance is a chi-square mean (sd sqrt(2/4000) = 0.022); [0.85, 1.15]
    is 6.7 sd, one-sided tail < 1e-8 with the chi-square's skew."""
    m = build(eps, eps_inf)
    x = np.linspace(LO, HI, 21)[np.arange(1000) % 21]
    gen = np.random.default_rng(int(eps * 10 + eps_inf))
    cells = m.sample(np.tile(x, 4000), gen).reshape(4000, 1000)
    means = np.asarray(m.report_values())[cells].mean(axis=1)
    ratio = float(((means - x.mean()) ** 2).mean() / exact_mean_variance(m, x))
    assert 0.85 < ratio < 1.15, ratio


def test_window_estimate_serves_the_window_bound() -> None:
    """``estimate(..., epochs=T)`` gives sqrt(window_mean_variance); T = 1 is the
    one-report variance; the bound grows with T as (V* + (T - 1) V1) / T per report."""
    m = build()
    x = np.linspace(LO, HI, 21)[np.arange(3000) % 21]
    gen = np.random.default_rng(15)
    tally = np.bincount(m.sample(x, gen), minlength=m.num_counters)
    n = len(x)
    assert m.window_mean_variance(tally, n, 1) == pytest.approx(m.mean_variance(tally, n))
    for epochs in (1, 7, 30):
        e: Any = estimate(m, tally, n, epochs=epochs)
        assert e.stderr == pytest.approx(math.sqrt(m.window_mean_variance(tally, n, epochs)))
    # An expected tally (no noise) of values on the grid, where the quadratics are
    # exact: the bound is the mean of V*(t) + (T - 1) V1(t) over the fleet, over n.
    points = np.arange(0, m.k + 1, 16)
    on_grid = LO + (HI - LO) * points / m.k
    law: Any = sum(m.output_distribution(float(v)) for v in on_grid)  # expected counts
    half = (HI - LO) / 2
    for epochs in (1, 7, 30):
        want = sum(m.t_variance(float(v)) + (epochs - 1) * m.permanent.t_variance(float(v))
                   for v in on_grid) / len(on_grid) ** 2 * half**2
        got = m.window_mean_variance(law, len(on_grid), epochs)
        assert got == pytest.approx(want, rel=1e-9)
    # Worst cases on the z scale: T = 1 is the one-report figure, and the window's
    # per-report worst case tends to the permanent level's.
    assert m.window_unit_variance(1) == pytest.approx(m.unit_variance(), rel=1e-12)
    permanent, window = m.permanent.unit_variance(), m.window_unit_variance(10_000)
    assert permanent <= window <= permanent + m.unit_variance() / 10_000


@pytest.mark.parametrize(("eps", "eps_inf"), [(0.5, 1.0), (1.0, 4.0)])
def test_audits_stay_below_both_epsilons(eps: float, eps_inf: float) -> None:
    """Clopper-Pearson at 1 - 1e-7: one report (vectorised and memoised device path)
    below eps_1, the permanent level below eps_inf; null controls near 0."""
    m = build(eps, eps_inf)
    for r in (audit(m, trials=200_000, confidence=1 - ALPHA, seed=16),
              audit(m, trials=20_000, confidence=1 - ALPHA, seed=17, vectorised=False)):
        assert not r.violation and r.lower_bound <= m.epsilon
        assert r.null_control < 0.1
    r = audit(m.permanent, trials=200_000, confidence=1 - ALPHA, seed=18)
    assert not r.violation and r.lower_bound <= eps_inf
    assert r.lower_bound > 0.5 * m.permanent.epsilon_actual


@pytest.mark.parametrize(("eps", "eps_inf"), [(10.0, 20.0), (1.0, 20.0)])
def test_the_spec_maxima_build_with_their_epsilons(eps: float, eps_inf: float) -> None:
    """The largest epsilons a spec accepts (10 per report, 20 lifetime) build with the
    composed channel at or below the request (the block search once took seconds here:
    a decrement loop over the outward slack of a 2**60-sized ratio)."""
    m = build(eps, eps_inf)
    assert eps - 1e-6 < m.epsilon <= eps and m.permanent.epsilon_actual <= eps_inf
    assert m._epsilon_of(m.permanent, m._compose(m.permanent, m.keep + 1)) > eps
