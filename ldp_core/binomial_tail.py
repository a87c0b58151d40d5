"""The tail of the number of set bits of an honest unary report.

Every bit of an honest unary report is drawn independently: the true value's
bit is 1 with probability p, each of the d - 1 others with probability q, so
K ~ Binomial(d - 1, q) + Bernoulli(p) whatever the value.  The tail is summed
term by term from the binomial pmf in log space (no normal approximation).

>>> round(set_bits_tail(8, 0.5, 0.5, 4), 6)     # P[K > 4] for 7 fair bits plus one
0.363281
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

__all__ = ["max_bits", "set_bits_tail"]


def _log_binom_pmf(n: int, k: int, log_q: float, log_1q: float) -> float:
    return (
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        + k * log_q + (n - k) * log_1q
    )


def _binom_sf(n: int, q: float, k: int) -> float:
    """P[Binomial(n, q) > k], summed term by term from the top (no approximation)."""
    if k < 0:
        return 1.0
    if k >= n or q <= 0.0:
        return 0.0
    if q >= 1.0:
        return 1.0
    log_q, log_1q = math.log(q), math.log1p(-q)
    return math.fsum(math.exp(_log_binom_pmf(n, j, log_q, log_1q)) for j in range(k + 1, n + 1))


def set_bits_tail(d: int, p: float, q: float, k: int) -> float:
    """P[K > k] for K ~ Binomial(d - 1, q) + Bernoulli(p)."""
    return p * _binom_sf(d - 1, q, k - 1) + (1 - p) * _binom_sf(d - 1, q, k)


@functools.lru_cache(maxsize=4096)
def max_bits(d: int, p: Fraction, q: Fraction, alpha: float) -> int:
    pf, qf = float(p), float(q)
    k = max(0, int(pf + (d - 1) * qf))
    while k < d and set_bits_tail(d, pf, qf, k) > alpha:
        k += 1
    return k
