"""Quantile intervals by inverting the I-projection test of the monotone CDF (issue 15).

The served bootstrap (``aggregator.quantiles``) tests F(x) = q at every search
point x with one band, the error law of the monotone unbiased CDF under the
bootstrap population G (the served shape).  Near p99 that error depends on the
CDF's *level* at x (the clip at 1 and the flat tail beyond), and G's level there
is off the truth's by about the error's own spread, so G's band is often the
band of another level: the three cells that under-covered (docs/numeric.md,
"Issue 15").  Here the test at x resamples under its own null instead
(measured on the same 400 tallies per cell: Beta p99 at eps 1 0.932, G's band
0.902; Beta p90 at eps 0.5 0.917, 0.897; bimodal p99 at eps 1 0.925, 0.920; at
1.3, 1.8 and 1.3 times G's width; p50 unchanged: docs/numeric.md):

1. The null population at search point j: the distribution nearest G in KL
   (its I-projection) whose CDF at x_j is q, i.e. G's mass below x_j scaled to
   q and above to 1 - q (``projected``).  It keeps G's shape on each side.
2. Its replicates: the null's CDF plus the bootstrap replicates' channel noise
   (the unbiased CDF less G's own, before the monotone step; ``CdfBootstrap.noise``),
   which hardly depends on the population (its se is the same for G, the truth
   and the tallies' own estimate to 4 digits, docs/numeric.md), so no tally is
   drawn again; then the monotone step.
3. Accept F(x_j) = q when F_hat(x_j) - q lies between the a/2 and 1 - a/2
   quantiles of those replicates' value at x_j less q (``ProjectionTest.band``).

The interval is found by bisection: its low end is where g_lo(j) = F_hat(x_j)
- q - e_lo(j) turns >= 0, its high end where g_hi(j) = F_hat(x_j) - q - e_hi(j)
turns > 0, each searched from the end of G's interval (``CdfBootstrap.interval``)
by doubling steps and then halving, linear between the two points that bracket
it (as G's interval reads F_hat - e).  When g_lo and g_hi are monotone in j this
is the whole acceptance set, an interval.  They need not be (the band moves with
the null at each point), and on real tallies the acceptance set sometimes has
gaps, with accepted points beyond these ends (far into the flat tail near the
range's top: docs/numeric.md counts them); the served ends are then a turn of
the test inside the bracket that the doubling steps found (not necessarily the
nearest to G's ends), and not the hull of every accepted point.
``acceptance`` evaluates every point, for tests and the benchmark to check.

Cost.  Column j of the monotone step is the mean of the running max from the
left and the running min from the right *at j*: the max of the clipped
replicates over the points up to j and their min over the points from j
(``monotone_column``, exact: it reads every point, as the monotone step
depends on all of them, but builds no running arrays).  So one test is one
pass over the (R, P) noise; a bisection takes about 2 log2(distance moved) + 2
tests per end: 4-14 per quantile on average at n = 10^5 (the most at p99, eps
<= 1; ``bench_distribution.py --coverage`` counts them, ``--cost`` times them).

>>> own = np.array([0.0, 0.2, 0.5, 0.8, 1.0])
>>> projected(own, 2, 0.9).round(3).tolist()   # 0.5 at x_2 becomes 0.9: below x 1.8
[0.0, 0.36, 0.9, 0.96, 1.0]
>>> from aggregator.quantiles import monotone
>>> c = np.array([[0.1, 0.4, 0.3, 1.2]])
>>> monotone_column(c, 1).tolist(), monotone(c)[:, 1].tolist()
([0.35], [0.35])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from aggregator.quantiles import CdfBootstrap, Floats, error_band

__all__ = [
    "ProjectionTest",
    "acceptance",
    "first_true",
    "monotone_column",
    "projected",
    "projection_centre",
    "projection_interval",
]


def projected(own: Floats, j: int, q: float) -> Floats:
    """The CDF nearest ``own`` (at the search points) in KL whose value at point j is q:
    the mass below x_j scaled to q and the mass above to 1 - q.  With no mass below
    (above) x_j to scale, q (1 - q) sits at the first (last) point.

    >>> projected(np.array([0.0, 0.0, 0.5, 1.0]), 1, 0.2).tolist()
    [0.2, 0.2, 0.6, 1.0]
    >>> projected(np.array([0.0, 0.5, 1.0, 1.0]), 2, 0.8).tolist()
    [0.0, 0.4, 0.8, 1.0]
    """
    a = float(own[j])
    points = np.arange(len(own))
    below = own * (q / a) if a > 0 else np.full_like(own, q)
    if a < 1:
        above = 1 - (1 - own) * ((1 - q) / (1 - a))
    else:
        above = np.where(points == len(own) - 1, 1.0, q)
    out: Floats = np.where(points <= j, below, above)
    return out


def monotone_column(c: Floats, j: int) -> Floats:
    """Column j of ``monotone(c)`` for c (R, P), without the other columns: the max of
    the clipped values over points 0..j and their min over points j..P-1, averaged.

    >>> from aggregator.quantiles import monotone
    >>> c = np.random.default_rng(0).normal(0.5, 0.3, size=(4, 9))
    >>> bool(np.allclose(monotone_column(c, 3), monotone(c)[:, 3]))
    True
    """
    clipped = np.clip(c, 0.0, 1.0)
    out: Floats = (clipped[:, : j + 1].max(axis=1) + clipped[:, j:].min(axis=1)) / 2
    return out


def first_true(test: Callable[[int], bool], start: int, size: int) -> int:
    """The least j in [0, size) with ``test(j)`` true, for a test false then true along j,
    searched from ``start``: steps of 1, 2, 4, ... away from it until the test changes,
    then halving.  ``size`` when it is never true.

    >>> seen = []
    >>> first_true(lambda j: seen.append(j) or j >= 37, 30, 100), len(seen)
    (37, 6)
    >>> first_true(lambda j: j >= 0, 5, 10), first_true(lambda j: False, 5, 10)
    (0, 10)
    """
    if test(start):
        good, step = start, 1
        while good > 0:
            j = max(good - step, 0)
            if not test(j):
                bad = j
                break
            good, step = j, 2 * step
        else:
            return 0
    else:
        bad, step = start, 1
        while bad < size - 1:
            j = min(bad + step, size - 1)
            if test(j):
                good = j
                break
            bad, step = j, 2 * step
        else:
            return size
    while good - bad > 1:
        mid = (good + bad) // 2
        if test(mid):
            good = mid
        else:
            bad = mid
    return good


@dataclass(frozen=True)
class ProjectionTest:
    """The test of F(x_j) = q at each search point j with the I-projection null, its
    bands computed once per point asked (``tests`` counts them)."""

    boot: CdfBootstrap
    q: float
    confidence: float
    _bands: dict[int, Floats] = field(default_factory=dict, repr=False, compare=False)
    _medians: dict[int, float] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.boot.noise is None:
            raise ValueError("the I-projection test needs the bootstrap's channel noise, got None")

    @property
    def tests(self) -> int:
        return len(self._bands)

    def band(self, j: int) -> Floats:
        """(2,): the a/2 and 1 - a/2 quantiles of the null's monotone CDF at x_j less q."""
        if j not in self._bands:
            assert self.boot.noise is not None
            null = projected(self.boot.own, j, self.q) + self.boot.noise
            error = monotone_column(null, j) - self.q
            self._bands[j] = error_band(error, self.confidence)
            self._medians[j] = float(np.median(error))
        return self._bands[j]

    def centre(self, j: int) -> float:
        """g_mid(j) = F_hat(x_j) - q - the null's median error at x_j: where it turns >= 0
        is the point every interval of this test is built around (its level 0)."""
        self.band(j)
        return float(self.boot.observed[j] - self.q - self._medians[j])

    def below(self, j: int) -> float:
        """g_lo(j) = F_hat(x_j) - q - e_lo(j): < 0 rejects F(x_j) = q as too high a q."""
        return float(self.boot.observed[j] - self.q - self.band(j)[0])

    def above(self, j: int) -> float:
        """g_hi(j) = F_hat(x_j) - q - e_hi(j): > 0 rejects F(x_j) = q as too low a q."""
        return float(self.boot.observed[j] - self.q - self.band(j)[1])


def _between(x: Floats, g: Callable[[int], float], j: int) -> float:
    """Where g crosses 0 between points j - 1 and j, linearly (x[0], x[-1] beyond)."""
    if j <= 0:
        return float(x[0])
    if j >= len(x):
        return float(x[-1])
    g0, g1 = g(j - 1), g(j)
    t = float(np.clip(g0 / (g0 - g1), 0.0, 1.0)) if g0 != g1 else 1.0
    return float(x[j - 1] + t * (x[j] - x[j - 1]))


def projection_interval(test: ProjectionTest, start: tuple[float, float]) -> tuple[float, float]:
    """(ci_low, ci_high): where ``test`` turns from rejecting to accepting on each side,
    by bisection from the points nearest ``start`` (G's interval's ends; the module
    docstring says when this is the acceptance set's hull).  Should the two ends cross
    (F_hat jumps over the whole band between two points), the interval spans both.

    >>> x = np.linspace(0.0, 1.0, 101)      # G is the truth, the noise a shift of +-0.1
    >>> b = CdfBootstrap(x, x, x, x, np.linspace(-0.1, 0.1, 201)[:, None] + 0 * x)
    >>> [round(v, 3) for v in projection_interval(ProjectionTest(b, 0.5, 0.9), (0.3, 0.7))]
    [0.41, 0.59]
    """
    x = test.boot.x
    size = len(x)
    low_at, high_at = (min(int(np.searchsorted(x, s)), size - 1) for s in start)
    low = _between(x, test.below, first_true(lambda j: test.below(j) >= 0, low_at, size))
    high = _between(x, test.above, first_true(lambda j: test.above(j) > 0, high_at, size))
    return min(low, high), max(low, high)


def projection_centre(test: ProjectionTest, interval: tuple[float, float]) -> float:
    """The served quantile: where F_hat(x) - q crosses the null's median error (the test
    at level 0), searched from the middle of ``interval`` and kept inside it.  At the
    true quantile that error is centred, so the point is median-unbiased as far as the
    null is right, and it lies in every interval the test gives.

    >>> x = np.linspace(0.0, 1.0, 101)
    >>> b = CdfBootstrap(x, x, x, x, np.linspace(-0.1, 0.1, 201)[:, None] + 0 * x)
    >>> round(projection_centre(ProjectionTest(b, 0.5, 0.9), (0.41, 0.59)), 3)
    0.5
    """
    x = test.boot.x
    size = len(x)
    start = min(int(np.searchsorted(x, (interval[0] + interval[1]) / 2)), size - 1)
    point = _between(x, test.centre, first_true(lambda j: test.centre(j) >= 0, start, size))
    return float(np.clip(point, interval[0], interval[1]))


def acceptance(test: ProjectionTest) -> npt.NDArray[np.bool_]:
    """(P,): where the test accepts F(x_j) = q, at every search point (P tests: for
    checking the bisection, not for serving)."""
    return np.array([test.below(j) >= 0 and test.above(j) <= 0 for j in range(len(test.boot.x))])
