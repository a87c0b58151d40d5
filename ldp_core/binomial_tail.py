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
    """The least k >= E[K] with P[K > k] <= alpha, in O(d) (one pass over the pmf).

    The pmf of X ~ Binomial(d - 1, q) is computed once from E[X] upward (in log
    space, stopping where it underflows) and its tail summed from the top, so
    P[K > k] = p P[X > k - 1] + (1 - p) P[X > k] costs O(1) per k: a 65,536-bit
    encoding takes milliseconds instead of half a minute.
    """
    pf, qf = float(p), float(q)
    n = d - 1
    start = max(0, int(pf + n * qf))
    if qf <= 0.0 or qf >= 1.0 or start >= n:
        k = start
        while k < d and set_bits_tail(d, pf, qf, k) > alpha:
            k += 1
        return k
    log_q, log_1q = math.log(qf), math.log1p(-qf)
    low = max(0, start - 1)
    terms: list[float] = []
    for j in range(low, n + 1):
        log_pmf = _log_binom_pmf(n, j, log_q, log_1q)
        if j > start and log_pmf < -745.0:  # exp underflows to 0 from here on
            break
        terms.append(math.exp(log_pmf))
    # above[i] = P[X > low + i - 1] = sum of terms[i:], summed from the small end.
    above = [0.0] * (len(terms) + 1)
    for i in range(len(terms) - 1, -1, -1):
        above[i] = above[i + 1] + terms[i]

    def x_above(k: int) -> float:  # P[X > k]
        i = k + 1 - low
        return above[i] if 0 <= i < len(above) else (0.0 if i >= len(above) else 1.0)

    k = start
    while k < d and pf * x_above(k - 1) + (1 - pf) * x_above(k) > alpha:
        k += 1
    return k
