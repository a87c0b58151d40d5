"""Plausibility checks: make lies by fake clients visible where the mechanism allows.

Local DP cannot stop a client from lying: any report is a possible output of
the randomiser.  What the server can do is refuse reports that an honest
device would send with negligible probability, count them, and test the
tallies against the law that every honest report follows.  Each mechanism
states both laws itself (``Mechanism.max_set_bits``, ``Mechanism.tally_sum_law``;
today only the unary encodings have them: see ``ldp_core.mechanisms.unary``);
this module applies them.

Per report: a report with more set counters than ``max_set_bits`` (an honest
report exceeds it with probability <= ``FALSE_REJECTION``, 1e-9) is refused as
``implausible_report`` and counted per (metric, version, epoch).

Per tally: when the number of counters one honest report sets has the same law
(mean m, variance s^2) whatever its value, the sum S of a tally vector over n
honest reports has E[S] = n m and Var[S] = n s^2 whatever the true
distribution, so ``count_sum_z`` = (S - n m) / sqrt(n s^2) stays small for an
honest population and grows like sqrt(n) when a fraction of clients sends too
many (or too few) counters on average, even when each passes the per-report
check.  ``SUM_Z_FLAG`` (5.0: an honest metric-epoch is flagged with
probability ~6e-7) is the threshold.

What neither check can see: a client that sends a report with an honest
number of bits that always includes the target bit shifts the estimate of the
target by a / (p* - q*) * (1 - q*) for a fraction a of such clients, and
leaves the count law and the sum intact (docs/poisoning.md).  That lie, the
maximal gain attack of ``aggregator.attacks``, is what the estimate's own
signals look for (``aggregator.poisoning``: impossible shares, drift of the
latest epoch against the earlier ones, a robust median beside the estimate).

>>> from ldp_core import mechanism
>>> limit = max_set_bits(mechanism("oue", epsilon=1.0, domain_size=64))
>>> limit is not None and 17 < limit < 64
True
>>> max_set_bits(mechanism("grr", epsilon=1.0, domain_size=4)) is None
True
"""

from __future__ import annotations

import math

from ldp_core.base import Mechanism
from ldp_core.binomial_tail import set_bits_tail

__all__ = [
    "FALSE_REJECTION",
    "SUM_Z_FLAG",
    "count_sum_z",
    "max_set_bits",
    "set_bits_tail",
]

#: The largest probability that an honest report is refused as implausible.
FALSE_REJECTION = 1e-9
#: |z| of the tally sum above which a metric-epoch is flagged.
SUM_Z_FLAG = 5.0


def max_set_bits(mech: Mechanism, alpha: float = FALSE_REJECTION) -> int | None:
    """The most counters an honest report sets but with probability <= alpha; None
    when the mechanism has no such limit."""
    return mech.max_set_bits(alpha)


def count_sum_z(mech: Mechanism, vector: list[int], n: int) -> float | None:
    """z-score of the tally sum against the honest law, or None where there is none."""
    law = mech.tally_sum_law()
    if law is None or n <= 0:
        return None
    mean, var = law
    if var <= 0:
        return None
    return (sum(vector) - n * mean) / math.sqrt(n * var)
