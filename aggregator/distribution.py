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
``SMOOTHING`` s = 1/32 was taken from a sweep of s in {0, 1/32, 1/10, 0.3, 1}
and k in {64, 128} on the benchmark's two shapes (other seeds than the
benchmark's table; README, "Distributions and quantiles").

Reading grid masses as a distribution over [lo, hi]: grid point j's mass is
spread evenly over [t_j - h/2, t_j + h/2] (h = (hi - lo)/k, clipped at lo and
hi), so the CDF is piecewise linear through the cumulative masses at the
midpoints (``cdf_knots``).  The random rounding moves a value to a
neighbouring grid point with the probabilities that keep its mean, so this CDF
is the true one smoothed by a kernel of width about h (bias O(h^2) f').

Intervals.  EMS has no closed-form variance, and a parametric bootstrap of it
through the exact channel under-covers badly (its bias does not shrink with n
while its spread does; ``benchmarks/bench_distribution.py`` measures it).
The intervals therefore come from the unbiased linear estimator: the CDF at a
point x is a linear functional phi_x . x of the grid masses, and T has full
row rank, so w_x = T^+ phi_x (minimum norm, T w_x = phi_x) gives

    F_hat(x) = sum_i (C_i / n) w_x,i,    E[F_hat(x)] = x . T w_x = phi_x . x,
    Var[F_hat(x)] = (sum_i pi_i w_x,i^2 - F(x)^2) / n,  pi = x T,

estimated without bias from the same tallies (pi_i by C_i / n).  A range share
is the difference of two such functionals (one w), with a normal interval.  A
quantile is read from a monotone version of F_hat (clipped to [0, 1]); its
interval is Woodruff's (1952): the quantiles at q -+ z se(F_hat) with the
stderr at the estimated quantile, so it always holds the estimate.

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

from ldp_core.base import Mechanism
from ldp_core.mechanisms.hierarchical import HierarchicalHistogram, linear_inverse
from ldp_core.mechanisms.square_wave import SquareWave

#: The mechanisms whose tallies give a distribution on a grid of k + 1 points.
GridChannel = SquareWave | HierarchicalHistogram

__all__ = [
    "DEFAULT_QUANTILES",
    "DistributionEstimate",
    "Interval",
    "bootstrap_masses",
    "cdf_knots",
    "cdf_of_masses",
    "distribution_json",
    "ems",
    "estimate_distribution",
    "isotonic_masses",
    "wasserstein1",
]

#: The quantiles reported unless others are asked.
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)
#: The weight of the binomial smoothing in each EMS step (module docstring).
SMOOTHING = 1 / 32
#: EMS stops when the log-likelihood gains less than this per report.
TOLERANCE = 1e-9
MAX_ITERATIONS = 10_000
#: The most equal buckets a distribution is read on.
MAX_BUCKETS = 64
#: Points per grid step where a quantile's interval is searched.
SEARCH = 8
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Interval:
    """One statistic with its stderr (None: an inverted test has none) and interval."""

    value: float
    stderr: float | None
    ci_low: float
    ci_high: float

    def to_json(self) -> dict[str, float | None]:
        return {"value": self.value, "stderr": self.stderr, "ci_low": self.ci_low,
                "ci_high": self.ci_high}


def _smooth(x: Floats, weight: float = SMOOTHING) -> Floats:
    """The binomial smoothing step over the last axis, renormalised."""
    out = np.empty_like(x)
    out[..., 1:-1] = (x[..., :-2] + 2 * x[..., 1:-1] + x[..., 2:]) / 4
    out[..., 0] = (2 * x[..., 0] + x[..., 1]) / 3
    out[..., -1] = (x[..., -2] + 2 * x[..., -1]) / 3
    out = (1 - weight) * x + weight * out
    return out / out.sum(axis=-1, keepdims=True)  # type: ignore[no-any-return]


def ems(
    transition: Floats,
    counts: npt.ArrayLike,
    tolerance: float = TOLERANCE,
    max_iterations: int = MAX_ITERATIONS,
    smoothing: float = SMOOTHING,
) -> tuple[Floats, int]:
    """(x, iterations): EM with smoothing for one tally vector (M,) or a batch (R, M).

    >>> t = np.array([[0.7, 0.3], [0.3, 0.7]])   # a two-point channel
    >>> x, _ = ems(t, [550, 450], smoothing=1.0)
    >>> x.round(3).tolist()     # EM alone gives [0.625, 0.375]; smoothing pulls them together
    [0.509, 0.491]
    """
    c = np.atleast_2d(np.asarray(counts, dtype=np.float64))
    n = c.sum(axis=1, keepdims=True)
    if np.any(n <= 0):
        raise ValueError("every tally vector needs at least one report")
    share = c / n
    x = np.full((c.shape[0], transition.shape[0]), 1.0 / transition.shape[0])
    previous = np.full(c.shape[0], -np.inf)
    active = np.ones(c.shape[0], dtype=bool)
    iterations = 0
    while iterations < max_iterations and active.any():
        iterations += 1
        index = np.flatnonzero(active)
        xa, sa = x[index], share[index]
        predicted = np.maximum(xa @ transition, 1e-300)
        loglik = (sa * np.log(predicted)).sum(axis=1)
        x[index] = _smooth(xa * ((sa / predicted) @ transition.T), smoothing)
        active[index[loglik - previous[index] < tolerance]] = False
        previous[index] = loglik
    return (x[0] if np.ndim(counts) == 1 else x), iterations


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


def _linear(m: GridChannel, share: Floats, n: int, phi: Floats) -> tuple[Floats, Floats]:
    """(unbiased estimate, its estimated variance) of phi . x for each column of phi."""
    w = unbiased_inverse(m) @ phi
    value = share @ w
    return value, np.maximum(share @ (w * w) - value * value, 0.0) / n


def _pava(y: Floats) -> Floats:
    """The non-decreasing sequence nearest to y in least squares (pool adjacent violators)."""
    values: list[float] = []
    weights: list[int] = []
    for v in y.tolist():
        values.append(v)
        weights.append(1)
        while len(values) > 1 and values[-2] > values[-1]:
            v2, w2 = values.pop(), weights.pop()
            values[-1] = (values[-1] * weights[-1] + v2 * w2) / (weights[-1] + w2)
            weights[-1] += w2
    return np.repeat(values, weights)


def isotonic_masses(unbiased: Floats) -> Floats:
    """Grid masses >= 0 summing to 1 whose CDF is the isotonic regression of the unbiased
    one, clipped to [0, 1]: it keeps the precise cumulative sums of a hierarchy (Norm-Sub
    of the masses would move every cumulative sum).

    >>> isotonic_masses(np.array([0.3, -0.1, 0.5, 0.3])).round(3).tolist()
    [0.25, 0.0, 0.45, 0.3]
    """
    cdf = np.clip(_pava(np.cumsum(unbiased)[:-1]), 0.0, 1.0)
    return np.diff(np.concatenate([[0.0], cdf, [1.0]]))


def _inverse(x: Floats, cdf: Floats, q: float) -> float:
    """The first point where a non-decreasing piecewise linear CDF reaches q."""
    j = int(np.searchsorted(cdf, q, side="left"))
    if j == 0:
        return float(x[0])
    if j >= len(x):
        return float(x[-1])
    gap = cdf[j] - cdf[j - 1]
    return float(x[j - 1] + (q - cdf[j - 1]) / gap * (x[j] - x[j - 1]))


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

    @property
    def z(self) -> float:
        return -NormalDist().inv_cdf((1 - self.confidence) / 2)

    def cdf(self, points: npt.ArrayLike) -> tuple[Floats, Floats]:
        """(unbiased F_hat, stderr) at each point."""
        p = np.asarray(points, dtype=np.float64)
        value, var = _linear(self.m, self.share, self.n, _below(self.m.lo, self.m.hi, self.m.k, p))
        return value, np.sqrt(var)

    def range_share(self, a: float, b: float) -> Interval:
        """The share of values in [a, b], unbiased, with its normal interval."""
        phi = _below(self.m.lo, self.m.hi, self.m.k, np.array([a, b], dtype=np.float64))
        value, var = _linear(self.m, self.share, self.n, phi[:, 1:] - phi[:, :1])
        se = float(np.sqrt(var[0]))
        return Interval(float(value[0]), se, float(value[0]) - self.z * se,
                        float(value[0]) + self.z * se)

    def quantile(self, q: float) -> Interval:
        """The q-quantile (0 < q < 1) with its Woodruff interval."""
        if not 0 < q < 1:
            raise ValueError(f"a quantile must be in (0, 1), got {q!r}")
        x = np.linspace(self.m.lo, self.m.hi, SEARCH * self.m.k + 1)
        f, se = self.cdf(x)
        f = np.clip(f, 0.0, 1.0)
        # A monotone CDF: the mean of the running max from the left and min from the right.
        monotone = (np.maximum.accumulate(f) + np.minimum.accumulate(f[::-1])[::-1]) / 2
        value = _inverse(x, monotone, q)
        spread = self.z * float(np.interp(value, x, se))
        return Interval(value, None, _inverse(x, monotone, q - spread),
                        _inverse(x, monotone, q + spread))

    def smoothed_shares(self) -> Floats:
        """The EMS share of each bucket between consecutive ``edges``."""
        return np.diff(cdf_of_masses(self.masses, self.m.lo, self.m.hi)(self.edges))

    def buckets(self) -> list[dict[str, float | None]]:
        """Each bucket: its edges, the unbiased share with its interval, the EMS share."""
        smooth = self.smoothed_shares()
        return [
            {"low": float(self.edges[i]), "high": float(self.edges[i + 1]),
             **self.range_share(float(self.edges[i]), float(self.edges[i + 1])).to_json(),
             "smoothed": float(smooth[i])}
            for i in range(len(self.edges) - 1)
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "buckets": self.buckets(),
            "quantiles": [{"q": q, **self.quantile(q).to_json()} for q in self.quantiles_asked],
            "grid_points": len(self.masses),
            "method": (
                ("shape: EM with smoothing over the exact Square Wave channel"
                 if isinstance(self.m, SquareWave) else
                 "shape: isotonic CDF of the unbiased hierarchical histogram")
                + "; values and intervals: unbiased inversion of the channel "
                "(quantiles: inverted CDF test)"
            ),
        }


def estimate_distribution(
    m: GridChannel,
    tallies: Sequence[int] | npt.NDArray[Any],
    n: int,
    confidence: float = 0.95,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    buckets: int = 16,
) -> DistributionEstimate:
    """The distribution behind ``tallies`` (``n`` reports of ``m``) on ``buckets`` equal
    buckets, with the ``quantiles`` asked."""
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
        masses, iterations = ems(m.transition(), counts)
    else:
        masses, iterations = isotonic_masses(counts / n @ unbiased_inverse(m)), 0
    return DistributionEstimate(
        m=m, share=counts / n, n=n, masses=masses, iterations=iterations,
        confidence=confidence, edges=np.linspace(m.lo, m.hi, buckets + 1),
        quantiles_asked=tuple(float(q) for q in quantiles),
    )


def distribution_json(
    statistics: Sequence[str], m: Mechanism, tallies: Sequence[int], n: int, confidence: float,
    quantiles: Sequence[float] = DEFAULT_QUANTILES, buckets: int = 16,
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
    d = estimate_distribution(m, tallies, n, confidence, quantiles=quantiles,
                              buckets=min(buckets, MAX_BUCKETS))
    body = d.to_json()
    out: dict[str, Any] = {}
    if "distribution" in statistics:
        out["distribution"] = {key: body[key] for key in ("buckets", "grid_points", "method")}
    if "quantiles" in statistics:
        out["quantiles"] = body["quantiles"]
    return out


def bootstrap_masses(m: SquareWave, masses: Floats, n: int, replicates: int,
                     seed: int) -> Floats:
    """EMS re-run on ``replicates`` tallies drawn as Multinomial(n, masses T): the
    parametric bootstrap through the exact channel (the benchmark measures its coverage)."""
    transition = m.transition()
    predicted = masses @ transition
    gen = np.random.default_rng(seed)
    counts = gen.multinomial(n, predicted / predicted.sum(), size=replicates)
    return ems(transition, counts)[0]


def wasserstein1(
    cdf: Callable[[Floats], Floats], true_values: npt.ArrayLike, lo: float, hi: float,
    points: int = 4096,
) -> float:
    """W1 between an estimated CDF (a callable on an array) and the empirical one of
    ``true_values``, over [lo, hi] as a share of hi - lo (0 = identical, 1 = opposite ends).

    >>> v = np.array([0.25, 0.75])
    >>> round(wasserstein1(lambda x: np.clip(x, 0, 1), v, 0.0, 1.0), 3)   # uniform vs two atoms
    0.125
    """
    x = np.linspace(lo, hi, points)
    truth = np.searchsorted(np.sort(np.asarray(true_values, dtype=np.float64)), x,
                            side="right") / np.size(true_values)
    gap = np.abs(np.asarray(cdf(x), dtype=np.float64) - truth)
    return float(np.trapezoid(gap, x) / (hi - lo))
