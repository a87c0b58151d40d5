"""Vectorised simulation: the tallies a collector would hold, without a fleet.

``tallies(m, true_values, seed)`` has the same distribution as summing the
counters of ``m.randomize(v)`` over the true values (the suite checks this
with a two-sample test against the device path).  It is what the demo, the
benchmarks and the statistical tests use for large n.  numpy is imported here
only, lazily, so ldp_core still ships to devices without it.

Samplers, all exact in distribution:

- unary, binary: counters are independent across bits and reports, so
  C(v) = Bin(n_v, p*) + Bin(n - n_v, q*);
- mean: one Bernoulli(q* + z (p* - q*)) per report, grouped by distinct value;
- direct (GRR-like) and hashed (OLH-like): a multinomial per distinct true
  value over the report's output distribution when that table is small, else
  one draw per report (seed, then bucket), in chunks.

>>> from ldp_core import mechanism
>>> t, n = tallies(mechanism("grr", epsilon=1.0, domain_size=4), [0, 1, 1, 3], seed=0)
>>> int(t.sum()), n
(4, 4)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ldp_core.base import Mechanism

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["output_distribution", "tallies", "tallies_many"]

#: Above this many (distinct values x counters x trials) cells, sample per report.
_TABLE_LIMIT = 20_000_000
_CHUNK = 1 << 20
#: Cost of one per-report draw over one multinomial cell (measured ~0.5 for GRR and
#: for OLH with the hash table: ~30-50 ns per report, ~100 ns per cell).
_PER_REPORT_COST = 0.5


def tallies(
    m: Mechanism, true_values: Sequence[float] | npt.NDArray[Any], seed: int | None = 0
) -> tuple[npt.NDArray[np.int64], int]:
    """(tally vector, n) for one report per true value, as the collector would hold them."""
    many, n = tallies_many(m, true_values, trials=1, seed=seed)
    return many[0], n


def tallies_many(
    m: Mechanism,
    true_values: Sequence[float] | npt.NDArray[Any],
    trials: int,
    seed: int | None = 0,
) -> tuple[npt.NDArray[np.int64], int]:
    """``trials`` independent tally vectors, shape (trials, num_counters), and n."""
    import numpy as np

    rng = np.random.default_rng(seed)
    values = np.asarray(true_values)
    n = int(values.shape[0])
    if m.family == "mean":
        return _mean(m, values, trials, rng), n
    index = values.astype(np.int64)
    if n and (index.min() < 0 or index.max() >= m.domain_size):
        raise ValueError(f"true values must lie in [0, {m.domain_size})")
    counts = np.bincount(index, minlength=m.domain_size)
    if m.family == "unary":
        p, q = (float(x) for x in m.channel)
        ones = rng.binomial(counts, p, size=(trials, m.domain_size)) + rng.binomial(
            n - counts, q, size=(trials, m.domain_size)
        )
        return ones.astype(np.int64), n
    if m.family == "binary":
        # One bit per report: counter 1 counts the 1s, counter 0 the rest.
        p, q = (float(x) for x in m.channel)
        out = np.empty((trials, 2), dtype=np.int64)
        out[:, 1] = rng.binomial(counts[1], p, size=trials) + rng.binomial(
            counts[0], q, size=trials
        )
        out[:, 0] = n - out[:, 1]
        return out, n
    distinct = np.flatnonzero(counts)
    table_cells = len(distinct) * m.num_counters * trials
    # A multinomial over the counters per distinct value costs ~ cells; drawing per
    # report costs ~ n * trials draws (times a few numpy passes).  Take the cheaper.
    cheaper_per_report = trials == 1 and n * _PER_REPORT_COST < table_cells
    if table_cells <= _TABLE_LIMIT and not cheaper_per_report:
        out = np.zeros((trials, m.num_counters), dtype=np.int64)
        for v in distinct:
            out += rng.multinomial(counts[v], output_distribution(m, int(v)), size=trials)
        return out, n
    if trials != 1:
        raise ValueError("too large to simulate several trials at once; loop over seeds")
    return _per_report(m, index, rng)[None, :], n


def output_distribution(m: Mechanism, value: int) -> npt.NDArray[np.float64]:
    """P[counter k is the one a report of ``value`` increments], for one-counter reports."""
    import numpy as np

    if m.family == "direct":
        p, q = (float(x) for x in m.channel)
        dist = np.full(m.domain_size, q)
        dist[value] = p
        return np.asarray(dist / dist.sum(), dtype=np.float64)
    if m.family == "hashed":
        olh = m.hashing  # type: ignore[attr-defined]
        keep = float(m.bucket_keep)  # type: ignore[attr-defined]
        g, seeds = olh.g, olh.num_seeds
        buckets = (olh.seed_matrix() @ olh.digit_matrix(np.array([value]))[0]) % g
        table = np.full((seeds, g), (1 - keep) / (g - 1))
        table[np.arange(seeds), buckets] = keep
        flat = (table / seeds).ravel()
        return np.asarray(flat / flat.sum(), dtype=np.float64)
    raise ValueError(f"{m.name} reports increment several counters")


def _per_report(m: Mechanism, index: npt.NDArray[np.int64], rng: Any) -> npt.NDArray[np.int64]:
    import numpy as np

    out = np.zeros(m.num_counters, dtype=np.int64)
    for start in range(0, len(index), _CHUNK):
        x = index[start : start + _CHUNK]
        if m.family == "direct":
            d, keep = m.domain_size, float(m.channel[0])
            other = (x + 1 + rng.integers(0, d - 1, size=len(x))) % d
            y = np.where(rng.random(len(x)) < keep, x, other)
            out += np.bincount(y, minlength=d)
        else:
            olh = m.hashing  # type: ignore[attr-defined]
            keep = float(m.bucket_keep)  # type: ignore[attr-defined]
            g = olh.g
            seeds = rng.integers(0, olh.num_seeds, size=len(x))
            table = _hash_table(olh.g, olh.length, olh.num_seeds, olh.size)
            if table is not None:
                h = table[seeds, x].astype(np.int64)
            else:
                vectors = olh.seed_matrix()[seeds]
                h = (vectors * olh.digit_matrix(x)).sum(axis=1) % g
            other = (h + 1 + rng.integers(0, g - 1, size=len(x))) % g
            y = np.where(rng.random(len(x)) < keep, h, other)
            out += np.bincount(seeds * g + y, minlength=m.num_counters)
    return out


@functools.lru_cache(maxsize=4)
def _hash_table(g: int, length: int, seeds: int, size: int) -> Any:
    """h_s(v) for every seed and value as uint8/uint16 (None above 2**24 cells)."""
    import numpy as np

    from ldp_core.olh import _seed_matrix

    if seeds * size > 1 << 24:
        return None
    powers = g ** np.arange(length - 1, -1, -1, dtype=np.int64)
    digits = (np.arange(size, dtype=np.int64)[:, None] // powers[None, :]) % g
    dtype = np.uint8 if g < 256 else np.uint16
    table = ((_seed_matrix(g, length) @ digits.T) % g).astype(dtype)
    table.flags.writeable = False
    return table


def _mean(m: Mechanism, values: npt.NDArray[Any], trials: int, rng: Any) -> npt.NDArray[np.int64]:
    import numpy as np

    lo, hi = m.lo, m.hi  # type: ignore[attr-defined]
    x = values.astype(np.float64)
    if len(x) and (not np.all(np.isfinite(x)) or x.min() < lo or x.max() > hi):
        raise ValueError(f"true values must lie in [{lo}, {hi}]")
    p, q = (float(v) for v in m.channel)
    distinct, counts = np.unique(x, return_counts=True)
    prob = q + (distinct - lo) / (hi - lo) * (p - q)
    ones = np.zeros(trials, dtype=np.int64)
    for start in range(0, len(distinct), 4096):
        block = slice(start, start + 4096)
        ones += rng.binomial(counts[block], prob[block], size=(trials, len(prob[block]))).sum(
            axis=1
        )
    out = np.empty((trials, 2), dtype=np.int64)
    out[:, 1] = ones
    out[:, 0] = len(x) - ones
    return out
