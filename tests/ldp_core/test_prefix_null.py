"""The null law of a candidate's support count (``prefix_null``) against its exact pmf.

C = sum_s T[s, U_s], U_s uniform on the g buckets: its exact pmf is the product of
the rows' characteristic functions (FFT, folded mod L around the mean, L over 80
standard deviations, so the folding moves less than 1e-300).  Deterministic:
the saddle point must match it, and the cut must be the least count at the rate.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from ldp_core.mechanisms.prefix import PrefixOLH
from ldp_core.mechanisms.prefix_null import count_cut, tail


def exact_tail(table: np.ndarray) -> dict[int, float]:
    """P[C >= x] for every x the FFT window holds."""
    seeds, g = table.shape
    mean = table.mean(axis=1).sum()
    size = 1 << max(8, math.ceil(math.log2(80 * math.sqrt(table.var(axis=1).sum()))))
    pmf = np.zeros((seeds, size))
    np.add.at(pmf, (np.repeat(np.arange(seeds), g), (table % size).ravel()), 1.0 / g)
    spectrum = np.ones(size // 2 + 1, dtype=complex)
    for row in np.fft.rfft(pmf, axis=1):
        spectrum *= row
    law = np.maximum(np.fft.irfft(spectrum, n=size), 0.0)
    low = round(mean) - size // 2
    values = low + (np.arange(size) - low) % size
    order = np.argsort(values)
    upper = np.cumsum(law[order][::-1])[::-1]
    return dict(zip(values[order].tolist(), upper.tolist(), strict=True))


def level_table(n: int, seed: int) -> np.ndarray:
    """The last level's counters of n reports of Zipf strings (one heavy at ~1/3)."""
    m = PrefixOLH(epsilon=4.0)
    strings = ("hello", "ab", "search", "x", "data", "abcdef", "zz", "query")
    codes = np.array([m.check_value(s) for s in strings])
    weights = 1.0 / np.arange(1, len(strings) + 1)
    gen = np.random.default_rng(seed)
    tallies = m.simulate_counts(codes, gen.multinomial(n, weights / weights.sum()), gen)
    return tallies.reshape(len(m.cuts), m.seeds, m.g)[-1]


@pytest.mark.parametrize("n", [200, 2_000, 20_000, 200_000])
def test_the_saddle_point_tail_is_the_exact_one(n: int) -> None:
    """Within 2% relative wherever the exact tail is between 1e-9 and 1e-2 (it is
    1e-4 relative at 1e-6 and n = 10^5: the docstring's claim, checked below)."""
    table = level_table(n, n)
    exact = exact_tail(table)
    checked = 0
    for x, upper in exact.items():
        if 1e-9 < upper < 1e-2:
            assert tail(table, x) == pytest.approx(upper, rel=0.02), (n, x)
            checked += 1
    assert checked >= 3


def test_the_cut_is_the_least_count_at_the_rate_and_the_normal_one_is_lower() -> None:
    """At n = 10^5 (the benchmark's scale) and the Bonferroni rate of 30,000 candidates."""
    table = level_table(100_000, 7)
    alpha = 0.05 / 30_000
    cut, exact = count_cut(table, alpha), exact_tail(table)
    assert exact[cut] <= alpha < exact[cut - 1]
    assert tail(table, cut) == pytest.approx(exact[cut], rel=1e-4)
    mean, sd = table.mean(axis=1).sum(), math.sqrt(table.var(axis=1).sum())
    normal = math.ceil(mean + NormalDist().inv_cdf(1 - alpha) * sd)
    assert normal < cut
    assert exact[normal] > 1.5 * alpha  # the normal cut's real rate: Poisson-like tail


def test_edges_and_bad_rates() -> None:
    flat = np.ones((4, 3), dtype=np.int64)  # every count equal: C is 4 for sure
    assert tail(flat, 4) == 1.0 and tail(flat, 5) == 0.0
    assert count_cut(flat, 0.01) == 5
    with pytest.raises(ValueError, match="alpha must be in"):
        count_cut(flat, 0.0)
    with pytest.raises(ValueError, match=r"got shape \(3,\)"):
        count_cut(np.ones(3), 0.01)
