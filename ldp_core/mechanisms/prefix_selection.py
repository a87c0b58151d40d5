"""Intervals for strings that were selected by the counters that estimate them.

A string is listed as discovered (``confident``) when its last-level estimate X
clears the discovery cut c, and its reported share T = w X + R pools X with
the other levels that see it whole (R, independent of X, unbiased for
(1 - w) mu).  Given that it was listed, X is a normal truncated at c: a string
whose noise pushed it over the cut is listed, one whose noise held it under is
not, so the plain interval T -/+ z se is shifted up for strings near the cut
(the winner's curse: 0.926 coverage at 95% on held-out seeds before this).

The interval here holds mu with the stated probability *given the selection*
(the conditional, "selective" interval of Lee, Sun, Sun and Taylor, 2016):

    G(mu) = P_mu[T >= t | X > c],   increasing in mu;
    [lo, hi] = {mu : alpha/2 <= G(mu) <= 1 - alpha/2},

X ~ N(mu, s_X^2), R - (1 - w) mu ~ N(0, s_R^2), both at the plug-in variances.
Far above the cut P[X > c] ~ 1 and it is the plain interval (then skipped).

>>> lo, hi = selective_interval(0.012, 1.0, 0.002, 0.0, 0.008, 0.95)
>>> plain = (0.012 - 1.96 * 0.002, 0.012 + 1.96 * 0.002)
>>> lo < plain[0]     # lower: the cut is 2 sd below the estimate
True
>>> selective_interval(0.1, 1.0, 0.002, 0.0, 0.008, 0.95) == plain_interval(0.1, 0.002, 0.95)
True
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

__all__ = ["plain_interval", "selective_interval"]

#: Beyond this many sd between the plain interval and the cut, P[X > c] > 1 - 1e-9
#: over the whole interval: the selection changes nothing worth computing.
FAR = 6.0
_GRID = 1001


def plain_interval(t: float, se: float, confidence: float) -> tuple[float, float]:
    """t -/+ z se."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    return t - z * se, t + z * se


def _log_tail(a: float) -> float:
    """log P[Z > a], stable for large a (asymptotic series past 30)."""
    if a < 30:
        return math.log(0.5 * math.erfc(a / math.sqrt(2)))
    return -a * a / 2 - math.log(a * math.sqrt(2 * math.pi)) + math.log1p(-1 / a**2 + 3 / a**4)


def _upper(x: Any) -> Any:
    """P[Z > x] over an array, within 7.5e-8 (Abramowitz and Stegun 26.2.17)."""
    import numpy as np

    ax = np.abs(x)
    k = 1 / (1 + 0.2316419 * ax)
    poly = k * (
        0.319381530 + k * (-0.356563782 + k * (1.781477937 + k * (-1.821255978 + k * 1.330274429)))
    )
    upper = np.exp(-(ax**2) / 2) / math.sqrt(2 * math.pi) * poly
    return np.where(x >= 0, upper, 1 - upper)


def _above(t: float, mu: float, w: float, s_x: float, s_r: float, c: float) -> float:
    """G(mu) = P_mu[w X + R >= t | X > c] by quadrature over the truncated X."""
    import numpy as np

    a = (c - mu) / s_x
    if s_r <= 0:  # T = X (w = 1): the truncated normal's own tail, in closed form
        b = (max(t, c) - mu) / s_x
        return min(math.exp(_log_tail(b) - _log_tail(a)), 1.0)
    z = a + np.linspace(0.0, 40.0 / a, _GRID) if a >= 1 else np.linspace(max(a, -12.0), 12.0, _GRID)
    density = np.exp(-(z**2) / 2 - 0.5 * math.log(2 * math.pi) - _log_tail(a))
    rest = t - mu - w * s_x * z  # what R - (1 - w) mu must reach
    tail = _upper(rest / s_r)
    return float(min(max(np.trapezoid(density * tail, z), 0.0), 1.0))


def selective_interval(
    t: float, w: float, s_x: float, s_r: float, c: float, confidence: float
) -> tuple[float, float]:
    """The ``confidence`` interval for mu given X > c (module docstring): t the pooled
    estimate, w the last level's weight in it, s_x that level's sd, s_r the sd of
    the rest, c the cut on X.  The plain interval when the cut is FAR below it."""
    se = math.sqrt((w * s_x) ** 2 + s_r**2)
    lo, hi = plain_interval(t, se, confidence)
    if s_x <= 0 or (lo - c) / s_x > FAR:
        return lo, hi
    alpha = 1 - confidence

    def solve(target: float) -> float:
        # G rises with mu; bracket [t - 40 se, t + 40 se] (G ~ 0 and ~ 1 at the ends).
        down, up = t - 40 * se, t + 40 * se
        for _ in range(40):
            mid = (down + up) / 2
            if _above(t, mid, w, s_x, s_r, c) < target:
                down = mid
            else:
                up = mid
        return (down + up) / 2

    # A listed string's share is >= 0: the lower end is clipped there (coverage unchanged).
    return max(solve(alpha / 2), 0.0), solve(1 - alpha / 2)
