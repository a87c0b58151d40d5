"""Drift of the latest epoch against the earlier ones, with thresholds that hold their
false-alarm rate by construction.

Two statistics, per value v of the k estimated shares:

- ``share_z`` (every mechanism): z_v = (f_latest - f_earlier) /
  sqrt(se_latest^2 + se_earlier^2).  Where counters are independent bits
  given the population (unary encodings, one-bit designs, CMS), thresholds of
  its maximum from a Monte Carlo test through those bits (``simulated_drift``);
  elsewhere, or past the cost caps, from the normal law with a Bonferroni
  correction over the k values (``normal_drift``).
- ``weighted_z`` (one-level frequency mechanisms whose report increments one
  counter: GRR, OLH, Hadamard, HCMS): the likelihood-ratio statistic for "MGA
  fakes of v were added".  The tally is the histogram of outputs; an MGA fake
  of v is uniform over the counters that support v (law F_v); the honest output
  law P0 is estimated from the earlier epochs.  Locally (few fakes) the most
  powerful statistic weighs each counter by F_v / P0 (Neyman-Pearson), and
  z_v = (N_latest / n_latest - N_earlier / n_earlier) . (F_v / P0) / sd.
  Where P0 is far from uniform (Hadamard over a skewed population) it sees
  more than the support count; for GRR it is the support count.

``calibrated_drift`` does not trust the normal law for the weighted statistic
(a weighted sum over small cells has a heavier tail: 1.27% of false alarms at a
nominal 0.9% on OLH and HCMS).  It is a Monte Carlo test through the exact
channel: B pairs (earlier*, latest*) are drawn from Multinomial(n, P0_hat) at the
window's own n (P0_hat: the earlier epochs' output law), the whole statistic is
recomputed on each (P0 re-estimated from earlier*, as on real data), and the
latest epoch is flagged when max_v z_v exceeds the r-th largest simulated maximum,
r = alpha (B + 1): the Monte Carlo p-value (1 + #{T* >= T}) / (B + 1) is <= alpha.
Under the simulated null the level is exactly r / (B + 1) (Barnard 1963; Dwass
1957), whatever the tail of the statistic and for the k values together (no
Bonferroni).  Two approximations remain, both measured in docs/poisoning.md: P0_hat
stands for P0 (the statistic is nearly pivotal), and a fixed population's tally
is a sum of one multinomial per value, slightly less variable than one
multinomial of the mixture (so the test errs on the safe side).

Two-level forms.  A device memoises its permanent response, so every epoch
re-randomises the same permanent responses: given them, epochs are i.i.d. and
the permanent level's noise cancels in latest - earlier.  The null simulated is
that memoised population (permanent responses in the proportions estimated from
the earlier epochs by inverting the instantaneous channel, re-randomised in each
simulated epoch): for GRR, OLH and Hadamard with the weighted statistic
(``aggregator.drift_memo.memoised_drift``), for SUE, OUE and binary RR with bits
kept with k (``_bit_law``).  Exact given the population.  The composed channel
(p*, q*) with independent epochs adds the spread of P[c | u] across devices: on
the safe side, but on Hadamard (d = 32, eps = 1, eps_inf = 4) it flagged 3.3% of
honest epochs at a 10-11% budget and saw a third of the memoised test's attacks
at 2% fakes (docs/poisoning.md).  Both assume the latest epoch's devices are the earlier ones'.

>>> import numpy as np
>>> from ldp_core import mechanism
>>> from ldp_core.simulate import tallies
>>> from aggregator.attacks import mga_tallies
>>> m = mechanism("hadamard", epsilon=1.0, domain_size=4)
>>> before = tallies(m, [0, 1, 2, 3] * 5000, seed=1)
>>> t, n = tallies(m, [0, 1, 2, 3] * 500, seed=2)
>>> d = calibrated_drift(m, (t, n), before, 0.009, 0.0005, 1999)
>>> d.method, bool(d.z.max() < d.rise_threshold)
('likelihood ratio, Monte Carlo (1999 draws)', True)
>>> fakes = mga_tallies(m, (3,), 200, np.random.default_rng(0))
>>> d = calibrated_drift(m, (t + fakes, n + 200), before, 0.009, 0.0005, 1999)
>>> int(d.z.argmax()), bool(d.z[3] > d.rise_threshold)
(3, True)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

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

__all__ = [
    "MC_MAX_WORK",
    "Drift",
    "calibrated_drift",
    "fake_laws",
    "likelihood_drift",
    "mga_laws",
    "normal_drift",
    "simulated_drift",
    "support_rows",
    "weighted_z",
]

Tally = tuple[Sequence[int] | npt.NDArray[Any], int]
Floats = npt.NDArray[np.float64]

#: The weighted statistic applies when counters x values is at most this.
LR_MAX_CELLS = 1 << 20
#: Monte Carlo calibration when draws x counters x values is at most MC_MAX_WORK
#: and draws x counters (binomial draws, twice) at most MC_MAX_DRAWS: the work of
#: one request, in a worker thread; past them the normal thresholds apply.
MC_MAX_WORK = 1 << 28
MC_MAX_DRAWS = 1 << 22
#: Draws simulated at once (memory: CHUNK x counters integers, twice).
CHUNK = 1000


@dataclass(frozen=True, eq=False)
class Drift:
    """Per-value z of the latest epoch, and the thresholds a rise or a fall must pass."""

    z: Floats
    rise_threshold: float
    fall_threshold: float
    method: str


def fake_laws(m: Mechanism) -> Floats | None:
    """``mga_laws`` where ``calibrated_drift`` applies (one-level mechanisms); the
    two-level ones are simulated by ``aggregator.drift_memo``."""
    return mga_laws(m) if m.levels == 1 else None


@lru_cache(maxsize=16)
def mga_laws(m: Mechanism) -> Floats | None:
    """counters x values: the law of an MGA fake of each value (uniform over the
    counters that support it; a fake is a report on the wire, so two-level forms
    too); None where the statistic does not apply (not a frequency, several
    counters per report, or too many cells)."""
    if m.kind != "frequency" or m.num_counters * m.domain_size > LR_MAX_CELLS:
        return None
    try:
        m.output_distribution(0)
    except ValueError:
        return None
    support = support_rows(m)
    return np.asarray(support / support.sum(axis=0), dtype=np.float64)


def support_rows(m: Mechanism) -> Floats:
    """counters x values: row c is ``m.support_counts`` of the tally holding one report
    in counter c (for the linear layouts: support counts are ``tallies @`` this).

    Filled row by row, each row one short conversion: numpy converts a list of
    lists in ONE call that holds the GIL throughout (2.6 s for d = 4096, with
    600 MB of Python ints before it), and while it runs in a worker thread the
    event loop of the process cannot answer anything.
    """
    k = m.num_counters
    unit = np.zeros(k, dtype=np.int64)
    out = np.empty((k, len(m.support_counts(unit))), dtype=np.float64)
    for c in range(k):
        unit[c] = 1
        out[c] = m.support_counts(unit)
        unit[c] = 0
    return out


def _law(counts: npt.NDArray[Any], n: float) -> Floats:
    """P0 estimated from counts, with half a report per counter (no empty cell)."""
    return np.asarray((counts + 0.5) / (n + 0.5 * counts.shape[-1]), dtype=np.float64)


def weighted_z(
    laws: Floats, now: npt.NDArray[Any], n_now: float, before: npt.NDArray[Any], n_before: float
) -> Floats:
    """z_v of the weighted statistic; ``now`` and ``before`` are counter vectors, or
    rows of them (one z row per row)."""
    p0 = _law(before, n_before)
    diff = (now / n_now - before / n_before) / p0
    # Var_P0[F_v / P0] = sum_c F_v(c)^2 / P0(c) - 1 per report (F_v sums to 1).
    # einsum, not BLAS: small products, and no thread pool to wait for in a worker.
    var = np.einsum("...k,kv->...v", 1.0 / p0, laws**2) - 1.0
    sd = np.sqrt(np.maximum(var, 1e-12) * (1.0 / n_now + 1.0 / n_before))
    return np.asarray(np.einsum("...k,kv->...v", diff, laws) / sd, dtype=np.float64)


def likelihood_drift(m: Mechanism, latest: Tally, earlier: Tally) -> Floats | None:
    """The weighted z of the latest epoch against the pooled earlier ones (no threshold);
    None where it does not apply."""
    laws = fake_laws(m)
    if laws is None or latest[1] <= 0 or earlier[1] <= 0:
        return None
    now = np.asarray(latest[0], dtype=np.float64)
    before = np.asarray(earlier[0], dtype=np.float64)
    return weighted_z(laws, now, float(latest[1]), before, float(earlier[1]))


def _seed(*vectors: npt.NDArray[Any]) -> int:
    """A seed from the data: the same window always gets the same answer."""
    h = hashlib.blake2b(digest_size=8)
    for v in vectors:
        h.update(np.ascontiguousarray(v, dtype=np.int64).tobytes())
    return int.from_bytes(h.digest(), "big")


def _order_threshold(maxima: Floats, alpha: float) -> float:
    """The r-th largest of B simulated maxima, r = floor(alpha (B + 1)): T above it
    has Monte Carlo p-value (1 + #{T* >= T}) / (B + 1) <= alpha."""
    r = int(alpha * (len(maxima) + 1) + 1e-9)
    if r < 1:
        raise ValueError(f"{len(maxima)} draws are too few for alpha = {alpha!r}")
    return float(np.sort(maxima)[-r])


def calibrated_drift(
    m: Mechanism, latest: Tally, earlier: Tally, alpha_rise: float, alpha_fall: float, draws: int
) -> Drift | None:
    """The weighted drift with Monte Carlo thresholds (module docstring); None where the
    weighted statistic does not apply or the simulation would cost more than
    ``MC_MAX_WORK`` or ``MC_MAX_DRAWS``."""
    cells = m.num_counters * m.domain_size
    if draws * cells > MC_MAX_WORK or draws * m.num_counters > MC_MAX_DRAWS:
        return None
    laws = fake_laws(m)
    if laws is None or latest[1] <= 0 or earlier[1] <= 0:
        return None
    now_t = np.asarray(latest[0], dtype=np.int64)
    before_t = np.asarray(earlier[0], dtype=np.int64)
    n_now, n_before = int(latest[1]), int(earlier[1])
    z = weighted_z(laws, now_t.astype(np.float64), n_now, before_t.astype(np.float64), n_before)
    p0 = _law(before_t.astype(np.float64), n_before)
    gen = np.random.default_rng(_seed(now_t, before_t, np.array([n_now, n_before])))

    def pair(size: int) -> tuple[Floats, Floats]:
        return (
            gen.multinomial(n_now, p0, size=size).astype(np.float64),
            gen.multinomial(n_before, p0, size=size).astype(np.float64),
        )

    def stat(now: Floats, before: Floats) -> Floats:
        return weighted_z(laws, now, n_now, before, n_before)

    return _monte_carlo(
        z,
        pair,
        stat,
        alpha_rise,
        alpha_fall,
        draws,
        f"likelihood ratio, Monte Carlo ({draws} draws)",
    )


def _monte_carlo(
    z: Floats,
    pair: Callable[[int], tuple[Floats, Floats]],
    stat: Callable[[Floats, Floats], Floats],
    alpha_rise: float,
    alpha_fall: float,
    draws: int,
    method: str,
) -> Drift:
    """Thresholds of max_v z and max_v -z from ``draws`` simulated (latest, earlier) pairs."""
    tops, bottoms = [], []
    for start in range(0, draws, CHUNK):
        now, before = pair(min(CHUNK, draws - start))
        zs = stat(now, before)
        tops.append(zs.max(axis=1))
        bottoms.append((-zs).max(axis=1))
    return Drift(
        z=z,
        rise_threshold=_order_threshold(np.concatenate(tops), alpha_rise),
        fall_threshold=-_order_threshold(np.concatenate(bottoms), alpha_fall),
        method=method,
    )


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
    and one-bit forms simulate their memoised population (module docstring).
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


def normal_drift(now: Any, before: Any, alpha_rise: float, alpha_fall: float) -> Drift:
    """The difference of shares (``aggregator.poisoning.Shares``) with Bonferroni normal
    thresholds: a rise above Phi^-1(1 - alpha_rise/k), a fall below
    -Phi^-1(1 - alpha_fall/k)."""
    z = (now.value - before.value) / np.sqrt(now.stderr**2 + before.stderr**2)
    k = len(z)
    normal = NormalDist()
    return Drift(
        z=np.asarray(z, dtype=np.float64),
        rise_threshold=-normal.inv_cdf(alpha_rise / k),
        fall_threshold=normal.inv_cdf(alpha_fall / k),
        method="difference of shares, normal (Bonferroni)",
    )
