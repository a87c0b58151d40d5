"""Plausibility checks: make lies by fake clients visible where the mechanism allows.

Local DP cannot stop a client from lying: any report is a possible output of
the randomiser.  What the server can do is refuse reports that an honest
device would send with negligible probability, count them, and test the
tallies against the law that every honest report follows.

Per report (unary encodings: SUE, OUE and their two-level versions).  Every
bit of an honest report is drawn independently: the bit of the true value is
1 with probability p*, each of the d - 1 others with probability q*, so the
number of set bits K of ANY honest report, whatever its value, follows

    K ~ Binomial(d - 1, q*) + Bernoulli(p*)
    P[K > k] = p* P[X > k - 1] + (1 - p*) P[X > k],   X ~ Binomial(d - 1, q*).

A report with more than ``max_set_bits`` bits, the least k with
P[K > k] <= ``FALSE_REJECTION`` (1e-9), is refused as ``implausible_report``
and counted per (metric, version, epoch).  The tail is summed term by term
from the binomial pmf (in log space, from the exact Fraction channel), not a
normal approximation.

Per tally (unary encodings).  Because K has the same law for every value, the
sum S of a tally vector over n honest reports has an exactly known mean and
variance, whatever the true distribution:

    E[S] = n (p* + (d - 1) q*),   Var[S] = n (p* (1 - p*) + (d - 1) q* (1 - q*)),

so ``count_sum_z`` (S - E[S]) / sd(S) is a z-score that stays small for an
honest population and grows like sqrt(n) when a fraction of clients sends
reports with too many (or too few) bits on average, even when every one of
them passes the per-report check.  Equivalently, the estimated frequencies
sum to 1 within their stderr.  ``SUM_Z_FLAG`` (5.0: an honest metric-epoch is
flagged with probability ~6e-7) is the threshold.

What neither check can see: a client that sends a report with an honest
number of bits that always includes the target bit shifts the estimate of the
target by a / (p* - q*) * (1 - q*) for a fraction a of such clients, and
leaves the count law and the sum intact (README, "Poisoning").

>>> from ldp_core import mechanism
>>> m = mechanism("oue", epsilon=1.0, domain_size=64)
>>> limit = max_set_bits(m)
>>> limit is not None and 17 < limit < 64
True
>>> max_set_bits(mechanism("grr", epsilon=1.0, domain_size=4)) is None
True
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from ldp_core.base import Mechanism

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


def _log_binom_pmf(n: int, k: int, log_q: float, log_1q: float) -> float:
    return (
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        + k * log_q + (n - k) * log_1q
    )


def _binom_sf(n: int, q: float, k: int) -> float:
    """P[Binomial(n, q) > k], summed term by term from the top (no approximation)."""
    if k < 0:
        return 1.0
    if k >= n:
        return 0.0
    if q <= 0.0:
        return 0.0
    if q >= 1.0:
        return 1.0
    log_q, log_1q = math.log(q), math.log1p(-q)
    return math.fsum(
        math.exp(_log_binom_pmf(n, j, log_q, log_1q)) for j in range(k + 1, n + 1)
    )


def set_bits_tail(d: int, p: float, q: float, k: int) -> float:
    """P[K > k] for K ~ Binomial(d - 1, q) + Bernoulli(p)."""
    return p * _binom_sf(d - 1, q, k - 1) + (1 - p) * _binom_sf(d - 1, q, k)


@lru_cache(maxsize=4096)
def _max_bits(d: int, p: Fraction, q: Fraction, alpha: float) -> int:
    pf, qf = float(p), float(q)
    mean = pf + (d - 1) * qf
    k = max(0, int(mean))
    while k < d and set_bits_tail(d, pf, qf, k) > alpha:
        k += 1
    return k


def max_set_bits(mech: Mechanism, alpha: float = FALSE_REJECTION) -> int | None:
    """The most set bits an honest report has but with probability <= alpha; None
    when the mechanism is not a unary encoding (no count law to check), or when
    every count is plausible (the limit would be the whole vector)."""
    if mech.family != "unary":
        return None
    p, q = mech.channel
    d = mech.num_counters
    limit = _max_bits(d, p, q, alpha)
    return None if limit >= d else limit


def count_sum_z(mech: Mechanism, vector: list[int], n: int) -> float | None:
    """z-score of the tally sum against the honest law (unary encodings), else None."""
    if mech.family != "unary" or n <= 0:
        return None
    p, q = (float(x) for x in mech.channel)
    d = mech.num_counters
    mean = n * (p + (d - 1) * q)
    var = n * (p * (1 - p) + (d - 1) * q * (1 - q))
    if var <= 0:
        return None
    return (sum(vector) - mean) / math.sqrt(var)
