"""A numeric metric's whole distribution from Square Wave tallies: EMS, quantiles, intervals.

The shape is EM with smoothing (EMS, Li et al., SIGMOD 2020) over the exact
channel T (``SquareWave.transition()``: P[cell i | grid point j], k + 1 rows,
M columns).  With C_i reports in cell i and x the distribution of the
(randomly rounded) value on the grid points, one step is

    E-M:    x_j <- x_j * sum_i (C_i / n) T_ji / (x T)_i
    smooth: x <- (1 - s) x + s S x,  (S x)_j = (x_{j-1} + 2 x_j + x_{j+1}) / 4
            (ends: (2 x_0 + x_1) / 3), renormalised

until the log-likelihood sum_i C_i ln (x T)_i gains less than ``TOLERANCE`` per
report.  The smoothing keeps EM from fitting the noise with spikes, and it
biases the shape towards a smoother one.  The paper smooths fully (s = 1) on
a grid of 1024 points; on this grid of 65 the same kernel is 16 times wider in
value, and it flattens a bimodal shape (W1 0.036 against 0.006 at eps = 1).
``SMOOTHING`` s = 1/32 (``aggregator.shape``) was first taken from a sweep on the
benchmark's own two shapes; it is tuning, so it was re-checked on three other
shapes (trimodal, exponential, uniform) and other seeds: over s in {0, 1/64,
1/32, 1/16, 0.1, 0.3}, s = 1/32 has the lowest geometric mean of W1 over each
row's best (1.15; 1/64: 1.17, 1/16: 1.20, s = 0: 1.54; docs/numeric.md).
Per eps on those shapes (20 surveys, new seeds), 1/64 is the better weight at
eps <= 1 (``aggregator.shape.smoothing_for``).

Reading grid masses as a distribution over [lo, hi]: grid point j's mass is
spread evenly over [t_j - h/2, t_j + h/2] (h = (hi - lo)/k, clipped at lo and
hi), so the CDF is piecewise linear through the cumulative masses at the
midpoints (``cdf_knots``).  The random rounding moves a value to a
neighbouring grid point with the probabilities that keep its mean, so this CDF
is the true one smoothed by a kernel of width about h (bias O(h^2) f').

Intervals.  A CDF value or range share is a linear functional of the grid
masses, phi_x . x, and T has full row rank, so with P = ``linear_inverse(T)``
(weighted least squares, T P = I) and w_x = P phi_x

    F_hat(x) = sum_i (C_i / n) w_x,i,    E[F_hat(x)] = x . T w_x = phi_x . x,
    Var[F_hat(x) | the reporting population] = (sum_i pi_i w_x,i^2 - phi_x^2 . x) / n

(pi = x T; the reports are independent, person k's with mean phi_x . e_{j_k}
after the rounding, so the spread *between* people, phi_x^2 . x - F^2, is not
noise about the population's own CDF).  Both terms are estimated without bias
from the same tallies: pi_i by C_i / n, phi_x^2 . x by share @ (P phi_x^2).  A
range share is the difference of two such functionals, with a normal interval.
A quantile's interval inverts a bootstrap test of a monotone version of
F_hat (clipped to [0, 1]), drawn
through the exact channel from a fixed population with the served shape's law
(``aggregator.quantiles``: why the CDF scale, why fixed, the cost bounds), the
test at each x with that population's I-projection onto F(x) = q as its null
(``aggregator.projection``); the
value served is that test's centre (its level 0: where F_hat less the null's median
error reaches q), so the point and its interval are one estimator, and the shape's
own quantile is served beside it as ``smoothed`` (issue 40).  EMS
itself is not bootstrapped: its smoothing bias does not shrink with n while
its spread does, so intervals around it under-cover (docs/numeric.md).  Any grid
channel serves: Square Wave, and the hierarchical histogram that the benchmark
compares (``ldp_core.mechanisms.hierarchical``).

>>> import numpy as np
>>> from ldp_core import mechanism
>>> from ldp_core.simulate import tallies
>>> m = mechanism("square_wave", epsilon=2.0, lo=0.0, hi=100.0)
>>> values = np.random.default_rng(0).beta(2, 5, size=20_000) * 100
>>> t, n = tallies(m, values, seed=1)
>>> d = estimate_distribution(m, t, n)
>>> p50 = d.quantile(0.5)
>>> bool(p50.ci_low < np.median(values) < p50.ci_high)
True
>>> round(float(d.smoothed_shares().sum()), 6)
1.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from aggregator.estimate import check_target
from aggregator.projection import ProjectionTest, projection_centre, projection_interval
from aggregator.quantiles import (
    DEFAULT_BOOTSTRAP,
    Bootstrap,
    CdfBootstrap,
    bootstrap_cdf,
    read_quantiles,
)
from aggregator.shape import (
    ems,
    isotonic_masses,
    smoothing_for,
    wasserstein1,
)
from ldp_core.base import Mechanism
from ldp_core.mechanisms.hierarchical import HierarchicalHistogram, linear_inverse
from ldp_core.mechanisms.square_wave import SquareWave

#: The mechanisms whose tallies give a distribution on a grid of k + 1 points.
GridChannel = SquareWave | HierarchicalHistogram

__all__ = [
    "DEFAULT_QUANTILES",
    "Bootstrap",
    "DistributionEstimate",
    "Interval",
    "cdf_knots",
    "cdf_of_masses",
    "distribution_json",
    "ems",
    "estimate_distribution",
    "isotonic_masses",
    "range_weights",
    "search_weights",
    "unbiased_inverse",
    "wasserstein1",
]

#: The quantiles reported unless others are asked.
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)
#: The most equal buckets a distribution is read on.
MAX_BUCKETS = 64
#: Points per grid step where a quantile's interval is searched.
SEARCH = 8
#: A quantile's stderr (the sd of the bootstrap's quantiles) is served only when their
#: skewness is at most this in size: a normal law's is 0, and its sample skewness over
#: 1,000 replicates has sd sqrt(6/1000) = 0.08, so this flags only clearly skewed laws
#: (p99 at eps 1: -1.1 to -2.6; docs/numeric.md, "Issue 40").
MAX_SKEW = 1.0
#: What a quantile's null stderr means, in its JSON.
SKEWED = "skewed: no single standard error describes this quantile; use ci_low/ci_high"
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Interval:
    """One statistic with its stderr (None: a skewed quantile has none) and interval;
    a quantile's ``smoothed`` is the served shape's own reading, beside it."""

    value: float
    stderr: float | None
    ci_low: float
    ci_high: float
    smoothed: float | None = None

    def to_json(self) -> dict[str, float | str | None]:
        out: dict[str, float | str | None] = {
            "value": self.value,
            "stderr": self.stderr,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
        }
        if self.smoothed is not None:
            out["smoothed"] = self.smoothed
            if self.stderr is None:
                out["stderr_note"] = SKEWED
        return out


def bootstrap_stderr(replicates: Floats) -> float | None:
    """A quantile's stderr: the sd of the bootstrap replicates' quantiles (R,), when their
    skewness is at most ``MAX_SKEW`` in size; else None (a skewed law has no single
    standard error that describes it).

    >>> gen = np.random.default_rng(0)
    >>> round(bootstrap_stderr(gen.normal(5.0, 2.0, 1000)), 1)
    2.0
    >>> bootstrap_stderr(100 - gen.exponential(2.0, 1000)) is None   # skewness -2
    True
    """
    sd = float(np.std(replicates, ddof=1))
    if not sd > 0:
        return None
    skew = float(np.mean((replicates - np.mean(replicates)) ** 3)) / sd**3
    return sd if abs(skew) <= MAX_SKEW else None


def cdf_knots(lo: float, hi: float, k: int) -> Floats:
    """The k + 2 points where the CDF of k + 1 grid masses has its knots.

    >>> cdf_knots(0.0, 4.0, 4).tolist()
    [0.0, 0.5, 1.5, 2.5, 3.5, 4.0]
    """
    h = (hi - lo) / k
    return np.concatenate([[lo], lo + (np.arange(1, k + 1) - 0.5) * h, [hi]])


def _below(lo: float, hi: float, k: int, points: Floats) -> Floats:
    """phi: (k + 1, P), the share of grid point j's spread mass below each point."""
    knots = cdf_knots(lo, hi, k)
    width = np.diff(knots)[:, None]
    return np.clip((np.asarray(points)[None, :] - knots[:-1, None]) / width, 0.0, 1.0)


def cdf_of_masses(masses: Floats, lo: float, hi: float) -> Callable[[Floats], Floats]:
    """The CDF of grid masses as a callable on an array of points."""
    k = len(masses) - 1
    return lambda x: masses @ _below(lo, hi, k, np.asarray(x, dtype=np.float64))


@lru_cache(maxsize=32)
def unbiased_inverse(m: GridChannel) -> Floats:
    """P (M x (k + 1)): the tally share times P is an unbiased estimate of the grid
    masses (``linear_inverse``: weighted least squares over the exact channel)."""
    return linear_inverse(m.transition())


def _linear(
    m: GridChannel, share: Floats, n: int, phi: Floats, target: str = "reporters"
) -> tuple[Floats, Floats]:
    """(unbiased estimate, its estimated variance) of phi . x for each column of phi:
    about the reporting population (less the between-person phi^2 . x - F^2), or about
    the law they were drawn from (the reports' sample variance of w over n)."""
    w = unbiased_inverse(m) @ phi
    value = share @ w
    if target == "population":
        return value, np.maximum(share @ (w * w) - value * value, 0.0) / max(n - 1, 1)
    return value, np.maximum(
        share @ (w * w) - share @ (unbiased_inverse(m) @ (phi * phi)), 0.0
    ) / n


def range_weights(m: GridChannel, a: float, b: float) -> tuple[Floats, Floats]:
    """(w, w2): share @ w is the unbiased share of [a, b]; share @ (w^2 - w2) times 1/n
    its variance given the reporting population (``_linear``)."""
    phi = _below(m.lo, m.hi, m.k, np.array([a, b], dtype=np.float64))
    inside = phi[:, 1] - phi[:, 0]
    return unbiased_inverse(m) @ inside, unbiased_inverse(m) @ (inside * inside)


def _inverse(x: Floats, cdf: Floats, q: float) -> float:
    """The first point where a non-decreasing piecewise linear CDF reaches q."""
    j = int(np.searchsorted(cdf, q, side="left"))
    if j == 0:
        return float(x[0])
    if j >= len(x):
        return float(x[-1])
    gap = cdf[j] - cdf[j - 1]
    return float(x[j - 1] + (q - cdf[j - 1]) / gap * (x[j] - x[j - 1]))


@lru_cache(maxsize=32)
def search_weights(m: GridChannel) -> tuple[Floats, Floats, Floats]:
    """(x, W, W2): the points where quantiles are searched; share @ W is the unbiased
    CDF there and (share @ (W^2 - W2)) / n its variance (one product for any number
    of tally vectors)."""
    x = np.linspace(m.lo, m.hi, SEARCH * m.k + 1)
    phi = _below(m.lo, m.hi, m.k, x)
    return x, unbiased_inverse(m) @ phi, unbiased_inverse(m) @ (phi * phi)


@dataclass(frozen=True)
class DistributionEstimate:
    """A grid metric's distribution: the served shape (``masses``: EMS for Square Wave,
    the isotonic CDF for a hierarchy) and the tally share per cell (``share``) behind
    the unbiased intervals."""

    m: GridChannel
    share: Floats
    n: int
    masses: Floats
    iterations: int
    confidence: float
    edges: Floats
    quantiles_asked: tuple[float, ...]
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP
    #: "reporters" (the reporting users' own values) or "population" (their law).
    target: str = "reporters"

    @property
    def z(self) -> float:
        return -NormalDist().inv_cdf((1 - self.confidence) / 2)

    def cdf(self, points: npt.ArrayLike) -> tuple[Floats, Floats]:
        """(unbiased F_hat, stderr) at each point."""
        p = np.asarray(points, dtype=np.float64)
        phi = _below(self.m.lo, self.m.hi, self.m.k, p)
        value, var = _linear(self.m, self.share, self.n, phi, self.target)
        return value, np.sqrt(var)

    def range_share(self, a: float, b: float) -> Interval:
        """The share of values in [a, b], unbiased, with its normal interval."""
        phi = _below(self.m.lo, self.m.hi, self.m.k, np.array([a, b], dtype=np.float64))
        value, var = _linear(self.m, self.share, self.n, phi[:, 1:] - phi[:, :1], self.target)
        se = float(np.sqrt(var[0]))
        return Interval(
            float(value[0]), se, float(value[0]) - self.z * se, float(value[0]) + self.z * se
        )

    def quantile(self, q: float) -> Interval:
        """The q-quantile (0 < q < 1) with its bootstrap interval (``quantile_intervals``)."""
        return self.quantile_intervals((q,))[0]

    def quantile_intervals(self, qs: Sequence[float]) -> list[Interval]:
        """Each q-quantile with its interval from the parametric bootstrap of the monotone
        unbiased CDF (``aggregator.quantiles``), the test at each x under G's I-projection
        onto F(x) = q (``aggregator.projection``); one bootstrap serves them all, and its
        draws do not depend on which qs are asked.  The value is the point that test
        is built around (``projection_centre``: the test at level 0), so the value and
        its interval come from one estimator; its stderr is the sd of the bootstrap's
        quantiles of the monotone CDF, None when they are skewed (``bootstrap_stderr``).
        The shape's own q-quantile is beside it as ``smoothed`` (less noisy in a tail,
        but biased, and no interval describes it: docs/numeric.md, "Issue 40")."""
        for q in qs:
            if not 0 < q < 1:
                raise ValueError(f"a quantile must be in (0, 1), got {q!r}")
        if not qs:
            return []
        return self.intervals_from(self.bootstrap_cdf(), qs)

    def intervals_from(self, boot: CdfBootstrap, qs: Sequence[float]) -> list[Interval]:
        """``quantile_intervals`` from a bootstrap already drawn (the benchmark reads
        the same replicates in other ways)."""
        bands = boot.bands(self.confidence)
        shape = read_quantiles(boot.x, cdf_of_masses(self.masses, self.m.lo, self.m.hi)(boot.x), qs)
        replicates = read_quantiles(boot.x, boot.replicate, qs)
        out = []
        for i, (q, smoothed) in enumerate(zip(qs, shape[0], strict=True)):
            _, *served = boot.interval(q, bands)
            test = ProjectionTest(boot, q, self.confidence)
            low, high = projection_interval(test, (served[0], served[1]))
            value = projection_centre(test, (low, high))
            stderr = bootstrap_stderr(replicates[:, i])
            out.append(Interval(value, stderr, low, high, float(smoothed)))
        return out

    def bootstrap_cdf(self) -> CdfBootstrap:
        """The bootstrap behind the quantile intervals: the monotone unbiased CDF at the
        search points, observed and on ``bootstrap.replicates`` tallies of a fixed
        population with the served shape's law through the exact channel."""
        x, w, _ = search_weights(self.m)
        return bootstrap_cdf(
            self.m.transition(), w, x, self.masses, self.n, self.bootstrap, self.share * self.n,
            self.target,
        )

    def smoothed_shares(self) -> Floats:
        """The EMS share of each bucket between consecutive ``edges``."""
        return np.diff(cdf_of_masses(self.masses, self.m.lo, self.m.hi)(self.edges))

    def buckets(self) -> list[dict[str, float | str | None]]:
        """Each bucket: its edges, the unbiased share with its interval, the EMS share."""
        smooth = self.smoothed_shares()
        return [
            {
                "low": float(self.edges[i]),
                "high": float(self.edges[i + 1]),
                **self.range_share(float(self.edges[i]), float(self.edges[i + 1])).to_json(),
                "smoothed": float(smooth[i]),
            }
            for i in range(len(self.edges) - 1)
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "buckets": self.buckets(),
            "quantiles": [
                {"q": q, **interval.to_json()}
                for q, interval in zip(
                    self.quantiles_asked, self.quantile_intervals(self.quantiles_asked), strict=True
                )
            ],
            "grid_points": len(self.masses),
            "method": (
                (
                    "shape: EM with smoothing over the exact Square Wave channel"
                    if isinstance(self.m, SquareWave)
                    else "shape: isotonic CDF of the unbiased hierarchical histogram"
                )
                + "; values and intervals: unbiased inversion of the channel "
                "(quantiles: the monotone CDF, interval by inverting a parametric "
                f"bootstrap test of it, {self.bootstrap.replicates} tallies through the exact "
                "channel, each point tested under its I-projection null; the value is that "
                "test's centre, the shape's own quantile is 'smoothed')"
            ),
            "target": self.target,
        }


def estimate_distribution(
    m: GridChannel,
    tallies: Sequence[int] | npt.NDArray[Any],
    n: int,
    confidence: float = 0.95,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    buckets: int = 16,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    target: str = "reporters",
) -> DistributionEstimate:
    """The distribution behind ``tallies`` (``n`` reports of ``m``) on ``buckets`` equal
    buckets, with the ``quantiles`` asked (their intervals from ``bootstrap``), about
    the reporting users or (``target="population"``) the law they were drawn from."""
    check_target(target)
    counts = np.asarray(tallies, dtype=np.float64)
    if counts.shape != (m.num_counters,):
        raise ValueError(f"tally vector has {counts.shape} counters, need {m.num_counters}")
    if n <= 0 or counts.sum() != n:
        raise ValueError(f"n = {n} is not the tally's {int(counts.sum())} reports")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if not all(0 < q < 1 for q in quantiles):
        raise ValueError("quantiles must lie in (0, 1)")
    if isinstance(buckets, bool) or not 1 <= buckets <= MAX_BUCKETS:
        raise ValueError(f"buckets must be in [1, {MAX_BUCKETS}], got {buckets!r}")
    if isinstance(m, SquareWave):
        masses, iterations = ems(m.transition(), counts, smoothing=smoothing_for(m.epsilon))
    else:
        masses, iterations = isotonic_masses(counts / n @ unbiased_inverse(m)), 0
    return DistributionEstimate(
        m=m,
        share=counts / n,
        n=n,
        masses=masses,
        iterations=iterations,
        confidence=confidence,
        edges=np.linspace(m.lo, m.hi, buckets + 1),
        quantiles_asked=tuple(float(q) for q in quantiles),
        bootstrap=bootstrap,
        target=target,
    )


def distribution_json(
    statistics: Sequence[str],
    m: Mechanism,
    tallies: Sequence[int],
    n: int,
    confidence: float,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    buckets: int = 16,
    target: str = "reporters",
) -> dict[str, Any]:
    """The API's "distribution" and "quantiles" members, as a metric's ``statistics`` ask.

    >>> from ldp_core import mechanism
    >>> m = mechanism("square_wave", epsilon=4.0, lo=0.0, hi=1.0)
    >>> t = m.simulate_tallies(np.linspace(0, 1, 500), 1, np.random.default_rng(0))[0]
    >>> sorted(distribution_json(["quantiles"], m, t, 500, 0.95))
    ['quantiles']
    """
    if not isinstance(m, SquareWave | HierarchicalHistogram):
        raise ValueError(f"{m.name} estimates no distribution; square_wave and hierarchical do")
    asked = quantiles if "quantiles" in statistics else ()  # the bootstrap only if served
    d = estimate_distribution(
        m, tallies, n, confidence, quantiles=asked, buckets=min(buckets, MAX_BUCKETS),
        target=target,
    )
    body = d.to_json()
    out: dict[str, Any] = {}
    if "distribution" in statistics:
        out["distribution"] = {
            key: body[key] for key in ("buckets", "grid_points", "method", "target")
        }
    if "quantiles" in statistics:
        out["quantiles"] = body["quantiles"]
    return out
