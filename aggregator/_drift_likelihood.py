"""The weighted likelihood-ratio drift statistic of the one-level frequency mechanisms
whose report increments one counter (GRR, OLH, Hadamard, HCMS), and its Monte Carlo
test through the exact channel, ``calibrated_drift`` (explained in ``aggregator.drift``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

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

__all__ = [
    "LR_MAX_CELLS",
    "calibrated_drift",
    "fake_laws",
    "likelihood_drift",
    "mga_laws",
    "support_rows",
    "weighted_z",
]

#: The weighted statistic applies when counters x values is at most this.
LR_MAX_CELLS = 1 << 20


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



def calibrated_drift(
    m: Mechanism, latest: Tally, earlier: Tally, alpha_rise: float, alpha_fall: float, draws: int
) -> Drift | None:
    """The weighted drift with Monte Carlo thresholds (``aggregator.drift``); None where the
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
