"""The served shape of a grid distribution: EMS, the isotonic CDF, and W1 to the truth.

``aggregator.distribution`` serves Square Wave's shape by EM with smoothing
over its exact channel (its module docstring gives the step and why the
smoothing is 1/32 of the paper's kernel, 1/64 at eps <= 1; docs/numeric.md: the
sweeps on other shapes behind both), and a hierarchical histogram's by the
isotonic regression of its unbiased CDF.

>>> t = np.array([[0.7, 0.3], [0.3, 0.7]])
>>> ems(t, [550, 450])[0].round(2).tolist()
[0.61, 0.39]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

__all__ = [
    "LOW_EPSILON",
    "LOW_EPSILON_SMOOTHING",
    "MAX_ITERATIONS",
    "SMOOTHING",
    "TOLERANCE",
    "ems",
    "isotonic_masses",
    "smoothing_for",
    "wasserstein1",
]

Floats = npt.NDArray[np.float64]

#: The weight of the binomial smoothing in each EMS step (module docstring).
SMOOTHING = 1 / 32
#: The weight at eps <= ``LOW_EPSILON``: on shapes and seeds apart from the table's
#: (``bench_distribution.py --smoothing``: trimodal, exponential, uniform at eps 0.5
#: and 1, 20 surveys each), the geometric mean of W1 over 1/32's is 0.980 for 1/64,
#: 0.999 for 1/128; above eps 1 the former sweep keeps 1/32 (1/64: 1.05).
LOW_EPSILON_SMOOTHING = 1 / 64
LOW_EPSILON = 1.0
#: EMS stops when the log-likelihood gains less than this per report.
TOLERANCE = 1e-9
MAX_ITERATIONS = 10_000


def smoothing_for(epsilon: float) -> float:
    """The EMS smoothing weight served at ``epsilon``.

    >>> smoothing_for(0.5), smoothing_for(1.0), smoothing_for(2.0)
    (0.015625, 0.015625, 0.03125)
    """
    return LOW_EPSILON_SMOOTHING if epsilon <= LOW_EPSILON else SMOOTHING


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


def wasserstein1(
    cdf: Callable[[Floats], Floats],
    true_values: npt.ArrayLike,
    lo: float,
    hi: float,
    points: int = 4096,
) -> float:
    """W1 between an estimated CDF (a callable on an array) and the empirical one of
    ``true_values``, over [lo, hi] as a share of hi - lo (0 = identical, 1 = opposite ends).

    >>> v = np.array([0.25, 0.75])
    >>> round(wasserstein1(lambda x: np.clip(x, 0, 1), v, 0.0, 1.0), 3)   # uniform vs two atoms
    0.125
    """
    x = np.linspace(lo, hi, points)
    truth = np.searchsorted(
        np.sort(np.asarray(true_values, dtype=np.float64)), x, side="right"
    ) / np.size(true_values)
    gap = np.abs(np.asarray(cdf(x), dtype=np.float64) - truth)
    return float(np.trapezoid(gap, x) / (hi - lo))
