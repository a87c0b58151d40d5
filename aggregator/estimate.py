"""From tallies to estimates with honest intervals.

For every frequency mechanism one generic estimator applies (Wang et al. 2017):

    c_hat(v)      = (C(v) - n q*) / (p* - q*)
    Var[c_hat(v)] = n q*(1-q*)/(p*-q*)^2 + c(v) (1-p*-q*)/(p*-q*)

The second term (the item term) is kept: dropping it, as the usual
"small-frequency" approximation does, makes the interval of a common value
several times too narrow (5x in variance at eps = 3, d = 64, f = 0.3).  The
variance is evaluated at the plug-in c(v) = clip(c_hat(v), 0, n), and
intervals are normal: value +- z * stderr, with z from the confidence (per
value), or Bonferroni over the domain when ``simultaneous=True``.

Binary mechanisms estimate the share of 1s the same way from counter 1.

Grid means (Piecewise, Hybrid: ``ldp_core.capabilities.Numeric``): each counter is a
cell standing for an unbiased value of x, so mean = tallies . report_values / n,
and the mechanism estimates the variance from the same tallies
(``mean_variance``); ``numeric_mean`` applies it, chosen by the hook, not by name.

1BitMean: mean_z = (C1/n - q*)/(p* - q*).  Its exact variance is
sum_i pi_i (1 - pi_i) / (n (p* - q*))^2 with pi_i = q* + z_i (p* - q*), which
depends on the spread of the z_i that one bit per person cannot reveal; the
interval uses the upper bound pi_bar (1 - pi_bar) / (n (p* - q*)^2) (Jensen),
exact when every value is equal and otherwise conservative.

Windows of a memoised (two-level) metric.  A window sums the tallies of its
epochs, so C(u) = sum of X_r over its n reports, X_r = [report r supports u].
One-level reports are independent.  Two-level reports of one device and one
value are not: they share the permanent response B'.  For every two-level
mechanism here (GRR, SUE, OUE, OLH, binary RR, 1BitMean) a report supports u
with probability p2 if B' supports u and q2 otherwise, independently across
epochs given B'; B' supports u with probability pi = p1 (true value u) or
q1 (another value), (p1, q1) = ``m.permanent.channel``.  (OLH: B' is u =
GRR_d(v) and "supports u" is "B' = u"; given B', each report draws a fresh
seed, so p2 = P2 and q2 = c P2 + (1 - c)(1 - P2)/(g - 1).)  The composed channel
is p* = pi p2 + (1 - pi) q2 at pi = p1, q* the same at q1, so
p* - q* = (p1 - q1)(p2 - q2), and for two reports of one device and value

    Cov(X_t, X_s) = Var(E[X_t | B']) = (p2 - q2)^2 pi (1 - pi)     (t != s).

Reports of different values use independent permanent responses (a fresh
seed per value), so they are uncorrelated.  A device sends at most one report
per epoch, so a group of T_i reports of one device and one value has T_i <= T,
the number of epochs with data in the window; whatever the participation,

    sum_i T_i (T_i - 1) pi_i (1 - pi_i) <= (T - 1) sum_i T_i pi_i (1 - pi_i)
                                        = (T - 1) [c p1(1-p1) + (n-c) q1(1-q1)],

with equality when every device reports in every epoch.  Dividing by
(p* - q*)^2 = (p1 - q1)^2 (p2 - q2)^2:

    Var[c_hat(u)] <= m.count_variance(n, c) + (T - 1) m.permanent.count_variance(n, c),

the one-report variance of the composed channel plus T - 1 times that of the
permanent level.  Binary RR is the same on counter 1.  For 1BitMean
pi_i = q1 + z_i (p1 - q1), and Jensen bounds the mean of pi_i (1 - pi_i) over
reports by pi_bar (1 - pi_bar), as for one level:

    Var[mean] <= [pi*_bar(1-pi*_bar)/(p*-q*)^2 + (T-1) pi1_bar(1-pi1_bar)/(p1-q1)^2]
                 * (hi-lo)^2 / n,

with pi*_bar = q* + z_bar (p* - q*) and pi1_bar = q1 + z_bar (p1 - q1).

The memoised Piecewise mean (``ldp_core.mechanisms.piecewise_memo``) has the
same shape: two reports of one device covary by at most the mean of their
permanent level's one-report variances V1(t) (exactly V1(t) for one value), so
Var[mean] <= mean over reports of [V*(t) + (T - 1) V1(t)] / n, both quadratics
in t averaged with the tally's own estimates of mean(t) and mean(t^2)
(``WindowedNumeric``).

``estimate(..., epochs=T)`` applies it; T = 1 (one epoch) is the one-level
formula, and one-level mechanisms ignore ``epochs``.

Target (issue 40).  Everything above is about the reporting users: their own
values are fixed and the only noise is the channel's (``target="reporters"``,
the default).  ``target="population"`` treats the reporters as a random sample
of a law and adds the spread between people.  Each report's unbiased value Y_r
(a frequency: (X_r - q*)/(p* - q*); a grid mean: the cell's value) has, over
the law and the channel together, one variance, estimated without bias by the
reports' own sample variance s_Y^2; so for one epoch Var = s_Y^2 / n, both
parts at once.  Over a window of T epochs one person's reports share a value,
so the between-person part, b = s_Y^2 - n Var_reporters(one epoch) (>= 0), is
bounded by T b / n and added to the reporters' window variance.  For 1BitMean
the population variance of one epoch is exactly the Jensen bound above
(pi_bar (1 - pi_bar) is the variance of a report whose person is drawn from
the law), so there the bound is the answer.

>>> from ldp_core import mechanism
>>> from ldp_core.simulate import tallies
>>> m = mechanism("grr", epsilon=2.0, domain_size=3)
>>> t, n = tallies(m, [0] * 6000 + [1] * 3000 + [2] * 1000, seed=1)
>>> e = estimate(m, t, n)
>>> bool(e.ci_low[0] < 0.6 < e.ci_high[0])
True
>>> from ldp_core import longitudinal
>>> m2 = longitudinal("grr", epsilon=1.0, epsilon_inf=2.0, domain_size=3)
>>> t2, n2 = tallies(m2, [0] * 6000 + [1] * 3000 + [2] * 1000, seed=1)
>>> one, window = estimate(m2, t2, n2), estimate(m2, t2, n2, epochs=30)
>>> bool(window.stderr[0] > 2 * one.stderr[0])   # 30 epochs of memoised reports
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from aggregator.consistency import norm_sub
from ldp_core import Bounded, Mechanism, Memoisable, Numeric, WindowedNumeric

__all__ = [
    "TARGETS",
    "FrequencyEstimate",
    "ScalarEstimate",
    "check_target",
    "estimate",
    "exact_count_variance",
    "exact_mean_variance",
    "numeric_mean",
    "window_count_variance",
    "window_mean_variance",
    "with_population",
    "z_value",
]

#: Whom an interval is about: the reporting users (their own values fixed), or the
#: law they were drawn from (the reporters a sample of it; the spread between people
#: added).
TARGETS = ("reporters", "population")


def check_target(target: object) -> str:
    """The target, or ValueError naming the bad value.

    >>> check_target("population")
    'population'
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    return str(target)


def with_population(reporters_one: float | npt.NDArray[np.float64],
                    reporters_window: float | npt.NDArray[np.float64],
                    sample_one: float | npt.NDArray[np.float64],
                    epochs: int) -> npt.NDArray[np.float64]:
    """The population target's variance: the reporters' window variance plus ``epochs``
    times the between-person part b / n = (sample_one - reporters_one), clipped at 0
    (module docstring).  One epoch: ``sample_one`` itself.

    >>> float(with_population(0.5, 0.5, 0.75, 1)), float(with_population(0.5, 2.0, 0.75, 3))
    (0.75, 2.75)
    """
    between = np.maximum(np.asarray(sample_one, dtype=np.float64) - reporters_one, 0.0)
    return np.asarray(np.asarray(reporters_window, dtype=np.float64) + epochs * between,
                      dtype=np.float64)


def _bernoulli_sample_variance(
    m: Mechanism, support: npt.NDArray[np.float64], n: int
) -> npt.NDArray[np.float64]:
    """s_Y^2 / n on the share scale for Y = (X - q*)/(p* - q*), X a report's support bit."""
    pi = support / n
    s2 = pi * (1 - pi) * n / max(n - 1, 1) / (m.p_star - m.q_star) ** 2
    return np.asarray(s2 / n, dtype=np.float64)


def z_value(confidence: float, comparisons: int = 1) -> float:
    """Two-sided normal quantile, Bonferroni-corrected over ``comparisons``."""
    if not 0 < confidence < 1 or math.isnan(confidence):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    # The lower tail, negated: 1 - tiny rounds to 1.0 (confidence 0.9999999999999999
    # made inv_cdf raise), while (1 - confidence) / 2 stays a positive float.
    return -NormalDist().inv_cdf((1 - confidence) / (2 * comparisons))


@dataclass(frozen=True)
class ScalarEstimate:
    """A proportion (binary) or a mean (numeric), with its interval."""

    value: float
    stderr: float
    ci_low: float
    ci_high: float
    n: int
    epsilon: float
    mechanism: str
    confidence: float

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "stderr": self.stderr,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n": self.n,
            "epsilon": self.epsilon,
            "mechanism": self.mechanism,
            "confidence": self.confidence,
        }


@dataclass(frozen=True, eq=False)
class FrequencyEstimate:
    """Per-value proportions (unbiased, may be < 0) with stderr and intervals.

    ``consistent`` (Norm-Sub) is present only when asked for, never in place
    of the unbiased values.
    """

    value: npt.NDArray[np.float64]
    stderr: npt.NDArray[np.float64]
    ci_low: npt.NDArray[np.float64]
    ci_high: npt.NDArray[np.float64]
    n: int
    epsilon: float
    mechanism: str
    confidence: float
    simultaneous: bool
    consistent: npt.NDArray[np.float64] | None = None

    @property
    def counts(self) -> npt.NDArray[np.float64]:
        """Estimated number of reports holding each value."""
        return self.value * self.n

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value.tolist(),
            "stderr": self.stderr.tolist(),
            "ci_low": self.ci_low.tolist(),
            "ci_high": self.ci_high.tolist(),
            "consistent": None if self.consistent is None else self.consistent.tolist(),
            "n": self.n,
            "epsilon": self.epsilon,
            "mechanism": self.mechanism,
            "confidence": self.confidence,
            "simultaneous": self.simultaneous,
        }


def exact_count_variance(m: Mechanism, n: int, c: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Var[c_hat(v)] of one-report-per-device tallies: ``m.count_variance`` on an array.

    ``Mechanism.count_variance`` is plain arithmetic, so it takes the array as is
    (its hint says float; the cast only tells mypy).
    """
    c_arr = np.asarray(c, dtype=np.float64)
    return np.asarray(m.count_variance(n, cast(float, c_arr)), dtype=np.float64)


def _check_epochs(epochs: object) -> int:
    if isinstance(epochs, bool) or not isinstance(epochs, int | np.integer) or epochs < 1:
        raise ValueError(f"epochs must be a positive number of epochs, got {epochs!r}")
    return int(epochs)


def window_count_variance(
    m: Mechanism, n: int, c: npt.ArrayLike, epochs: int = 1
) -> npt.NDArray[np.float64]:
    """Upper bound on Var[c_hat(v)] of tallies summed over ``epochs`` epochs.

    One level: reports are independent, the bound is exact_count_variance.  Two
    levels: plus (epochs - 1) times the permanent level's variance (module
    docstring); exact when every device reports in every epoch.

    >>> from ldp_core import longitudinal
    >>> m = longitudinal("oue", epsilon=1.0, epsilon_inf=2.0, domain_size=16)
    >>> one = float(window_count_variance(m, 1000, 400))
    >>> float(window_count_variance(m, 1000, 400, epochs=30)) / one > 8
    True
    """
    base = exact_count_variance(m, n, c)
    t = _check_epochs(epochs)
    if not isinstance(m, Memoisable) or t == 1:
        return base
    return base + (t - 1) * exact_count_variance(m.permanent, n, c)


def _bit_variance(m: Mechanism, share: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """pi_bar (1 - pi_bar) / (p - q)^2 for a share in [0, 1] of the value hi (or 1)."""
    p, q = m.p_star, m.q_star
    pi_bar = q + share * (p - q)
    return np.asarray(pi_bar * (1 - pi_bar) / (p - q) ** 2, dtype=np.float64)


def window_mean_variance(
    m: Mechanism, n: int, share: npt.ArrayLike, epochs: int = 1
) -> npt.NDArray[np.float64]:
    """Upper bound on Var of the 1BitMean share z_hat over ``epochs`` epochs (Jensen).

    ``share`` is the estimated mean of z = (x - lo)/(hi - lo) (clipped into
    [0, 1] here); multiply by (hi - lo)^2 for the variance of the mean.

    >>> from ldp_core import longitudinal
    >>> m = longitudinal("one_bit_mean", epsilon=1.0, epsilon_inf=2.0, lo=0.0, hi=1.0)
    >>> ratio = window_mean_variance(m, 1000, 0.5, 30) / window_mean_variance(m, 1000, 0.5)
    >>> round(float(ratio), 2)
    11.68
    """
    z = np.clip(np.asarray(share, dtype=np.float64), 0.0, 1.0)
    t = _check_epochs(epochs)
    var = _bit_variance(m, z)
    if isinstance(m, Memoisable) and t > 1:
        var = var + (t - 1) * _bit_variance(m.permanent, z)
    return var / n


def exact_mean_variance(m: Mechanism, true_values: Sequence[float] | npt.NDArray[Any]) -> float:
    """Var of the estimate of the mean, for known true values (1BitMean or ``Numeric``)."""
    if isinstance(m, Numeric):
        distinct, counts = np.unique(np.asarray(true_values, dtype=np.float64),
                                     return_counts=True)
        pairs = zip(distinct, counts, strict=True)
        total = sum(int(c) * m.value_variance(float(v)) for v, c in pairs)
        return float(total) / len(true_values) ** 2
    if not isinstance(m, Bounded):
        raise ValueError(f"{m.name} does not estimate a mean over [lo, hi]")
    lo, hi = m.lo, m.hi
    p, q = m.p_star, m.q_star
    z = (np.asarray(true_values, dtype=np.float64) - lo) / (hi - lo)
    pi = q + z * (p - q)
    n = len(z)
    return float((pi * (1 - pi)).sum() / (n * (p - q)) ** 2 * (hi - lo) ** 2)


def numeric_mean(
    m: Numeric,
    tallies: Sequence[int] | npt.NDArray[Any],
    n: int,
    confidence: float = 0.95,
    epochs: int = 1,
    target: str = "reporters",
) -> ScalarEstimate:
    """The mean from a ``Numeric`` mechanism's cell tallies: each cell stands for an
    unbiased value of x (``report_values``); the variance is the mechanism's own
    estimate from the same tallies (``mean_variance``), or for a memoised mean over
    ``epochs`` > 1 its window bound (``WindowedNumeric.window_mean_variance``).

    >>> from ldp_core import mechanism
    >>> from ldp_core.simulate import tallies
    >>> m = mechanism("piecewise", epsilon=4.0, lo=0.0, hi=10.0)
    >>> t, n = tallies(m, [2.0] * 5000 + [6.0] * 5000, seed=1)
    >>> e = numeric_mean(m, t, n)
    >>> bool(e.ci_low < 4.0 < e.ci_high), round(e.stderr, 2)
    (True, 0.02)
    """
    counts = np.asarray(tallies, dtype=np.float64)
    values = np.asarray(m.report_values(), dtype=np.float64)
    if counts.shape != values.shape:
        raise ValueError(f"tally vector has {len(counts)} counters, need {len(values)}")
    mean = float(counts @ values / n)
    epochs = _check_epochs(epochs)
    one = m.mean_variance(tallies, n)
    var = one
    if epochs > 1 and isinstance(m, WindowedNumeric):
        var = m.window_mean_variance(tallies, n, epochs)
    if check_target(target) == "population":
        sample = (float(counts @ (values * values)) / n - mean * mean) / max(n - 1, 1)
        var = float(with_population(one, var, sample, epochs))
    se = math.sqrt(var)
    z = z_value(confidence)
    assert isinstance(m, Mechanism)
    return ScalarEstimate(mean, se, mean - z * se, mean + z * se, n, m.epsilon, m.name,
                          confidence)


def estimate(
    m: Mechanism,
    tallies: Sequence[int] | npt.NDArray[Any],
    n: int,
    confidence: float = 0.95,
    consistent: bool = False,
    simultaneous: bool = False,
    *,
    epochs: int = 1,
    target: str = "reporters",
) -> FrequencyEstimate | ScalarEstimate:
    """Debias a tally vector from ``n`` reports of mechanism ``m``.

    ``epochs``: how many epochs with data the tallies sum (a window).  It
    widens the interval of a two-level (memoised) mechanism for the
    correlation of one device's reports (module docstring); a one-level
    mechanism's reports are independent and ignore it.

    ``target``: "reporters" (the interval is about the reporting users' own values)
    or "population" (about the law they were drawn from: module docstring).

    >>> from ldp_core import mechanism
    >>> from ldp_core.simulate import tallies
    >>> m = mechanism("grr", epsilon=4.0, domain_size=2)
    >>> t, n = tallies(m, [0] * 5000 + [1] * 5000, seed=1)
    >>> us, law = estimate(m, t, n), estimate(m, t, n, target="population")
    >>> round(float(law.stderr[0] ** 2 - us.stderr[0] ** 2) * n, 2)   # + f (1 - f)
    0.25
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n <= 0:
        raise ValueError(f"n must be a positive number of reports, got {n!r}")
    n = int(n)
    epochs = _check_epochs(epochs)
    population = check_target(target) == "population"
    if isinstance(m, Numeric):
        return numeric_mean(m, tallies, n, confidence, epochs, target)
    support = np.asarray(m.support_counts(tallies), dtype=np.float64)
    p, q = m.p_star, m.q_star
    c_hat = (support - n * q) / (p - q)
    if m.kind == "frequency":
        comparisons = m.domain_size if simultaneous else 1
        z = z_value(confidence, comparisons)
        c = np.clip(c_hat, 0, n)
        var = window_count_variance(m, n, c, epochs) / n**2
        if population:
            one = exact_count_variance(m, n, c) / n**2
            var = with_population(one, var, _bernoulli_sample_variance(m, support, n), epochs)
        stderr = np.sqrt(var)
        value = c_hat / n
        return FrequencyEstimate(
            value=value,
            stderr=stderr,
            ci_low=value - z * stderr,
            ci_high=value + z * stderr,
            n=n,
            epsilon=m.epsilon,
            mechanism=m.name,
            confidence=confidence,
            simultaneous=simultaneous,
            consistent=norm_sub(value) if consistent else None,
        )
    z = z_value(confidence)
    share = float(c_hat[1] / n)
    if m.kind == "binary":
        c1 = min(max(c_hat[1], 0.0), n)
        var = window_count_variance(m, n, c1, epochs) / n**2
        if population:
            one = exact_count_variance(m, n, c1) / n**2
            var = with_population(one, var, _bernoulli_sample_variance(m, support, n)[1],
                                  epochs)
        se = math.sqrt(float(var))
        return ScalarEstimate(
            share, se, share - z * se, share + z * se, n, m.epsilon, m.name, confidence
        )
    assert isinstance(m, Bounded), m.name  # kind "mean"
    lo, hi = m.lo, m.hi
    var = window_mean_variance(m, n, share, epochs)
    if population:
        one = window_mean_variance(m, n, share)
        var = with_population(one, var, _bernoulli_sample_variance(m, support, n)[1], epochs)
    se = math.sqrt(float(var)) * (hi - lo)
    mean = lo + share * (hi - lo)
    return ScalarEstimate(mean, se, mean - z * se, mean + z * se, n, m.epsilon, m.name, confidence)
