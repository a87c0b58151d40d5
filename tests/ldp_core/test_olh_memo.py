"""Two-level OLH: a permanent GRR over d, then a fresh OLH report of it (no per-device constant).

Exact checks recompute the law from its definition with Fractions, independently
of the module: P[s, y | v] = (1/S) sum_u P1[u | v] P2[y | h_s(u)].  Statistical
checks use fixed seeds; each states its false-positive rate: 1e-6 for those at
ALPHA together, and 1e-6 for each audit (its confidence).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ldp_core import LongitudinalOLH, longitudinal
from ldp_core._rng import WORD, Rng, resolve
from ldp_core.audit import audit, cp_lower, cp_upper
from ldp_core.mechanisms._projective import (
    bucket_sizes,
    digits_needed,
    family,
    hash_table,
    projective,
    smallest_bucket,
)
from ldp_core.simulate import tallies
from tests.stats import z_for

#: Every statistical check of this file, each at 1e-6 / CHECKS.
CHECKS = 9
ALPHA = 1e-6 / CHECKS


def exact_law(m: LongitudinalOLH) -> list[list[Fraction]]:
    """law[v][s * g + y] = P[report (s, y) | v], from the definition."""
    d, g, seeds = m.domain_size, m.g, m.num_seeds
    p1 = Fraction(m.base.keep, WORD)
    q1 = (1 - p1) / (d - 1)
    p2 = Fraction(m.keep, WORD)
    q2 = (1 - p2) / (g - 1)
    fam = projective(g, d)
    h = [[fam.bucket(s, u) for u in range(d)] for s in range(seeds)]
    law = []
    for v in range(d):
        row = []
        for s in range(seeds):
            for y in range(g):
                total = sum(((p1 if u == v else q1) * (p2 if h[s][u] == y else q2)
                             for u in range(d)), Fraction(0))
                row.append(total / seeds)
        law.append(row)
    return law


# -- the hash family's bucket sizes -------------------------------------------------------


@pytest.mark.parametrize("g", [2, 3, 5, 7, 11, 31])
def test_bucket_sizes_are_the_hash_tables(g: int) -> None:
    for d in [*range(2, 40), 64, 81, 100, 243, 1000, 1024]:
        length = digits_needed(g, d)
        seeds = family(g, d)[1]
        if seeds * d > 2_000_000:
            continue
        table = hash_table(g, length, seeds, d)
        brute = np.stack([np.bincount(row, minlength=g) for row in table])
        assert (bucket_sizes(g, d) == brute).all(), (g, d)
        assert smallest_bucket(g, d) == brute[(brute > 0) & (brute < d)].min(), (g, d)


# -- exact channel and epsilons --------------------------------------------------------------


@pytest.mark.parametrize(("d", "eps", "eps_inf"),
                         [(5, 1.0, 3.0), (8, 1.0, 2.0), (16, 1.0, 4.0), (20, 0.5, 1.0),
                          (20, 2.0, 6.0), (27, 1.0, 8.0)])
def test_channel_and_epsilons_are_exact(d: int, eps: float, eps_inf: float) -> None:
    m = longitudinal("olh", epsilon=eps, epsilon_inf=eps_inf, domain_size=d)
    assert isinstance(m, LongitudinalOLH)
    law = exact_law(m)
    g, seeds = m.g, m.num_seeds
    fam = projective(g, d)
    for v in range(d):
        assert sum(law[v]) == 1
        support = [sum(law[v][s * g + fam.bucket(s, w)] for s in range(seeds))
                   for w in range(d)]
        assert support[v] == m.channel[0]  # p*
        assert all(support[w] == m.channel[1] for w in range(d) if w != v)  # q*: pure
    # eps_1: the largest ratio of any report between any two values (exact, then log).
    worst = max(law[v][r] / law[w][r] for v in range(d) for w in range(d)
                for r in range(seeds * g))
    assert math.log(worst) <= m.epsilon <= math.log(worst) + 1e-9
    # eps_1 <= eps_2 <= the request: the instantaneous level alone is eps-LDP about u.
    p2 = Fraction(m.keep, WORD)
    assert m.epsilon <= m.instantaneous_epsilon <= eps
    assert math.log(p2 * (g - 1) / (1 - p2)) <= m.instantaneous_epsilon
    assert m.base.epsilon_actual <= eps_inf
    # The audit's event has the worst ratio exactly.
    p, q = m.audit_design().probabilities
    assert math.log(p / q) == pytest.approx(m.epsilon, abs=1e-9)
    # The simulator's table (``output_distribution``, numpy) is the same law.
    for v in range(d):
        want = np.array([float(x) for x in law[v]])
        assert np.allclose(m.output_distribution(v), want, rtol=1e-12, atol=0)


def test_describe_carries_what_another_sdk_needs() -> None:
    m = longitudinal("olh", epsilon=1.0, epsilon_inf=4.0, domain_size=37)
    assert isinstance(m, LongitudinalOLH)
    out = m.describe()
    assert out["levels"] == 2 and out["mechanism"] == "olh"
    assert (out["g"], out["num_seeds"]) == (m.g, m.num_seeds)
    assert out["permanent_keep"] == m.base.keep and out["instantaneous_threshold"] == m.keep
    assert out["epsilon"] == m.epsilon <= out["instantaneous_epsilon"] <= 1.0  # type: ignore[operator]


def test_hand_built_objects_are_checked() -> None:
    good = longitudinal("olh", epsilon=1.0, epsilon_inf=4.0, domain_size=16)
    assert isinstance(good, LongitudinalOLH)
    with pytest.raises(ValueError, match="instantaneous level costs"):
        LongitudinalOLH(base=good.base, declared_epsilon=1.0, epsilon_inf=4.0, g=good.g,
                        keep=good.keep + (WORD - good.keep) // 2)
    with pytest.raises(ValueError, match="prime"):
        LongitudinalOLH(base=good.base, declared_epsilon=1.0, epsilon_inf=4.0, g=4,
                        keep=good.keep)
    with pytest.raises(ValueError, match="permanent level"):
        LongitudinalOLH(base=good.base, declared_epsilon=1.0, epsilon_inf=2.0, g=good.g,
                        keep=good.keep)
    with pytest.raises(ValueError, match="randomize_memoised"):
        good.randomize(3, rng=random.Random(0))


# -- the device path against the exact law ------------------------------------------------------


def test_memoised_device_path_has_the_exact_law() -> None:
    """60,000 devices (fresh secret each, one report of value 7): Pearson's chi-square
    of the (seed, bucket) cells against ``exact_law``; fails at p < ALPHA."""
    m = longitudinal("olh", epsilon=1.0, epsilon_inf=3.0, domain_size=20)
    assert isinstance(m, LongitudinalOLH) and m.num_seeds > 1  # a real family (g < d)
    rng = random.Random(2026)
    n = 60_000
    counts = np.zeros(m.num_counters)
    for _ in range(n):
        (cell,) = m.counters(m.randomize_memoised(7, rng.randbytes(32), "memo|olh", rng))
        counts[cell] += 1
    expected = n * np.array([float(x) for x in exact_law(m)[7]])
    assert expected.min() > 20
    assert stats.chisquare(counts, expected).pvalue > ALPHA


def test_vectorised_sampler_has_the_exact_law() -> None:
    """10^6 reports of value 19 from ``sample`` (numpy): chi-square, p > ALPHA."""
    m = longitudinal("olh", epsilon=1.0, epsilon_inf=3.0, domain_size=20)
    assert isinstance(m, LongitudinalOLH)
    n = 10**6
    batch = m.sample(np.full(n, 19), np.random.default_rng(8))
    counts = np.bincount(m.batch_counters(batch), minlength=m.num_counters)
    expected = n * np.array([float(x) for x in exact_law(m)[19]])
    assert stats.chisquare(counts, expected).pvalue > ALPHA


def test_one_device_draws_a_fresh_seed_every_report() -> None:
    """One device, one value, 6000 reports: the seed is uniform over the family
    (chi-square, p > ALPHA) and the bucket is h_s(u) with probability P2 (two-sided
    CP interval at ALPHA), u the memoised permanent response."""
    m = longitudinal("olh", epsilon=1.0, epsilon_inf=4.0, domain_size=64)
    assert isinstance(m, LongitudinalOLH)
    secret, rng, n = bytes(range(32)), random.Random(9), 6000
    u = m.permanent_response(11, secret, "memo|olh")
    reports = [m.randomize_memoised(11, secret, "memo|olh", rng) for _ in range(n)]
    seeds = np.bincount([s for s, _ in reports], minlength=m.num_seeds)
    assert stats.chisquare(seeds).pvalue > ALPHA
    kept = sum(y == m.bucket(s, u) for s, y in reports)
    p2 = m.keep / WORD
    assert cp_lower(kept, n, ALPHA / 2) <= p2 <= cp_upper(kept, n, ALPHA / 2)


# -- audit, with a null control and a planted bug ---------------------------------------------


def test_audit_is_tight_below_eps_1() -> None:
    """10^6 vectorised trials: lower bound <= eps_1 (a violation has probability
    <= 1e-6, the confidence) and >= 0.8 eps_1 (lb/eps is ~0.97; the log-ratio's sd is
    < 0.01 here, so 0.8 is > 15 sd away); null control (x' = x) < 0.05."""
    for d, eps_inf in ((16, 4.0), (37, 8.0)):
        m = longitudinal("olh", epsilon=1.0, epsilon_inf=eps_inf, domain_size=d)
        r = audit(m, trials=10**6, confidence=1 - 1e-6, seed=5)
        assert r.path == "vectorised" and not r.violation, r.text()
        assert 0.8 * m.epsilon <= r.lower_bound <= m.epsilon, r.text()
        assert r.null_control < 0.05, r.text()


@dataclass(frozen=True)
class UnmemoisedOLH(LongitudinalOLH):
    """Planted bug: the instantaneous OLH hashes the true value, not the permanent u."""

    def randomize_memoised(
        self, value: object, secret: bytes, context: str, rng: Rng | None = None
    ) -> tuple[int, int]:
        return self._instant(self.check_value(value), resolve(rng))


def test_audit_catches_a_report_that_skips_the_permanent_level() -> None:
    """eps_1 = 0.32 at d = 16, eps_inf = 2; the bug leaks eps_2 = 1 on the audit's
    event.  A violation by the honest class has probability <= 1e-6."""
    good = longitudinal("olh", epsilon=1.0, epsilon_inf=2.0, domain_size=16)
    assert isinstance(good, LongitudinalOLH) and good.epsilon < 0.4
    bad = UnmemoisedOLH(base=good.base, declared_epsilon=1.0, epsilon_inf=2.0, g=good.g,
                        keep=good.keep)
    assert not audit(good, trials=20_000, confidence=1 - 1e-6, seed=4,
                     vectorised=False).violation
    r = audit(bad, trials=20_000, confidence=1 - 1e-6, seed=4)
    assert r.path == "memoised device path" and r.violation, r.text()


# -- the estimator -------------------------------------------------------------------------


def test_estimator_is_unbiased_with_the_exact_variance() -> None:
    """400,000 simulated devices over d = 20 (FFT decoding, g < d): per value
    |c_hat - c| <= z sd with z for 1e-6/CHECKS over 20 values; and 2,000 replications
    of c_hat(0) have mean within z sd / sqrt(2000) of c and variance within
    the chi-square band of the exact one (each at ALPHA)."""
    from aggregator.estimate import estimate
    from ldp_core.simulate import tallies_many

    m = longitudinal("olh", epsilon=1.0, epsilon_inf=6.0, domain_size=20)
    assert isinstance(m, LongitudinalOLH) and m.num_seeds > 1
    counts = np.array([80_000, 60_000, 40_000] + [10_000] * 12 + [0] * 5)
    truth = np.repeat(np.arange(20), counts)
    t, n = tallies(m, truth, seed=3)
    e = estimate(m, t, n)
    z = z_for(ALPHA, 20)
    sd = np.sqrt(np.array([m.count_variance(n, float(c)) for c in counts])) / n
    assert np.all(np.abs(e.value - counts / n) <= z * sd)
    many, n = tallies_many(m, truth[::20], trials=2000, seed=4)
    p, q = m.p_star, m.q_star
    c_hat = (np.array([m.support_counts(row)[0] for row in many]) - n * q) / (p - q)
    c0 = int((truth[::20] == 0).sum())
    var = m.count_variance(n, c0)
    assert abs(c_hat.mean() - c0) <= z_for(ALPHA) * math.sqrt(var / 2000)
    lo, hi = stats.chi2.ppf([ALPHA / 2, 1 - ALPHA / 2], 1999) / 1999
    assert lo <= c_hat.var(ddof=1) / var <= hi


# -- linkability ----------------------------------------------------------------------------


def exact_pair_accuracy(m: LongitudinalOLH) -> float:
    """(1 + TV)/2 between "one device" and "two devices" pairs (values uniform): the
    best balanced accuracy any pair test can have, computed exactly in floats."""
    d, g, seeds = m.domain_size, m.g, m.num_seeds
    p2 = m.keep / WORD
    q2 = (1 - p2) / (g - 1)
    fam = projective(g, d)
    given_u = np.full((d, seeds * g), q2 / seeds)  # P[r = (s, y) | u]
    for u in range(d):
        for s in range(seeds):
            given_u[u, s * g + fam.bucket(s, u)] = p2 / seeds
    same = given_u.T @ given_u / d  # u uniform (a GRR of a uniform value)
    marginal = given_u.mean(axis=0)
    return 0.5 + 0.25 * float(np.abs(same - np.outer(marginal, marginal)).sum())


def test_two_epochs_of_one_device_are_near_unlinkable() -> None:
    """The pair test of benchmarks/bench_linkability.py (likelihood-ratio rule) on 4000
    devices, d = 64, eps_1 = 1, eps_inf = 2.

    Bound: a test's held-out balanced accuracy estimates its true accuracy, at most
    the exact optimum (1 + TV)/2 (computed here: 0.5032; measured 0.503); its sd is
    <= sqrt(1/2000)/2 over 2000 held-out pairs of each kind, so exceeding the optimum
    by z_for(ALPHA) sd has probability <= ALPHA (normal approximation).  The old design (memoised
    seed) scored 0.998 on the same test.  Positive control: the harness links two-level
    OUE's shared bits (measured 0.70 at d = 64 with 2000 devices, sd <= 0.011: 0.6 is
    > 9 sd below).
    """
    from benchmarks import bench_linkability as bench

    m = longitudinal("olh", epsilon=1.0, epsilon_inf=2.0, domain_size=64)
    assert isinstance(m, LongitudinalOLH)
    optimum = exact_pair_accuracy(m)
    assert optimum < 0.51
    assert optimum <= math.e / (1 + math.e)  # the proven bound at eps_2 = 1
    first, second = bench.reports(m, 4000, seed=1)
    accuracy = bench.pair_accuracy(bench.score_for(m), first, second, seed=2)
    assert accuracy <= optimum + z_for(ALPHA) * math.sqrt(1 / 2000) / 2, accuracy
    oue = longitudinal("oue", epsilon=1.0, epsilon_inf=2.0, domain_size=64)
    first, second = bench.reports(oue, 2000, seed=1)
    assert bench.pair_accuracy(bench.score_for(oue), first, second, seed=2) > 0.6
