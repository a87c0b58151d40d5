"""Discovery for ``prefix_olh``: the heavy strings from the counters alone (server, numpy).

Level by level, the candidates are the survivors of the previous level
extended by every symbol string of the gap (an ended prefix only by end
marks); their support counts come from the counters, never from the reports
(``extension_counts``).  The best survivors above a floor go on; the last
level keeps the candidates whose support count reaches the Bonferroni cut of
its exact null law (``prefix_null.count_cut``: a string no device holds is
listed with probability <= FALSE_DISCOVERIES / N, N the last level's
candidates, so <= FALSE_DISCOVERIES false discoveries are expected per run
over a uniform hash family), and each string's estimate pools every level
that sees it whole (``pooled``; the pool selects nothing).  The answer states what it
could not see: the detection threshold (``threshold``).

>>> import numpy as np
>>> from ldp_core.mechanisms.prefix import PrefixOLH
>>> m = PrefixOLH(epsilon=4.0)
>>> codes = np.array([m.check_value(s) for s in ("hello", "ab")])
>>> tallies = m.simulate_counts(codes, np.array([6000, 4000]), np.random.default_rng(0))
>>> sorted(f.value for f in discover(m, tallies).found if f.confident)
['ab', 'hello']
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from ldp_core.mechanisms.prefix_null import count_cut
from ldp_core.mechanisms.prefix_selection import selective_interval

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ldp_core.mechanisms.prefix import PrefixOLH

__all__ = ["Discovered", "Discovery", "discover", "extension_counts", "extensions"]

#: Survivors carried from each level to the next (the cost of the next level): the
#: 2-symbol level, a sample of a sixth of the reports, loses a rank-20 prefix among
#: its 703 candidates when it keeps 48 (18 of 35 misses in tests/bench runs).
SURVIVORS: tuple[int, ...] = (96, 48)
#: A survivor must be this many null standard deviations above zero.
SURVIVOR_FLOOR = 1.0
#: Expected false discoveries (listed strings no device holds) per answer: Bonferroni
#: over the last level's candidates, each at its support count's exact null tail.
FALSE_DISCOVERIES = 0.05
#: An extension this many null standard deviations up is taken out of its parent's mass.
Z_SURE = 4.0
#: Survivors whose counts are gathered at once (bounds the working memory).
CHUNK = 16


@dataclass(frozen=True)
class Discovered:
    """One discovered string: its estimated share of the reports and interval."""

    value: str
    estimate: float
    stderr: float
    ci_low: float
    ci_high: float
    count: float
    #: Its last-level count reached the cut (expected false discoveries per answer
    #: <= FALSE_DISCOVERIES); else one of the ``top`` best candidates asked for.
    confident: bool


@dataclass(frozen=True)
class Discovery:
    """What ``discover`` found, and what it could not see.

    ``threshold`` is the detection threshold: the smallest share of the reports
    a string (with prefixes no more common than itself) needs to be found with
    probability ``power`` at this n and eps; ``threshold * n`` in reports.
    """

    found: tuple[Discovered, ...]
    n: int
    threshold: float
    power: float
    confidence: float
    level_reports: tuple[int, ...]
    candidates: tuple[int, ...]


@functools.lru_cache(maxsize=16)
def _plan(level: int, seeds: int, prev: int, cut: int, g: int) -> tuple[Any, ...]:
    """The seeds of a level grouped by the direction of their tail a''_s = lam_s d_s
    (d_s with a leading 1; a zero tail is its own group, d = 0, lam = 1).

    Returns, per seed: its group, and (a'_s / lam_s mod g) (S, prev); and the
    direction of each group (D, cut - prev).
    """
    import numpy as np

    from ldp_core.mechanisms.prefix_hash import seed_vectors

    table = seed_vectors(level, seeds, cut, g)
    tail = table[:, prev:]
    nonzero = tail != 0
    lead = np.where(nonzero.any(axis=1), tail[np.arange(seeds), nonzero.argmax(axis=1)], 1)
    inverse = np.array([0, *(pow(x, g - 2, g) for x in range(1, g))], dtype=np.int64)
    dirs = (tail * inverse[lead][:, None]) % g
    keys = dirs @ (g ** np.arange(cut - prev, dtype=np.int64))
    _, first, group = np.unique(keys, return_index=True, return_inverse=True)
    head = (table[:, :prev] * inverse[lead][:, None]) % g
    return group.ravel(), inverse[lead], head, dirs[first]


def extension_counts(
    m: PrefixOLH,
    level: int,
    table: npt.NDArray[np.int64],
    survivors: npt.NDArray[np.int64],
    extensions: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """C(P + e) = sum_s T[s, h_s(P + e)] for every survivor P and extension e, (P, E).

    With a_s = (a'_s, lam_s d_s) (d a direction) and the seeds grouped by d,
    C(P + e) = sum_d W_P[d, <d, e>] where W_P[d, z] adds the counter T[s, y]
    of every seed of d at z = (y - <a'_s, P>) / lam_s.  W_P is built from the
    nonzero counters only (a sparse table at small n: one pass over them per
    survivor), then read at the D x E points <d, e>: O(nnz + D E) per
    survivor, whatever n, exact.
    """
    import numpy as np

    g, prev = m.g, (0, *m.cuts)[level]
    group, inv_lam, head, dirs = _plan(level, m.seeds, prev, m.cuts[level], g)
    span = len(dirs) * 2 * g  # W_P with z in [0, 2g): no modulo per survivor
    at = (np.arange(len(dirs)) * g)[:, None] + (dirs @ extensions.T) % g  # (D, E)
    rows, cols = np.nonzero(table)  # row-major: the nonzero counters seed by seed
    weights = table[rows, cols].astype(np.float64)
    slot = (group[rows] * 2 * g + (inv_lam[rows] * cols) % g + g).astype(np.int32)
    seeds_at = rows.astype(np.intp)
    powers = m.alphabet.base ** np.arange(prev, dtype=np.int64)
    digits = (survivors[:, None] // powers[None, :]) % m.alphabet.base
    shift = ((digits @ head.T) % g).astype(np.int32)  # <a'_s, P> / lam_s, (P, S)
    out = np.empty((len(survivors), len(extensions)), dtype=np.int64)
    double = np.empty((CHUNK, span), dtype=np.float64)
    for first in range(0, len(survivors), CHUNK):
        size = min(CHUNK, len(survivors) - first)
        for i in range(size):  # one pass over the nonzero counters per survivor
            double[i] = np.bincount(slot - shift[first + i][seeds_at], weights, span)
        halves = double[:size].reshape(size, len(dirs), 2, g)
        folded = (halves[:, :, 0] + halves[:, :, 1]).reshape(size, -1)
        out[first : first + size] = np.rint(folded[:, at].sum(axis=1))
    return out


def extensions(m: PrefixOLH, level: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(symbols, code offset) of every extension in [0, B)^gap with no symbol after an
    end mark, the all-end one first."""
    import numpy as np

    base = m.alphabet.base
    prev, cut = (0, *m.cuts)[level], m.cuts[level]
    grid = np.indices((base,) * (cut - prev)).reshape(cut - prev, -1).T[:, ::-1]
    ended = np.cumsum(grid == 0, axis=1) > 0
    grid = np.ascontiguousarray(grid[~np.any(ended & (grid != 0), axis=1)])
    return grid, grid @ (base ** np.arange(prev, cut, dtype=np.int64))


def discover(
    m: PrefixOLH,
    tallies: Any,
    confidence: float = 0.95,
    power: float = 0.95,
    survivors: int | tuple[int, ...] = SURVIVORS,
    top: int = 0,
    epochs: int = 1,
) -> Discovery:
    """The strings above the detection cut (``confident``), at least the ``top`` best
    candidates, each with its share, interval; and the detection threshold.

    ``epochs``: how many epochs with data the tallies sum; a memoised form's reports
    of one device are correlated across them (``support_variance``)."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive number of epochs, got {epochs!r}")
    import numpy as np

    table = np.asarray(tallies, dtype=np.int64)
    if table.shape != (m.num_counters,):
        raise ValueError(f"tally vector has shape {table.shape}, need ({m.num_counters},)")
    blocks = table.reshape(len(m.cuts), m.seeds, m.g)
    level_n = tuple(int(x) for x in blocks.sum(axis=(1, 2)))
    n = sum(level_n)
    kept = np.zeros(1, dtype=np.int64)
    kept_score = np.zeros(1)  # the survivors' chained scores (shares) and variances
    kept_var = np.full(1, np.inf)
    cuts: list[float] = []  # the score a prefix needed to go on, per level
    squares: list[float] = []  # the sum of c^2 of the level's values, estimated
    candidates: list[int] = []
    p, q, _ = m.variance_terms()
    for level, prev in enumerate((0, *m.cuts[:-1])):
        nl = level_n[level]
        if nl == 0 or len(kept) == 0:
            return Discovery((), n, 1.0, power, confidence, level_n, tuple(candidates))
        grid, offset = extensions(m, level)
        counts = extension_counts(m, level, blocks[level], kept, grid)
        live = np.ones(counts.shape, dtype=bool)
        if prev:  # an ended prefix extends by end marks only (offset 0 comes first)
            live[kept // m.alphabet.base ** (prev - 1) == 0, 1:] = False
        share = (counts - nl * q) / (p - q) / nl  # (survivors, extensions)
        limit = (
            survivors if isinstance(survivors, int) else survivors[min(level, len(survivors) - 1)]
        )
        best = top_values(np.clip(share[live], 0, None), limit) * nl
        # Values outside the top each hold at most the last top count, so their
        # squares sum to at most (n_l - top mass) * that count.
        squares.append(float((best**2).sum() + max(nl - best.sum(), 0) * best[-1]))
        sd_null = m.count_sd(0.0, nl, squares[-1], epochs)
        var = (sd_null / nl) ** 2
        score, score_var = chain(share, live, var, kept_score, kept_var)
        codes = (kept[:, None] + offset[None, :])[live]
        est, score, score_var = share[live] * nl, score[live], score_var[live]
        candidates.append(len(codes))
        if level < len(m.cuts) - 1:
            order = top_order(score, limit)
            order = order[score[order] > SURVIVOR_FLOOR * np.sqrt(score_var[order])]
            kept, kept_score, kept_var = codes[order], score[order], score_var[order]
            cuts.append(float(score[order[-1]]) if len(order) else 1.0)
    # The least support count a candidate no device holds reaches with probability
    # <= FALSE_DISCOVERIES / (candidates tested), from its exact null law (prefix_null).
    least = count_cut(blocks[level], FALSE_DISCOVERIES / max(len(est), 1))
    cut = (least - 0.5 - nl * q) / (p - q) / nl  # share: est > cut * nl iff count >= least
    cuts.append(cut)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    shortlist = top_order(score, max(3 * top, 60, int((est > cut * nl).sum())))
    merged = pooled(m, blocks, level_n, squares, codes[shortlist], est[shortlist] / nl, epochs)
    found = []
    for rank, k in enumerate(np.argsort(-merged[:, 0], kind="stable")):
        confident = bool(est[shortlist[k]] > cut * nl)
        if not confident and rank >= top:
            continue
        value, se, weight, sd_last = (float(x) for x in merged[k])
        if confident:  # listed because its last-level estimate cleared the cut
            rest = math.sqrt(max(se**2 - (weight * sd_last) ** 2, 0.0))
            low, high = selective_interval(value, weight, sd_last, rest, cut, confidence)
        else:
            low, high = value - z * se, value + z * se
        found.append(
            Discovered(m.text(int(codes[shortlist[k]])), value, se, low, high, value * n, confident)
        )
    return Discovery(
        tuple(found),
        n,
        threshold(m, level_n, cuts, squares, power, epochs),
        power,
        confidence,
        level_n,
        tuple(candidates),
    )


def top_order(values: Any, k: int) -> npt.NDArray[np.intp]:
    """The indices of the ``k`` largest values, largest first (O(n + k log k))."""
    import numpy as np

    if k < len(values):
        part = np.argpartition(-values, k - 1)[:k]
        return part[np.argsort(-values[part], kind="stable")]
    return np.argsort(-values, kind="stable")


def top_values(values: Any, k: int) -> npt.NDArray[np.float64]:
    """The ``k`` largest values, largest first."""
    return values[top_order(values, k)]  # type: ignore[no-any-return]


def chain(
    share: Any, live: Any, var: float, parent: Any, parent_var: Any
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Each candidate's score: its own estimate, lowered when its parent cannot hold it.

    A prefix's mass bounds the mass of each extension: f(P + e) <= M(P) - the
    mass of P's other extensions.  The parent's score estimates M(P); minus the
    extensions already sure (above Z_SURE standard deviations) it is the room
    ``rest`` left for this one.  The score is the inverse-variance pool of the
    candidate's estimate and ``rest`` when that is lower, else its estimate:
    a noise candidate under a light prefix sinks, a real one keeps (about) its
    estimate.  Returns (score, variance of the pool); the first level has no
    parent (``parent_var`` inf).

    >>> import numpy as np
    >>> own = np.array([[0.05, 0.03]])  # two extensions of one prefix of mass ~0.05
    >>> score, _ = chain(own, own > -1, 1e-4, np.array([0.05]), np.array([1e-4]))
    >>> [round(float(x), 3) for x in score[0]]  # the sure 0.05 keeps, 0.03 falls
    [0.05, 0.02]
    """
    import numpy as np

    sure = live & (share > Z_SURE * math.sqrt(var))
    taken = np.where(sure, share, 0.0)
    rest = parent[:, None] - taken.sum(axis=1, keepdims=True) + taken
    rest_var = parent_var[:, None] + var * (sure.sum(axis=1, keepdims=True) - sure)
    weight = np.where(np.isfinite(rest_var), 1 / rest_var, 0.0)
    total = 1 / var + weight
    return np.minimum(share, (share / var + rest * weight) / total), 1 / total


def pooled(
    m: PrefixOLH,
    blocks: Any,
    level_n: tuple[int, ...],
    squares: list[float],
    codes: Any,
    shares: Any,
    epochs: int = 1,
) -> npt.NDArray[np.float64]:
    """(share, stderr, w, sd) of each string, pooled over every level that sees it whole
    (w: the last level's weight in the pool, sd: that level's own stderr).

    A string shorter than a level's cut is its own prefix there (an end mark
    follows it), so that level's reports, a disjoint random sample, estimate
    it too.  Inverse-variance weights w_l (variances at the last level's share
    f) and, the levels partitioning the n reports,
    Var = sum_l w_l^2 (v_l + k f(1-f)/n_l) - k f(1-f)/n  (v_l the channel's),
    k = ``m.level_cluster(epochs)``: the reports of one device that share a level
    (a memoised device keeps its level, so its reports are sampled together).
    """
    import numpy as np

    n = sum(level_n)
    p, q, _ = m.variance_terms()
    cluster = m.level_cluster(epochs)
    base = m.alphabet.base
    lengths = ((codes[:, None] // base ** np.arange(m.alphabet.max_length)) % base != 0).sum(1)
    last = len(m.cuts) - 1
    f = np.clip(np.asarray(shares, dtype=np.float64), 0.0, 1.0)
    estimates, channel, sampling, seen = [], [], [], []
    for level, cut in enumerate(m.cuts):
        nl = max(level_n[level], 1)
        sees = (lengths < cut) | (level == last)
        if level == last:
            estimates.append(np.asarray(shares, dtype=np.float64))
        else:
            support = m.support(level, blocks[level], codes)
            estimates.append((support - nl * q) / (p - q) / nl)
        c = f * nl
        var = m.support_variance(c, nl, squares[level], epochs)
        channel.append(np.maximum(var, 0.0) / (p - q) ** 2 / nl**2)
        sampling.append(cluster * f * (1 - f) / nl)
        seen.append(sees & (level_n[level] > 0))
    v, s2, e = np.array(channel), np.array(sampling), np.array(estimates)
    weights = np.where(np.array(seen), 1 / np.maximum(v + s2, 1e-300), 0.0)
    weights /= weights.sum(axis=0)
    chan = (weights**2 * v).sum(axis=0)
    var = (weights**2 * (v + s2)).sum(axis=0) - cluster * f * (1 - f) / n
    merged = (weights * e).sum(axis=0)
    # The last level's own sd (its sampling net of the target's), for the selection.
    own = np.maximum(v[-1] + s2[-1] - cluster * f * (1 - f) / n, v[-1])
    return np.stack([merged, np.sqrt(np.maximum(var, chan)), weights[-1], np.sqrt(own)], axis=1)


def threshold(
    m: PrefixOLH,
    level_n: tuple[int, ...],
    cuts: list[float],
    squares: list[float],
    power: float,
    epochs: int = 1,
) -> float:
    """Least share f found with probability >= power (normal approximation): at every
    level the score of a prefix of share f clears that level's cut.  Between the
    first and the last level the score is the lower of the prefix's estimate and
    its pool with the parent's (``chain``): P[both clear] >= P[one] + P[other] - 1,
    with the parent's variance that of its own level alone (a larger one than its
    pooled score has), so the threshold errs high."""
    normal = NormalDist()
    last = len(cuts) - 1

    def found(f: float) -> float:
        prob, parent = 1.0, math.inf
        for level, (nl, cut, sq) in enumerate(zip(level_n, cuts, squares, strict=True)):
            var = (m.count_sd(f * nl, nl, sq, epochs) / nl) ** 2
            own = normal.cdf((f - cut) / math.sqrt(var)) if var > 0 else float(f > cut)
            if 0 < level < last and var > 0:
                pool = 1 / math.sqrt(1 / var + 1 / parent)
                own = max(own + normal.cdf((f - cut) / pool) - 1, 0.0)
            prob *= own
            parent = var
        return prob

    lo, hi = 0.0, 1.0
    if found(hi) < power:
        return 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if found(mid) < power else (lo, mid)
    return hi if math.isfinite(hi) else 1.0
