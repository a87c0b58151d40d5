"""The drift test where counters are independent bits given the population (unary
encodings, one-bit designs, CMS): Monte Carlo thresholds for any statistic of the
tallies, ``simulated_drift`` (explained in ``aggregator.drift``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from aggregator._drift_monte_carlo import (
    MC_MAX_DRAWS,
    MC_MAX_WORK,
    Drift,
    Floats,
    Tally,
    _monte_carlo,
    _seed,
)
from ldp_core import Mechanism
from ldp_core._rng import WORD
from ldp_core.mechanisms.binary import OneBit, OneBitTwoLevel
from ldp_core.mechanisms.sketch import CountMeanSketch
from ldp_core.mechanisms.unary import (
    LongitudinalOUE,
    LongitudinalSUE,
    UnaryEncoding,
    _LongitudinalUnary,
)

__all__ = ["bit_rows", "simulated_drift"]


def bit_rows(m: Mechanism) -> int | None:
    """How a report of ``m`` sets its counters, for ``simulated_drift``: 1 where every
    counter is an independent bit of every report (unary encodings; one-bit designs,
    whose counter 0 is n minus counter 1), S where a report picks one of S rows
    uniformly and then sets independent bits in it (CMS); None otherwise."""
    if isinstance(m, UnaryEncoding | LongitudinalSUE | LongitudinalOUE | OneBit):
        return 1
    if isinstance(m, CountMeanSketch):
        return int(m.num_seeds)
    return None


def _bits(
    n: int,
    law: tuple[Floats, Floats, Floats],
    rows: int,
    one_bit: bool,
    size: int,
    gen: np.random.Generator,
) -> Floats:
    """``size`` tallies of n reports: counter c = Bin(k_c, a_c) + Bin(n - k_c, b_c),
    k_c = round(share_c n), with rows picked uniformly first where rows > 1."""
    share, a, b = law
    if rows > 1:
        per_row = np.repeat(
            gen.multinomial(n, np.full(rows, 1.0 / rows), size=size), len(a) // rows, axis=1
        )
        return gen.binomial(per_row, np.minimum(a * rows, 1.0)).astype(np.float64)
    k = np.rint(share * n).astype(np.int64)
    if one_bit:
        ones = gen.binomial(k[1], a[1], size=size) + gen.binomial(n - k[1], b[1], size=size)
        return np.stack([n - ones, ones], axis=1).astype(np.float64)
    shape = (size, len(a))
    return (gen.binomial(k, a, size=shape) + gen.binomial(n - k, b, size=shape)).astype(np.float64)


def _bit_law(m: Mechanism, before: npt.NDArray[np.int64], n: int) -> tuple[Floats, Floats, Floats]:
    """(share, a, b) per counter.  Unary and one-bit frequency or binary designs: a fixed
    population, share_c of it holding c's value, bits at p* for them and q* for the
    others (share estimated from the earlier epochs, clipped into [0, 1]).  Their
    two-level forms: a memoised population, share_c of it holding a permanent bit c,
    re-randomised by the instantaneous flip (kept with k: a = k, b = 1 - k), the
    null of ``aggregator.drift_memo``.  Means and CMS: every report sets c at its
    mean rate (share 1): a mixture, more variable."""
    rate = np.asarray((before + 0.5) / (n + 1.0), dtype=np.float64)
    ones = np.ones_like(rate)
    if m.kind == "mean" or isinstance(m, CountMeanSketch):
        return ones, rate, rate
    p, q = m.p_star, m.q_star
    if isinstance(m, _LongitudinalUnary | OneBitTwoLevel):
        p, q = m.keep / WORD, 1 - m.keep / WORD
    share = np.clip((before / n - q) / (p - q), 0.0, 1.0)
    return np.asarray(share, dtype=np.float64), ones * p, ones * q


def simulated_drift(
    m: Mechanism,
    latest: Tally,
    earlier: Tally,
    alpha_rise: float,
    alpha_fall: float,
    draws: int,
    statistic: Callable[[Floats, int, Floats, int], Floats],
) -> Drift | None:
    """Monte Carlo thresholds for ``statistic`` (rows of latest tallies, n_latest, rows
    of earlier tallies, n_earlier -> rows of z) where counters are independent bits
    given the population (``bit_rows``): B pairs are drawn from the law of
    ``_bit_law`` estimated from the earlier epochs, and the latest epoch is flagged
    past the r-th largest simulated maximum, as ``calibrated_drift``.  Where
    ``_bit_law`` uses a mixture (means, CMS) a fixed population's counter is a sum
    of binomials of different rates, less variable than one binomial of the mean
    rate: the simulated spread is larger, the test conservative.  Two-level unary
    and one-bit forms simulate their memoised population (``aggregator.drift``).
    None where ``bit_rows`` is None or the work is over the caps.

    >>> from ldp_core import mechanism
    >>> from ldp_core.simulate import tallies
    >>> m = mechanism("binary_rr", epsilon=1.0)
    >>> def z(now, n_now, before, n_before):
    ...     return (now[:, 1:] / n_now - before[:, 1:] / n_before) * 100
    >>> t, n = tallies(m, [0, 1] * 500, seed=2)
    >>> d = simulated_drift(m, (t, n), tallies(m, [0, 1] * 5000, seed=1), 0.009, 0.0005,
    ...                     1999, z)
    >>> d.method, bool(d.z[0] < d.rise_threshold)
    ('difference of shares, Monte Carlo (1999 draws)', True)
    """
    rows = bit_rows(m)
    cells = m.num_counters * m.domain_size
    if rows is None or draws * cells > MC_MAX_WORK or draws * m.num_counters > MC_MAX_DRAWS:
        return None
    now_t = np.asarray(latest[0], dtype=np.int64)
    before_t = np.asarray(earlier[0], dtype=np.int64)
    n_now, n_before = int(latest[1]), int(earlier[1])
    if n_now <= 0 or n_before <= 0:
        return None
    law = _bit_law(m, before_t, n_before)
    one_bit = isinstance(m, OneBit)
    gen = np.random.default_rng(_seed(now_t, before_t, np.array([n_now, n_before, 1])))

    def pair(size: int) -> tuple[Floats, Floats]:
        return (
            _bits(n_now, law, rows, one_bit, size, gen),
            _bits(n_before, law, rows, one_bit, size, gen),
        )

    def stat(now: Floats, before: Floats) -> Floats:
        return statistic(now, n_now, before, n_before)

    z = statistic(
        now_t[None, :].astype(np.float64), n_now, before_t[None, :].astype(np.float64), n_before
    )[0]
    return _monte_carlo(
        z,
        pair,
        stat,
        alpha_rise,
        alpha_fall,
        draws,
        f"difference of shares, Monte Carlo ({draws} draws)",
    )
