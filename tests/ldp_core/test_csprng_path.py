"""The production unary path: OS CSPRNG bytes, not an injected generator.

``UnaryEncoding._perturb`` takes a different code path when it draws from the
OS CSPRNG (a top byte per bit, 24 more bits only on a tie); the seeded tests
exercise the word-per-bit path.  Here reports come from ``m.randomize(v)``
with no ``rng`` and are held to the declared channel:

- every bit's frequency against p* (the true bit) or q* (the others): a z-test
  per bit, Bonferroni over all bits of both mechanisms at a joint false-positive
  rate of 1e-6;
- the law of the number of set bits K ~ Binomial(d-1, q*) + Bernoulli(p*)
  (independent bits): a chi-square test over cells with >= 20 expected reports,
  at a false-positive rate of 1e-6 per mechanism.

The OS generator cannot be seeded, so these rates are the tests' real chances
of failing on a correct implementation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldp_core import mechanism
from tests.stats import z_for

N = 40_000
D = 24
VALUE = 5
NAMES = ("sue", "oue")
Z = z_for(1e-6, len(NAMES) * D)


def _count_law(p: float, q: float) -> np.ndarray:
    """P[K = k] for K ~ Binomial(D - 1, q) + Bernoulli(p), k = 0..D."""
    others = stats.binom.pmf(np.arange(D), D - 1, q)
    law = np.zeros(D + 1)
    law[:D] += (1 - p) * others
    law[1:] += p * others
    return law


@pytest.mark.parametrize("name", NAMES)
def test_os_csprng_unary_reports_follow_the_channel(name: str) -> None:
    m = mechanism(name, epsilon=1.0, domain_size=D)
    reports = [m.randomize(VALUE) for _ in range(N)]  # rng=None: the OS CSPRNG path
    ones = np.zeros(D)
    sizes = np.zeros(D + 1)
    for r in reports:
        ones[list(r)] += 1
        sizes[len(r)] += 1
    p, q = m.p_star, m.q_star
    for i in range(D):
        expected = p if i == VALUE else q
        z = (ones[i] - N * expected) / math.sqrt(N * expected * (1 - expected))
        assert abs(z) < Z, (name, i, ones[i] / N, expected)
    law = _count_law(p, q) * N
    keep = law >= 20
    observed = np.append(sizes[keep], sizes[~keep].sum())
    expected_counts = np.append(law[keep], law[~keep].sum())
    if expected_counts[-1] < 20:  # fold a thin tail cell into its neighbour
        observed = np.append(observed[:-2], observed[-2:].sum())
        expected_counts = np.append(expected_counts[:-2], expected_counts[-2:].sum())
    chi2 = float(((observed - expected_counts) ** 2 / expected_counts).sum())
    limit = stats.chi2.isf(1e-6, len(observed) - 1)
    assert chi2 < limit, (name, chi2, limit)
