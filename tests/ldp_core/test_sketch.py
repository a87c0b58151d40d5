"""Count-mean sketches with real collisions (d = 200 over m = 11 buckets, L = 3).

The registry-driven tests build every mechanism at d = 8, where a sketch of 11
buckets needs no hashing; here the projective family's collisions are in play.

- Unbiasedness and the exact variance (collisions included) of every value over
  4000 simulated trials: z-tests of the mean and of the variance, Bonferroni over
  2 mechanisms x 200 values x 2 statistics at a joint false-positive rate of 1e-6.
- The simulated sketch is the device path's in distribution: per counter, the
  device path's mean over 3000 reports against the exact expectation (z-tests,
  Bonferroni at 1e-6).
- The audit's lower bound is at most the declared epsilon (violation at <= 1e-6).
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from aggregator.estimate import estimate
from ldp_core import mechanism
from ldp_core.audit import audit
from ldp_core.simulate import tallies_many
from tests.stats import z_for

D, M, TRIALS = 200, 11, 4000
SHAPE = np.linspace(2.0, 0.1, D)
COUNTS = np.random.default_rng(7).multinomial(3000, SHAPE / SHAPE.sum())
NAMES = ("cms", "hcms")


@pytest.mark.parametrize("name", NAMES)
def test_sketch_is_unbiased_with_the_exact_variance(name: str) -> None:
    m = mechanism(name, epsilon=2.0, domain_size=D, buckets=M)
    assert m.collision > 0  # hashing is in play
    values = np.repeat(np.arange(D), COUNTS)
    n = len(values)
    rows, _ = tallies_many(m, values, TRIALS, seed=11)
    support = np.array([m.support_counts(r) for r in rows], dtype=np.float64)
    p, q = m.p_star, m.q_star
    c_hat = (support - n * q) / (p - q)
    var = np.asarray(m.count_variance(n, COUNTS.astype(np.float64)))
    z = z_for(1e-6, 2 * D * 2)
    bias_z = (c_hat.mean(axis=0) - COUNTS) / np.sqrt(var / TRIALS)
    assert np.abs(bias_z).max() < z
    # Var of the sample variance ~ 2 var^2 / (TRIALS - 1) for a near-normal count.
    var_z = (c_hat.var(axis=0, ddof=1) - var) / (var * math.sqrt(2 / (TRIALS - 1)))
    assert np.abs(var_z).max() < z


def exact_rates(m: Any, value: int) -> np.ndarray:
    """P[a report of ``value`` increments counter k], from the channel and the family."""
    if m.name == "hcms":
        return m.output_distribution(value)
    p = float(m.p_star)
    rates = np.full((m.num_seeds, M), (1 - p) / m.num_seeds)
    rates[np.arange(m.num_seeds), m.family.buckets_of(value)] = p / m.num_seeds
    return rates.ravel()


@pytest.mark.parametrize("name", NAMES)
def test_device_path_and_simulation_follow_the_exact_sketch(name: str) -> None:
    """Per counter, the device path's mean over 3000 reports and the simulation's over
    40,000 against the exact rate (z-tests, Bonferroni over both at 1e-6)."""
    m = mechanism(name, epsilon=1.0, domain_size=D, buckets=M)
    rng = random.Random(3)
    value, n = 17, 3000
    rate = exact_rates(m, value)
    device = np.zeros(m.num_counters)
    for _ in range(n):
        for c in m.counters(m.randomize(value, rng=rng)):
            device[c] += 1
    sims, _ = tallies_many(m, np.full(200, value), 200, seed=5)
    z = z_for(1e-6, 2 * m.num_counters)
    for total, reports in ((device, n), (sims.sum(axis=0), 40_000)):
        sd = np.sqrt(rate * (1 - rate) / reports)
        assert np.abs((total / reports - rate) / sd).max() < z
    e = estimate(m, device.astype(np.int64), n, confidence=1 - 1e-7)
    assert e.ci_low[value] <= 1.0 <= e.ci_high[value]  # every report holds the value


@pytest.mark.parametrize("name", NAMES)
def test_sketch_audit_holds_with_collisions(name: str) -> None:
    m = mechanism(name, epsilon=1.0, domain_size=D, buckets=M)
    r = audit(m, trials=200_000, confidence=1 - 1e-6, seed=2)
    assert not r.violation and r.lower_bound > 0.5, r.text()
