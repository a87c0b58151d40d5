"""The plausibility limit of unary reports: the O(d) search equals the term-by-term one.

``max_bits`` used to re-sum the binomial tail for every candidate k (27 s for a
65,536-bit encoding, on the collector's event loop); it now sums the pmf once.
Both are exact: they must agree everywhere.
"""

from __future__ import annotations

import pytest

from ldp_core import mechanism
from ldp_core.binomial_tail import max_bits, set_bits_tail


def reference(d: int, p: float, q: float, alpha: float) -> int:
    k = max(0, int(p + (d - 1) * q))
    while k < d and set_bits_tail(d, p, q, k) > alpha:
        k += 1
    return k


@pytest.mark.parametrize("name", ["sue", "oue"])
@pytest.mark.parametrize("d", [2, 3, 7, 16, 64, 200, 1024])
@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 4.0, 10.0])
def test_fast_limit_equals_the_term_by_term_search(name: str, d: int, epsilon: float) -> None:
    m = mechanism(name, epsilon=epsilon, domain_size=d)
    p, q = m.channel
    for alpha in (1e-3, 1e-9):
        assert max_bits(d, p, q, alpha) == reference(d, float(p), float(q), alpha)


@pytest.mark.timeout(60)
def test_a_65536_bit_encoding_gets_its_limit_without_stalling() -> None:
    """A hang guard (the timeout), not a timing: the limit lies above the mean."""
    m = mechanism("oue", epsilon=1.0, domain_size=65536)
    limit = m.max_set_bits()
    assert limit is not None and 0.5 + 65535 * m.q_star < limit < 65536
