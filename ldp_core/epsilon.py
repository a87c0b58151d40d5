"""Epsilon arithmetic that errs on the side of the person, never the analyst.

Probabilities on the device are integers over a power of two (or small exact
rationals).  Converting an epsilon into thresholds rounds so that the channel
actually implemented is *at least* as private as declared, and every epsilon
computed from a channel is rounded *up* (outward) to the next floats.

>>> p_keep = threshold_at_most(0.75)        # floor(0.75 * 2**32) - 1
>>> p_keep < 3 * 2**30
True
>>> round(adversary_accuracy(math.log(3)), 6)
0.75
"""

from __future__ import annotations

import math
from fractions import Fraction

from ldp_core._rng import WORD

__all__ = [
    "adversary_accuracy",
    "check_epsilon",
    "log_up",
    "threshold_at_least",
    "threshold_at_most",
]

#: Absolute slack added to every epsilon computed in floating point.  A float
#: logarithm of an exact ratio is off by far less than this.
SLACK = 1e-12


def log_up(ratio: Fraction | int) -> float:
    """An upper bound on ``ln(ratio)`` for an exact rational ratio > 0.

    >>> log_up(Fraction(3)) > math.log(3)
    True
    """
    if ratio <= 0:
        raise ValueError(f"log of non-positive ratio {ratio}")
    return math.log(Fraction(ratio)) + SLACK


def threshold_at_most(p: float) -> int:
    """An integer K with K / 2**32 < p (strictly below; one unit of margin)."""
    k = math.floor(Fraction(p) * WORD) - 1
    return max(k, 1)


def threshold_at_least(p: float) -> int:
    """An integer K with K / 2**32 > p (strictly above; one unit of margin)."""
    k = math.ceil(Fraction(p) * WORD) + 1
    return min(k, WORD - 1)


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """``epsilon`` as a float if it is finite and > 0, else a ValueError naming it.

    >>> check_epsilon(float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be a finite number > 0, got nan
    """
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
        raise ValueError(f"{name} must be a finite number > 0, got {epsilon!r}")
    value = float(epsilon)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {epsilon!r}")
    return value


def adversary_accuracy(epsilon: float) -> float:
    """The best accuracy of any guess of one bit of a person's input, e^eps/(1+e^eps).

    This is the membership-inference ceiling for an epsilon-LDP report with a
    fair prior: at eps = ln 3 an adversary is right at most 75% of the time.
    """
    return 1.0 / (1.0 + math.exp(-check_epsilon(epsilon)))
