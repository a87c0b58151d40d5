"""Helpers for the statistical tests: exact per-counter probabilities and thresholds."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from ldp_core import Mechanism
from ldp_core.simulate import output_distribution


def z_for(false_positive_rate: float, checks: int = 1) -> float:
    """Two-sided normal critical value so that ``checks`` tests jointly err at the rate."""
    return NormalDist().inv_cdf(1 - false_positive_rate / (2 * checks))


def counter_probabilities(m: Mechanism, value: float) -> npt.NDArray[np.float64]:
    """P[counter k is incremented by one report of ``value``], for every counter k."""
    p, q = m.p_star, m.q_star
    if m.family == "unary":
        out = np.full(m.num_counters, q)
        out[int(value)] = p
        return out
    if m.family == "binary":
        one = p if int(value) == 1 else q
        return np.array([1 - one, one])
    if m.family == "mean":
        one = float(m.one_probability(value))  # type: ignore[attr-defined]
        return np.array([1 - one, one])
    return output_distribution(m, int(value))
