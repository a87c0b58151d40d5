"""Clopper-Pearson bounds in pure Python, and the epsilon lower bound they give.

The regularised incomplete beta by its continued fraction (modified Lentz,
Numerical Recipes 6.4); one-sided bounds by bisection, rounded outward.

>>> round(cp_lower(50, 100, 0.025), 4)
0.3983
"""

from __future__ import annotations

import math
from functools import lru_cache

__all__ = ["beta_inc", "cp_lower", "cp_upper", "epsilon_lower_bound"]

_TINY = 1e-300


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta (modified Lentz; Numerical Recipes 6.4)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 200_000):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta did not converge at a={a}, b={b}, x={x}")


def beta_inc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta I_x(a, b) for a, b > 0.

    >>> round(beta_inc(2.0, 3.0, 0.4), 6)      # 1 - (0.6^4 + 4*0.4*0.6^3)
    0.5248
    """
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    direct = x < (a + 1.0) / (a + b + 2.0)
    if log_front < -740.0:  # the tail is below 1e-300: no need to run the fraction
        return 0.0 if direct else 1.0
    front = math.exp(log_front)
    if direct:
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


@lru_cache(maxsize=4096)
def cp_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound: P[bound > p] <= alpha.

    The alpha-quantile of Beta(k, n - k + 1), by bisection on I_x, rounded down.

    >>> round(cp_lower(50, 100, 0.025), 4)
    0.3983
    """
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if k == 0:
        return 0.0
    a, b = float(k), float(n - k + 1)
    lo, hi = 0.0, 1.0  # invariant: I_lo <= alpha < I_hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if beta_inc(a, b, mid) <= alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    # lgamma of large arguments is exact to ~1e-16 relative, i.e. ~1e-9 in absolute
    # log terms at n = 10^7; a relative margin of 1e-8 covers it, outward.
    return lo * (1.0 - 1e-8)


def cp_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound: P[bound < p] <= alpha (rounded up)."""
    return min(1.0, math.nextafter(1.0 - cp_lower(n - k, n, alpha), math.inf))


def epsilon_lower_bound(hits_x: int, hits_x_prime: int, trials: int, confidence: float) -> float:
    """max(0, ln(TPR_low/FPR_high), ln((1-FPR)_low/(1-TPR)_high)), valid w.p. >= confidence.

    >>> epsilon_lower_bound(5000, 5000, 10000, 0.99)
    0.0
    >>> round(epsilon_lower_bound(7311, 2689, 10000, 0.99), 2)   # eps = 1
    0.94
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = (1.0 - confidence) / 4.0  # four one-sided bounds, union bound
    best = 0.0
    for hit, miss in ((hits_x, hits_x_prime), (trials - hits_x_prime, trials - hits_x)):
        low = cp_lower(hit, trials, alpha)
        high = cp_upper(miss, trials, alpha)
        if low > 0.0:
            best = max(best, math.nextafter(math.log(low / high), -math.inf))
    return best
