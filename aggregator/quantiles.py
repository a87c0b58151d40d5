"""Quantile intervals by a parametric bootstrap through the exact channel.

A quantile is read from the unbiased CDF of a grid channel's tallies
(``aggregator.distribution``: F_hat(x) = share @ w_x at the search points,
made monotone, clipped to [0, 1]).  That estimator has no closed-form
variance, and a normal interval on F_hat mapped through it (Woodruff's)
measured 3 of 18 figures inside 93-97%: the monotone version averages out part
of the noise that se(F_hat) counts (over-cover), and at p99 the clipping and the
flat tail skew it (under-cover).  The bootstrap measures the estimator as it is:

1. G: the served shape (EMS masses for Square Wave), the grid law nearest the
   tallies that is a distribution.
2. A population of n people with that law, fixed: n_j = round(n G_j) people on
   grid point j (largest remainders).  The interval is about the reporting
   population's own quantile, so, as for the range shares' variance, the spread
   *between* people is not noise here (drawing the n people anew, i.e.
   Multinomial(n, G T), would add it and over-cover where the channel is
   precise).
3. ``replicates`` tallies of that population: grid point j's n_j reports are
   Multinomial(n_j, T_j), row j of the exact channel (``population_tallies``).
4. The same estimator on each: the monotone unbiased CDF F*_r at every search
   point x, whose target there is F_G(x), the population's own CDF.
5. G's interval inverts a basic (reverse-percentile) bootstrap test on the CDF
   scale: with e_lo(x), e_hi(x) the a/2 and 1 - a/2 quantiles of the error
   F*(x) - F_G(x) over the replicates, the q-quantile's interval is the set
   of x where F(x) = q is not rejected, F_hat(x) - e_hi(x) <= q <= F_hat(x) -
   e_lo(x) (``CdfBootstrap.interval``).
6. The served interval tests F(x) = q at each x under its own null instead of
   G: the I-projection of G onto F(x) = q, carrying these replicates' channel
   noise before the monotone step (``CdfBootstrap.noise``), searched by
   bisection from G's interval's ends (``aggregator.projection``: why, and
   the cost).  The value served in it is that test's centre, where F_hat less
   the null's median error reaches q (``projection_centre``), and its stderr
   the interval's half-width over z when the interval is nearly symmetric, else
   none (``DistributionEstimate.quantile_intervals``, issue 40).

Why the CDF scale and not the quantile scale.  The basic interval needs a
pivot whose law hardly depends on the unknown distribution.  The error of
the unbiased CDF at a point is mostly channel noise (the same for any
population at a given n) plus the monotone step's bias, which the replicates
carry; the error of the quantile is that CDF error divided by the density at
the quantile, which the smoothed G gets wrong exactly where it matters (near
zero in the tail at p99).  Measured on the benchmark's populations
(``--coverage``, the same replicates, 400 tallies per figure at n = 10^5): the
quantile-scale basic interval covered p99 0.47-0.70 at eps <= 1 and the
percentile interval [Q*(a/2), Q*(1 - a/2)] of the replicates' quantiles
0.00-0.01 on Beta(2, 5) (it is centred on G's quantile plus the estimator's
bias), where the CDF-scale interval covered 0.915-0.958 (docs/numeric.md for the full
table).  With G's band it under-covered in 3 of 18 cells (G's level near the
quantile is off the truth's), which step 6 addresses, in part (docs/numeric.md).
The stderr served is the sd of the replicates' quantiles, which describes the
served value (the test's centre; issue 40: the shape's quantile served before
was 0.46-0.69 as variable), and none when those quantiles are skewed: at p99,
eps 1, G's smooth tail makes it 2-5 times too small (docs/numeric.md).

Cost is bounded: no EM is re-run (the estimator is linear in the tallies and
then monotone), one (R x M) @ (M x P) product, R = ``replicates`` <=
``MAX_REPLICATES``, and about (k + 1)(L + 1) binomial draws per replicate; then
per quantile a bisection of tests, each one pass over the (R, P) noise.  The
draws come from numpy's PCG64 seeded from the tallies (``tally_seed``): the
same tallies give the same interval.  This is server-side simulation, not a
device's randomisation, so it does not use the OS CSPRNG.

>>> import numpy as np
>>> x = np.linspace(0.0, 1.0, 5)
>>> f = np.array([[0.0, 0.3, 0.2, 0.9, 1.0]])      # an unbiased CDF, not monotone
>>> monotone(f).tolist()
[[0.0, 0.25, 0.25, 0.9, 1.0]]
>>> read_quantiles(x, f, (0.5,)).round(4).tolist()  # 0.5 + 0.25 (0.5 - 0.25) / 0.65
[[0.5962]]
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_REPLICATES",
    "MAX_REPLICATES",
    "MIN_REPLICATES",
    "MIN_TAIL",
    "Bootstrap",
    "CdfBootstrap",
    "bootstrap_cdf",
    "error_band",
    "fixed_population",
    "monotone",
    "population_tallies",
    "read_quantiles",
    "tally_seed",
]

Floats = npt.NDArray[np.float64]
#: Bootstrap tallies per estimate unless asked (docs/numeric.md).
DEFAULT_REPLICATES = 1000
#: Fewer leave the 2.5% tail of a 95% interval with a handful of replicates.
MIN_REPLICATES = 200
#: The fewest replicates beyond each end of an interval read empirically (``bands``).
MIN_TAIL = 10
#: The cap on the work of one estimate (about 0.1 s per 1,000 at k = 64).
MAX_REPLICATES = 10_000


@dataclass(frozen=True)
class Bootstrap:
    """The bootstrap's cost and seed: ``replicates`` tallies, numpy seed (None: from the
    tallies).

    >>> Bootstrap().replicates
    1000
    >>> Bootstrap(replicates=50)
    Traceback (most recent call last):
    ...
    ValueError: replicates must be an integer in [200, 10000], got 50
    """

    replicates: int = DEFAULT_REPLICATES
    seed: int | None = None

    def __post_init__(self) -> None:
        r = self.replicates
        if (
            isinstance(r, bool)
            or not isinstance(r, int)
            or not (MIN_REPLICATES <= r <= MAX_REPLICATES)
        ):
            raise ValueError(
                f"replicates must be an integer in [{MIN_REPLICATES}, {MAX_REPLICATES}], got {r!r}"
            )
        s = self.seed
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 0):
            raise ValueError(f"seed must be None or an integer >= 0, got {s!r}")


#: The served plan: ``DEFAULT_REPLICATES`` tallies, seeded from the tallies.
DEFAULT_BOOTSTRAP = Bootstrap()


def tally_seed(counts: npt.ArrayLike) -> int:
    """A seed that is a function of the tallies alone (same tallies, same interval).

    >>> tally_seed([3, 1, 4]) == tally_seed(np.array([3.0, 1.0, 4.0]))
    True
    """
    data = np.rint(np.asarray(counts, dtype=np.float64)).astype(np.int64).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def monotone(f: Floats) -> Floats:
    """A non-decreasing version of CDF values in [0, 1] along the last axis: the mean of
    the running max from the left and the running min from the right, after clipping.

    >>> monotone(np.array([0.1, 0.4, 0.3, 1.2])).round(3).tolist()
    [0.1, 0.35, 0.35, 1.0]
    """
    c = np.clip(f, 0.0, 1.0)
    left = np.maximum.accumulate(c, axis=-1)
    right = np.flip(np.minimum.accumulate(np.flip(c, axis=-1), axis=-1), axis=-1)
    out: Floats = (left + right) / 2
    return out


def read_quantiles(x: Floats, cdf: Floats, qs: Sequence[float]) -> Floats:
    """(R, Q): where each row of the monotone version of ``cdf`` (R, P) at the points x
    first reaches each q, linear between points (x[0] below, x[-1] never reached)."""
    f = monotone(np.atleast_2d(cdf))
    rows = np.arange(f.shape[0])
    out = np.empty((f.shape[0], len(qs)))
    for i, q in enumerate(qs):
        j = (f < q).sum(axis=1)
        inside = np.clip(j, 1, len(x) - 1)
        below, above = f[rows, inside - 1], f[rows, inside]
        gap = np.where(above > below, above - below, 1.0)
        value = x[inside - 1] + np.clip((q - below) / gap, 0.0, 1.0) * (x[inside] - x[inside - 1])
        out[:, i] = np.where(j == 0, x[0], np.where(j >= len(x), x[-1], value))
    return out


def fixed_population(masses: Floats, n: int) -> npt.NDArray[np.int64]:
    """n people on the grid points in the shares ``masses`` (largest remainders).

    >>> fixed_population(np.array([0.25, 0.35, 0.4]), 10).tolist()
    [3, 3, 4]
    """
    share = np.clip(np.asarray(masses, dtype=np.float64), 0.0, None)
    exact = share / share.sum() * n
    people = np.floor(exact).astype(np.int64)
    short = n - int(people.sum())
    people[np.argsort(-(exact - people), kind="stable")[:short]] += 1
    out: npt.NDArray[np.int64] = people
    return out


def population_tallies(
    transition: Floats, people: npt.NDArray[np.int64], replicates: int, gen: np.random.Generator
) -> npt.NDArray[np.int64]:
    """(replicates, M) tallies of one fixed population: the sum over grid points j of
    Multinomial(n_j, row j), drawn exactly and in fewer binomials.  With b the channel's
    least entry, each row is a mixture: with probability alpha = M b a report is uniform
    over all M cells (the same for every row), else it follows (row - b) / (1 - alpha),
    which for Square Wave is uniform on the L cells of j's window.  So per replicate: u_j ~
    Bin(n_j, alpha) per grid point, one Multinomial(sum u_j, uniform), and for each j a
    Multinomial(n_j - u_j) over its window alone (L + 1 binomials per j, not M).

    >>> t = np.array([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]])
    >>> x = population_tallies(t, np.array([600, 400]), 20_000, np.random.default_rng(0))
    >>> (x.sum(axis=1) == 1000).all(), x.mean(axis=0).round(0).tolist()
    (np.True_, [400.0, 250.0, 350.0])
    """
    rows = transition / transition.sum(axis=1, keepdims=True)
    floor = float(rows.min())
    alpha = min(floor * rows.shape[1], 1.0)
    out = np.zeros((replicates, rows.shape[1]), dtype=np.int64)
    grid = np.flatnonzero(people)
    common = gen.binomial(people[grid], alpha, size=(replicates, len(grid)))
    out += gen.multinomial(common.sum(axis=1), np.full(rows.shape[1], 1 / rows.shape[1]))
    if alpha >= 1.0:
        return out
    for column, j in enumerate(grid):
        rest = rows[j] - floor
        support = np.flatnonzero(rest > 0)
        out[:, support] += gen.multinomial(
            people[j] - common[:, column], rest[support] / rest[support].sum()
        )
    return out


def error_band(errors: Floats, confidence: float) -> Floats:
    """The a/2 and 1 - a/2 quantiles of ``errors`` (R, ...) over its first axis; when
    fewer than ``MIN_TAIL`` of the R would lie beyond a/2, the median -+ z sd instead.

    >>> error_band(np.linspace(-1.0, 1.0, 401), 0.9).round(3).tolist()
    [-0.9, 0.9]
    """
    alpha = 1 - confidence
    if alpha / 2 * len(errors) >= MIN_TAIL:
        out: Floats = np.quantile(errors, [alpha / 2, 1 - alpha / 2], axis=0)
        return out
    median = np.median(errors, axis=0)
    spread = NormalDist().inv_cdf(1 - alpha / 2) * np.std(errors, axis=0, ddof=1)
    return np.stack([median - spread, median + spread])


@dataclass(frozen=True)
class CdfBootstrap:
    """The monotone unbiased CDF at the points ``x``: the observed one (P,), the
    ``replicate`` ones (R, P) of the bootstrap population, and that population's own CDF
    ``own`` (P,), which each replicate estimates; ``noise`` (R, P), when drawn, is the
    replicates' channel noise before the monotone step (unbiased CDF less ``own``),
    which the I-projection test carries to its null populations
    (``aggregator.projection``)."""

    x: Floats
    observed: Floats
    replicate: Floats
    own: Floats
    noise: Floats | None = None

    def bands(self, confidence: float) -> Floats:
        """(2, P): the a/2 and 1 - a/2 quantiles of the CDF error F* - F_G at x.  When
        fewer than ``MIN_TAIL`` replicates would lie beyond a/2 (a confidence that R
        replicates cannot resolve, e.g. 1 - 1e-8), they are the median -+ z sd of the
        error instead: the bootstrap's centre and spread with normal tails.

        >>> x = np.linspace(0.0, 1.0, 3)
        >>> b = CdfBootstrap(x, x, x + np.linspace(-0.1, 0.1, 201)[:, None], x)
        >>> b.bands(0.9)[:, 1].round(3).tolist()   # the empirical 5% and 95%
        [-0.09, 0.09]
        >>> b.bands(0.999)[:, 1].round(3).tolist()  # 0.1 per tail: 3.29 sd (0.058)
        [-0.191, 0.191]
        """
        return error_band(self.replicate - self.own, confidence)

    def interval(self, q: float, bands: Floats) -> tuple[float, float, float]:
        """(stderr, ci_low, ci_high) of the q-quantile.  The interval: the points x where
        F(x) = q is not rejected, i.e. F_hat(x) - q lies between the bootstrap error's
        a/2 and 1 - a/2 quantiles at x: from where F_hat less the former reaches q to
        where F_hat less the latter does (each read as a quantile, monotone and linear
        between points); the stderr: the sd of the replicates' own q-quantiles.

        >>> x = np.linspace(0.0, 1.0, 101)    # a CDF, and replicates up to 0.1 apart
        >>> b = CdfBootstrap(x, x, x + np.linspace(-0.1, 0.1, 201)[:, None], x)
        >>> [round(v, 3) for v in b.interval(0.5, b.bands(0.9))]
        [0.058, 0.41, 0.59]
        """
        low_error, high_error = bands
        # F_hat less the low error is the higher CDF: it reaches q first.
        ci_low, ci_high = read_quantiles(
            self.x, self.observed - np.stack([low_error, high_error]), (q,)
        )[:, 0]
        stderr = float(np.std(read_quantiles(self.x, self.replicate, (q,))[:, 0], ddof=1))
        return stderr, float(ci_low), float(ci_high)


def bootstrap_cdf(
    transition: Floats,
    weights: Floats,
    x: Floats,
    masses: Floats,
    n: int,
    plan: Bootstrap,
    counts: npt.ArrayLike,
    target: str = "reporters",
) -> CdfBootstrap:
    """The bootstrap of the monotone unbiased CDF (share @ ``weights`` at the points x)
    through the exact channel: from a fixed population of n with the law ``masses``
    (``target="reporters"``), or (``"population"``) from n people drawn anew from that
    law each time, Multinomial(n, masses T), whose target is the law's own CDF: the
    spread between people is then part of the error.

    >>> t = np.array([[0.9, 0.05, 0.05], [0.05, 0.05, 0.9]])   # a precise channel
    >>> w = np.linalg.pinv(t) @ np.array([[1.0, 1.0], [0.0, 1.0]])   # F at 2 points
    >>> g, plan = np.array([0.5, 0.5]), Bootstrap(seed=1)
    >>> us = bootstrap_cdf(t, w, np.arange(2.0), g, 400, plan, [150, 100, 150])
    >>> law = bootstrap_cdf(t, w, np.arange(2.0), g, 400, plan, [150, 100, 150], "population")
    >>> round(float(us.noise[:, 0].std()), 3), round(float(law.noise[:, 0].std()), 3)
    (0.015, 0.029)
    >>> round((0.015 ** 2 + 0.5 * 0.5 / 400) ** 0.5, 3)   # + the between-person F (1 - F) / n
    0.029
    """
    share = np.asarray(counts, dtype=np.float64) / n
    gen = np.random.default_rng(tally_seed(counts) if plan.seed is None else plan.seed)
    if target == "population":
        law = np.clip(np.asarray(masses, dtype=np.float64), 0.0, None)
        cells = (law / law.sum()) @ transition
        tallies = gen.multinomial(n, cells / cells.sum(), size=plan.replicates)
        own = (law / law.sum() @ transition) @ weights
    else:
        people = fixed_population(masses, n)
        tallies = population_tallies(transition, people, plan.replicates, gen)
        own = ((people / n) @ transition) @ weights
    raw = tallies / n @ weights
    return CdfBootstrap(x, monotone(share @ weights), monotone(raw), own, raw - own)
