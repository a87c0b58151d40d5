"""Poisoning attacks of the literature against our own mechanisms: a test harness.

Every mechanism here is a "pure protocol": report r supports value v or not,
P[supports | v is the true value] = p*, P[supports | another value] = q*, and
the server debiases c_hat(v) = sum_r (X_r(v) - q*) / (p* - q*).  So one
report's contribution to c_hat(v) lies in [-q*/(p*-q*), (1-q*)/(p*-q*)],
whatever the report.  Two consequences, exact for every mechanism:

Maximal gain attack (MGA; Cao, Jia and Gong, USENIX Security 2021).  A fake
report that supports the target with probability 1 contributes the most,
``gain`` = (1-q*)/(p*-q*), and nothing else can contribute more.  The crafted
reports (``mga_tallies``):

- GRR and the binary designs: report the target itself (counter 1 for "yes").
- OLH: a uniform seed s and the bucket h_s(target) (every seed supports it).
- Hadamard: a uniform output y in C_target.
- SUE/OUE: the target's bit plus ``round(E[bits]) - 1`` other bits chosen at
  random, so that every fake sets the honest expected number of bits and
  passes the per-report limit and the set-bit total
  (``collector.plausibility``).
- Grid means (Piecewise, Hybrid, Square Wave, Hierarchical): the highest cell
  (target 1, up) or the lowest (target 0, down); 1BitMean: the bit itself.

In general a fake is a uniform choice among the counters that support the
most targets (for one-counter layouts), found from ``support_counts``.

Bounded manipulation (Cheu, Smith and Ullman, IEEE S&P 2021: any LDP protocol
lets m corrupted users shift an estimate by about m/(eps n) and no more, the
price of privacy in manipulation).  For our mechanisms exactly: with a
fraction beta of the N reports fake, the estimated share of v moves by

    beta (gain - f_v)      (MGA, in expectation; ``mga_shift``)

and by at most beta * max(gain - f_v, loss + f_v) in either direction, with
loss = q*/(p*-q*) (``manipulation_bound``).  With one report per device
(tokens), beta is the attacker's share of the devices; without tokens one
fleet key sends any number of reports and beta = m / (n + m) for m fakes.
gain ~ (e^eps + 1) / (e^eps - 1) ~ 2/eps for OUE: the more private, the
easier to move.

>>> from ldp_core import mechanism
>>> m = mechanism("grr", epsilon=1.0, domain_size=32)
>>> round(gain(m), 2)                  # one fake GRR report moves c_hat by 19 reports
19.04
>>> round(fraction_to_move(m, 0.10), 4)   # +10 points of a value held by nobody
0.0053
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

from ldp_core import Mechanism, Numeric

__all__ = [
    "MAX_SUPPORT_COUNTERS",
    "fakes_needed",
    "fraction_to_move",
    "gain",
    "loss",
    "manipulation_bound",
    "mga_shift",
    "mga_tallies",
    "support_matrix",
]

#: One-counter layouts larger than this are not tabulated by ``support_matrix``.
MAX_SUPPORT_COUNTERS = 1 << 14


def gain(m: Mechanism) -> float:
    """(1 - q*)/(p* - q*): the most one report adds to c_hat(v) (a report supporting v).

    A grid mean (``Numeric``: Piecewise, Hybrid, Square Wave, Hierarchical) has no
    support: one report adds at most its highest cell's value to the sum, and the
    gain is that value as a share of [lo, hi], (max value - lo)/(hi - lo), the unit
    of the 1BitMean share z, whose gain is (1 - q*)/(p* - q*).

    >>> from ldp_core import mechanism
    >>> round(gain(mechanism("piecewise", epsilon=1.0, lo=0.0, hi=120.0)), 2)
    2.57
    """
    if isinstance(m, Numeric):
        return (max(m.report_values()) - m.lo) / (m.hi - m.lo)
    p, q = m.p_star, m.q_star
    return (1 - q) / (p - q)


def loss(m: Mechanism) -> float:
    """q*/(p* - q*): the most one report takes from c_hat(v) (a report not supporting v);
    for a grid mean, (lo - min value)/(hi - lo)."""
    if isinstance(m, Numeric):
        return (m.lo - min(m.report_values())) / (m.hi - m.lo)
    p, q = m.p_star, m.q_star
    return q / (p - q)


def mga_shift(m: Mechanism, fraction: float, share: float = 0.0) -> float:
    """Expected rise of the target's estimated share when ``fraction`` of reports are MGA
    fakes and the honest share of the target is ``share``: fraction (gain - share).

    >>> from ldp_core import mechanism
    >>> round(mga_shift(mechanism("oue", epsilon=1.0, domain_size=32), 0.05), 3)
    0.158
    """
    return fraction * (gain(m) - share)


def manipulation_bound(m: Mechanism, fraction: float, share: float) -> tuple[float, float]:
    """(most rise, most fall) of an estimated share ``share`` that a ``fraction`` of fake
    reports can cause, whatever they send (each report's weight is bounded)."""
    return fraction * (gain(m) - share), fraction * (loss(m) + share)


def fraction_to_move(m: Mechanism, shift: float, share: float = 0.0) -> float:
    """The fraction of fake reports (or of devices, with tokens) that moves a target of
    honest share ``share`` up by ``shift``, by MGA: shift / (gain - share)."""
    room = gain(m) - share
    if room <= 0:
        raise ValueError(f"a share of {share!r} cannot be raised by fake reports")
    return shift / room


def fakes_needed(m: Mechanism, shift: float, honest: int, share: float = 0.0) -> int:
    """Fake reports m added to ``honest`` ones (no tokens) so that the MGA moves the
    target by ``shift``: m / (n + m) = fraction, rounded up."""
    beta = fraction_to_move(m, shift, share)
    if beta >= 1:
        raise ValueError(f"no number of fakes moves {m.name} by {shift!r}")
    return math.ceil(honest * beta / (1 - beta))


@functools.lru_cache(maxsize=64)
def support_matrix(m: Mechanism) -> npt.NDArray[np.bool_]:
    """S[k, v]: whether a report that increments counter k supports value v (one-counter
    layouts), from the mechanism's own ``support_counts`` of each unit tally."""
    if m.num_counters > MAX_SUPPORT_COUNTERS:
        raise ValueError(f"{m.name} has {m.num_counters} counters; too many to tabulate")
    width = m.domain_size if m.kind == "frequency" else 2
    out = np.zeros((m.num_counters, width), dtype=bool)
    for k in range(m.num_counters):
        unit = np.zeros(m.num_counters, dtype=np.int64)
        unit[k] = 1
        out[k] = np.asarray(m.support_counts(unit))[:width] > 0
    return out


def _targets(m: Mechanism, targets: tuple[int, ...]) -> tuple[int, ...]:
    width = m.domain_size if m.kind == "frequency" else 2
    if not targets or any(not 0 <= t < width for t in targets) or len(set(targets)) < len(targets):
        raise ValueError(f"targets must be distinct values in [0, {width}), got {targets!r}")
    return targets


def mga_tallies(
    m: Mechanism, targets: tuple[int, ...], count: int, gen: np.random.Generator
) -> npt.NDArray[np.int64]:
    """The tally vector of ``count`` MGA fake reports promoting ``targets``.

    >>> from ldp_core import mechanism
    >>> m = mechanism("oue", epsilon=1.0, domain_size=32)
    >>> t = mga_tallies(m, (5,), 100, np.random.default_rng(0))
    >>> int(t[5]), int(t.sum()) // 100      # target always; ~E[bits] = 8.8 each
    (100, 9)
    """
    chosen = _targets(m, targets)
    out = np.zeros(m.num_counters, dtype=np.int64)
    if count <= 0:
        return out
    if isinstance(m, Numeric):  # a grid mean: target 1 is "up", the highest cell
        values = np.asarray(m.report_values())
        out[int(values.argmax() if chosen == (1,) else values.argmin())] += count
        return out
    law = m.tally_sum_law()
    if law is not None:  # unary: targets + random others, an honest number of bits
        others = np.setdiff1d(np.arange(m.num_counters), chosen)
        extra = min(len(others), max(0, round(law[0]) - len(chosen)))
        keys = gen.random((count, len(others)))
        picked = others[np.argsort(keys, axis=1)[:, :extra]]
        out += np.bincount(picked.ravel(), minlength=m.num_counters)
        out[list(chosen)] += count
        return out
    support = support_matrix(m)
    score = support[:, list(chosen)].sum(axis=1)
    best = np.flatnonzero(score == score.max())
    out += np.bincount(gen.choice(best, size=count), minlength=m.num_counters)
    return out
