"""Helpers for the statistical tests: exact per-counter probabilities and thresholds."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from ldp_core import Bounded, Mechanism
from ldp_core.simulate import output_distribution


def z_for(false_positive_rate: float, checks: int = 1) -> float:
    """Two-sided normal critical value so that ``checks`` tests jointly err at the rate."""
    return NormalDist().inv_cdf(1 - false_positive_rate / (2 * checks))


def counter_probabilities(m: Mechanism, value: float) -> npt.NDArray[np.float64]:
    """P[counter k is incremented by one report of ``value``], for every counter k."""
    if isinstance(m, Bounded):
        one = float(m.one_probability(value))
        return np.array([1 - one, one])
    if m.max_set_bits() is not None or m.tally_sum_law() is not None:  # independent bits
        out = np.full(m.num_counters, m.q_star)
        out[int(value)] = m.p_star
        return out
    if m.kind == "binary":
        one = m.p_star if int(value) == 1 else m.q_star
        return np.array([1 - one, one])
    return output_distribution(m, int(value))
