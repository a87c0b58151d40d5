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
    "check_mechanism_epsilon",
    "check_separated",
    "log_up",
    "threshold_at_least",
    "threshold_at_most",
]

#: Absolute slack added to every epsilon computed in floating point.  A float
#: logarithm of an exact ratio is off by far less than this.
SLACK = 1e-12
#: The largest epsilon the core accepts.  On the 2**-32 grid no channel is less
#: private than about ln(2**32) = 22.2 anyway; above this bound e^eps overflows a
#: float, so it is refused rather than crashing.
MAX_EPSILON = 64.0


def log_up(ratio: Fraction | int) -> float:
    """An upper bound on ``ln(ratio)`` for an exact rational ratio > 0.

    >>> log_up(Fraction(3)) > math.log(3)
    True
    """
    if ratio <= 0:
        raise ValueError(f"log of non-positive ratio {ratio}")
    return math.log(Fraction(ratio)) + SLACK


def threshold_at_most(p: float) -> int:
    """An integer K >= 1 with K / 2**32 < p (strictly below; one unit of margin).

    A probability with no such K is below the grid: clamping it up to 1/2**32
    would round the privacy loss inward, so it is refused.

    >>> threshold_at_most(1e-12)
    Traceback (most recent call last):
    ...
    ValueError: probability 1e-12 is below the 2**-32 grid of the device's thresholds
    """
    k = math.floor(Fraction(p) * WORD) - 1
    if k < 1:
        raise ValueError(f"probability {p!r} is below the 2**-32 grid of the device's thresholds")
    return k


def threshold_at_least(p: float) -> int:
    """An integer K <= 2**32 - 1 with K / 2**32 > p (strictly above; one unit of margin)."""
    k = math.ceil(Fraction(p) * WORD) + 1
    if k > WORD - 1:
        raise ValueError(f"probability {p!r} is above the 2**-32 grid of the device's thresholds")
    return k


def check_separated(name: str, epsilon: float, channel: tuple[Fraction, Fraction]) -> None:
    """A ValueError unless p* > q*: rounding onto the grid must never invert a channel.

    At a tiny epsilon over a large domain (GRR, d = 65536, eps = 1e-5) the keep
    threshold rounds below the others' share and the channel would favour the
    wrong value; such an epsilon is refused with the mechanism named.
    """
    p, q = channel
    if not q < p:
        raise ValueError(
            f"epsilon {epsilon!r} is too small for {name} on the 2**-32 grid of the device's "
            "thresholds (the implemented channel would not separate the true value); "
            "raise epsilon or shrink the domain"
        )


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


def check_mechanism_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """``check_epsilon`` for a mechanism's parameter, also refusing more than MAX_EPSILON.

    (Totals of the accountant may exceed it: a year of daily reports at eps = 1
    is 365.)

    >>> check_mechanism_epsilon(100.0)
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be at most 64, got 100.0
    """
    value = check_epsilon(epsilon, name)
    if value > MAX_EPSILON:
        raise ValueError(f"{name} must be at most {MAX_EPSILON:g}, got {epsilon!r}")
    return value


def adversary_accuracy(epsilon: float) -> float:
    """The best accuracy of any guess of one bit of a person's input, e^eps/(1+e^eps).

    This is the membership-inference ceiling for an epsilon-LDP report with a
    fair prior: at eps = ln 3 an adversary is right at most 75% of the time.
    """
    return 1.0 / (1.0 + math.exp(-min(check_epsilon(epsilon), 700.0)))
