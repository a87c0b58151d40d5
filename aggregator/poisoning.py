"""Signals of poisoning on every estimate: what lying clients cannot hide cheaply.

Local DP cannot refuse a well-crafted lie (``aggregator.attacks``: the maximal
gain attack sends reports that an honest device could send).  What a lie
cannot avoid is moving the estimate: +10 points of a target needs a fraction
0.10 / gain of fake reports, and the move is tested here against the noise
the mechanism itself declares.  For a window of epochs (the latest one and
the earlier ones), with k the number of estimated shares (d for a histogram,
1 for a proportion or a mean) and each share's stderr from
``aggregator.estimate`` (item term included; the memoised bound for two-level
metrics).  A mean over [lo, hi] is tested as the share (mean - lo)/(hi - lo)
of the way from lo to hi, whatever the mechanism's own encoding (a cell grid
for Piecewise, Hybrid, Square Wave and Hierarchical, one bit for 1BitMean), and
reported in the metric's units:

- ``impossible``: a share whose interval at z = Phi^-1(1 - a/(2k)),
  a = ``alpha_impossible`` (1e-6), lies entirely above 1 or below 0 (a mean's
  entirely above hi or below lo), over the window and over its latest epoch.
  An honest share does so with probability <= a per test (normal
  approximation).
- ``tally_sum_z``: the set-bit total of a unary tally against its exact
  honest law (``collector.plausibility``; |z| > 5, 6e-7 per window).
- ``drift``: the latest epoch against the pooled earlier epochs of the
  window (``aggregator.drift``), every earlier epoch of the window used (the
  more, the more power: the honest law is known better).  A rise past the
  rise threshold (budget a_rise = 0.009) or a fall past the fall threshold
  (a_fall = 0.0005) flags the value.  GRR, OLH, Hadamard (both levels), HCMS:
  likelihood-ratio weights, thresholds of the maximum over the k values from
  a Monte Carlo test through the channel (level a by construction).  The
  others (unary, one-bit, CMS, grid means): per value, z = (f_latest - f_earlier) /
  sqrt(se_latest^2 + se_earlier^2), thresholds of the maximum from the same
  Monte Carlo test with independent bits (``drift.simulated_drift``).  Grid
  means (no independent bits to simulate; a mean of n bounded reports) and
  past the simulation's cost caps: Phi^-1(1 - a/k) (Bonferroni).  One-sided budgets:
  promotion is what an attacker gains by (the MGA's rise per fake,
  gain = (1-q*)/(p*-q*), is at least its fall per fake, q*/(p*-q*), for
  every mechanism here), so most of the budget tests rises.
  Two-level metrics: the same statistics, with a memoised population as the
  simulated null (``aggregator.drift_memo``: the earlier and latest epochs
  re-randomise the same permanent responses; past the caps, the normal
  thresholds with the memoised variance, conservative).  It assumes a stable
  population: a real, sudden change of one value is flagged too (a signal,
  not proof).
- ``robust``: with 3 to 64 epochs (and at most 2^22 counters to decode), the
  median of the per-epoch estimates (in the estimate's units: a mean's in
  the metric's) beside the unbiased window estimate.  An
  attacker who poisons fewer than half of the epochs cannot push it beyond
  the largest honest per-epoch estimate, while the unbiased estimate moves by
  fraction x gain.

The false-alarm rate on honest, stationary data is at most
a_rise + a_fall + 2 a_impossible + 6e-7 ~ 0.95% per estimate (union bound
over the signals; ``Policy.false_alarm_rate``).

>>> from ldp_core import mechanism
>>> from ldp_core.simulate import tallies
>>> m = mechanism("grr", epsilon=1.0, domain_size=4)
>>> honest = [tallies(m, [0, 1, 2, 3] * 2500, seed=s) for s in range(3)]
>>> assess(m, honest[-1], honest[:-1]).flagged
False
>>> t, n = honest[-1]
>>> t[3] += 600                          # 600 fake reports of value 3 (GRR MGA)
>>> s = assess(m, (t, n + 600), honest[:-1])
>>> s.flagged, s.rise
(True, (3,))

A mean is tested and reported in its own units, whatever its encoding:

>>> p = mechanism("piecewise", epsilon=1.0, lo=0.0, hi=120.0)
>>> epochs = [tallies(p, [15.0] * 3000, seed=s) for s in range(3)]
>>> s = assess(p, epochs[-1], epochs[:-1])
>>> s.flagged, 10 < s.robust[0] < 20
(False, True)
>>> top = len(p.report_values()) - 1     # 3,000 fakes all report the highest cell
>>> t, n = epochs[-1]
>>> t[top] += 3000
>>> s = assess(p, (t, n + 3000))
>>> s.impossible, s.reasons(["mean"])
((0,), ['mean: interval entirely outside [0, 120]'])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from aggregator.attacks import gain
from aggregator.drift import (
    Drift,
    calibrated_drift,
    normal_drift,
    simulated_drift,
    support_rows,
)
from aggregator.drift_memo import memoised_drift
from aggregator.estimate import numeric_mean, window_count_variance, window_mean_variance
from collector.store import SUM_Z_FLAG, count_sum_z
from ldp_core import Bounded, Mechanism, Numeric
from ldp_core.metric import MetricSpec

__all__ = [
    "Policy",
    "Shares",
    "Signals",
    "assess",
    "estimate_signals",
    "shares",
]

Tally = tuple[Sequence[int] | npt.NDArray[Any], int]

#: Probability that an honest |z| of the set-bit total exceeds SUM_Z_FLAG.
SUM_Z_ALARM = 6e-7


@dataclass(frozen=True)
class Policy:
    """False-alarm budgets of each signal (per estimate, honest stationary data)."""

    alpha_rise: float = 0.009
    alpha_fall: float = 0.0005
    alpha_impossible: float = 1e-6
    robust_min_epochs: int = 3
    #: Past this many epochs, or counters x epochs, the robust median is not computed
    #: (it decodes every epoch: bounded work per request).
    robust_max_epochs: int = 64
    robust_max_cells: int = 1 << 22
    #: True: the drift thresholds come from ``draws`` simulations through the
    #: channel (``aggregator.drift``: likelihood-ratio weights for GRR,
    #: OLH, Hadamard, HCMS; the difference of shares for unary, one-bit and CMS
    #: designs); False, or past the cost caps: the difference of shares with
    #: normal Bonferroni thresholds.
    calibrate: bool = True
    #: alpha x (draws + 1) should be a whole number for both drift budgets.
    draws: int = 1999

    def __post_init__(self) -> None:
        for alpha in (self.alpha_rise, self.alpha_fall):
            if not 0 < alpha < 1 or alpha * (self.draws + 1) < 1:
                raise ValueError(
                    f"drift budget {alpha!r} needs 0 < alpha < 1 and alpha x (draws + 1) >= 1 "
                    f"(draws = {self.draws!r})"
                )

    def quantile(self, alpha: float, tests: int) -> float:
        """Phi^-1(1 - alpha / tests): a Bonferroni one-sided threshold.

        >>> round(Policy().quantile(0.009, 32), 2)
        3.45
        """
        return -NormalDist().inv_cdf(alpha / tests)

    @property
    def false_alarm_rate(self) -> float:
        """Upper bound on P[flagged] for honest data (union bound over the signals)."""
        return self.alpha_rise + self.alpha_fall + 2 * self.alpha_impossible + SUM_Z_ALARM


@dataclass(frozen=True, eq=False)
class Shares:
    """Estimated shares and their stderr (k = d values, 1 share of 1s, or for a mean
    over [lo, hi] the share (mean - lo)/(hi - lo))."""

    value: npt.NDArray[np.float64]
    stderr: npt.NDArray[np.float64]


def shares(
    m: Mechanism, tallies: Sequence[int] | npt.NDArray[Any], n: int, epochs: int = 1
) -> Shares:
    """Unbiased shares of a tally vector with the stderr ``aggregator.estimate`` uses.

    A grid mean's cells are not values' supports: its share comes from its mean.

    >>> from ldp_core import mechanism
    >>> from ldp_core.simulate import tallies
    >>> m = mechanism("hybrid", epsilon=1.0, lo=0.0, hi=120.0)
    >>> s = shares(m, *tallies(m, [105.0] * 4000, seed=1))
    >>> bool(abs(s.value[0] - 105 / 120) < 5 * s.stderr[0])
    True
    """
    if isinstance(m, Numeric):
        mean = numeric_mean(m, tallies, n, epochs=epochs)
        width = m.hi - m.lo
        return Shares(np.array([(mean.value - m.lo) / width]), np.array([mean.stderr / width]))
    support = np.asarray(m.support_counts(tallies), dtype=np.float64)
    return _from_support(m, support, n, epochs)


def _from_support(m: Mechanism, support: npt.NDArray[np.float64], n: int, epochs: int) -> Shares:
    """``shares`` from support counts (the last axis: one row of them, or several)."""
    p, q = m.p_star, m.q_star
    c_hat = (support - n * q) / (p - q)
    if m.kind == "frequency":
        var = window_count_variance(m, n, np.clip(c_hat, 0, n), epochs) / n**2
        return Shares(c_hat / n, np.sqrt(var))
    share = c_hat[..., 1:2] / n
    if m.kind == "binary":
        var = window_count_variance(m, n, np.clip(c_hat[..., 1:2], 0, n), epochs) / n**2
    else:
        var = np.atleast_1d(window_mean_variance(m, n, share, epochs))
    return Shares(share, np.sqrt(np.asarray(var, dtype=np.float64)))


@lru_cache(maxsize=16)
def _support_matrix(m: Mechanism) -> npt.NDArray[np.float64]:
    """counters x values: support counts are tallies @ this (unary, one-bit, CMS: linear)."""
    return support_rows(m)


def _share_z(
    m: Mechanism, earlier_epochs: int
) -> Callable[
    [npt.NDArray[np.float64], int, npt.NDArray[np.float64], int], npt.NDArray[np.float64]
]:
    """The difference-of-shares z of ``normal_drift`` on rows of tallies.

    The support matrix is built when ``z`` is first called, not here:
    ``simulated_drift`` calls it only where it applies (unary, one-bit, CMS under
    the cost caps).  Built eagerly, a cold GRR estimate over 4096 values built
    4096 x 4096 of it for nothing (12 s of CPU, 600 MB, 2.6 s of it holding the
    GIL; docs/analysts.md)."""

    def z(
        now: npt.NDArray[np.float64], n_now: int, before: npt.NDArray[np.float64], n_before: int
    ) -> npt.NDArray[np.float64]:
        matrix = _support_matrix(m)
        a = _from_support(m, np.einsum("...k,kv->...v", now, matrix), n_now, 1)
        b = _from_support(m, np.einsum("...k,kv->...v", before, matrix), n_before, earlier_epochs)
        return np.asarray(
            (a.value - b.value) / np.sqrt(a.stderr**2 + b.stderr**2), dtype=np.float64
        )

    return z


@dataclass(frozen=True, eq=False)
class Signals:
    """What ``assess`` found; indices refer to the estimated shares."""

    impossible: tuple[int, ...]
    sum_z: float | None
    drift: Drift | None
    rise: tuple[int, ...]
    fall: tuple[int, ...]
    robust: tuple[float, ...] | None
    gain: float
    policy: Policy
    #: The range of the estimated values: (0, 1) for shares, (lo, hi) for a mean
    #: (``robust`` and the reasons are in these units; the tests run on shares).
    bounds: tuple[float, float] = (0.0, 1.0)

    @property
    def flagged(self) -> bool:
        """Whether any signal fired."""
        loud_sum = self.sum_z is not None and abs(self.sum_z) > SUM_Z_FLAG
        return bool(self.impossible or self.rise or self.fall or loud_sum)

    def reasons(self, labels: Sequence[str]) -> list[str]:
        """Why it is flagged, one sentence per signal that fired."""
        lo, hi = self.bounds
        out = [f"{labels[i]}: interval entirely outside [{lo:g}, {hi:g}]" for i in self.impossible]
        z = () if self.drift is None else self.drift.z
        out += [f"{labels[i]}: rose {z[i]:.1f} stderr above the earlier epochs" for i in self.rise]
        out += [f"{labels[i]}: fell {-z[i]:.1f} stderr below the earlier epochs" for i in self.fall]
        if self.sum_z is not None and abs(self.sum_z) > SUM_Z_FLAG:
            out.append(f"set-bit total {self.sum_z:+.1f} stderr from the honest law")
        return out

    def to_json(self, labels: Sequence[str]) -> dict[str, Any]:
        """The signals with labels (the estimate's ``poisoning`` field adds to it)."""

        def named(idx: tuple[int, ...]) -> list[str]:
            return [labels[i] for i in idx]

        drift = None
        if self.drift is not None:
            drift = {
                "z": [round(float(z), 3) for z in self.drift.z],
                "rising": named(self.rise),
                "falling": named(self.fall),
                "threshold_rise": round(self.drift.rise_threshold, 3),
                "threshold_fall": round(self.drift.fall_threshold, 3),
                "method": self.drift.method,
            }
        reasons = self.reasons(labels)
        return {
            "summary": "Possible poisoning: " + "; ".join(reasons) + "." if reasons else None,
            "reasons": reasons,
            "impossible": named(self.impossible),
            "drift": drift,
            "robust": None
            if self.robust is None
            else {"method": "median of per-epoch estimates", "values": list(self.robust)},
            "gain_per_fake": self.gain,
            "false_alarm_rate": self.policy.false_alarm_rate,
        }


def _impossible(s: Shares, z: float) -> set[int]:
    out = (s.value - z * s.stderr > 1) | (s.value + z * s.stderr < 0)
    return {int(i) for i in np.flatnonzero(out)}


def _estimates(
    m: Mechanism, rows: Sequence[Tally], bounds: tuple[float, float]
) -> npt.NDArray[np.float64]:
    """epochs x k: each epoch's unbiased estimates, in the units of ``bounds``.  A grid
    mean's is its tallies . report_values / n (no stderr: its hook costs ~10 ms)."""
    if isinstance(m, Numeric):
        cells = np.asarray(m.report_values(), dtype=np.float64)
        return np.array([[np.asarray(v, dtype=np.float64) @ cells / c] for v, c in rows])
    lo, hi = bounds
    return lo + np.array([shares(m, v, int(c)).value for v, c in rows]) * (hi - lo)


def _pool(m: Mechanism, rows: Sequence[Tally]) -> tuple[npt.NDArray[np.int64], int]:
    total = np.zeros(m.num_counters, dtype=np.int64)
    for vector, _ in rows:
        total += np.asarray(vector, dtype=np.int64)
    return total, sum(int(c) for _, c in rows)


def assess(
    m: Mechanism,
    latest: Tally,
    earlier: Sequence[Tally] = (),
    policy: Policy = Policy(),
    *,
    earlier_epochs: int | None = None,
) -> Signals:
    """Every signal for a window made of ``earlier`` epochs and the ``latest`` one.

    Each tally is (vector, n); epochs without reports are left out by the caller.
    ``earlier_epochs``: ``earlier`` is one tally pooling that many epochs (a
    window too long to keep each epoch): same signals, no robust estimate.
    """
    rows = [*(r for r in earlier if r[1] > 0), latest]
    bounds = (float(m.lo), float(m.hi)) if isinstance(m, Bounded | Numeric) else (0.0, 1.0)
    count = len(rows) if earlier_epochs is None else len(rows) - 1 + earlier_epochs
    total, n = _pool(m, rows)
    window = shares(m, total, n, count)
    k = len(window.value)
    z_imp = policy.quantile(policy.alpha_impossible, 2 * k)
    now = shares(m, latest[0], int(latest[1]))
    impossible = _impossible(window, z_imp) | (_impossible(now, z_imp) if len(rows) > 1 else set())
    drift: Drift | None = None
    rise: tuple[int, ...] = ()
    fall: tuple[int, ...] = ()
    if len(rows) > 1:
        before_t, before_n = _pool(m, rows[:-1])
        a_rise, a_fall = policy.alpha_rise, policy.alpha_fall
        if policy.calibrate:
            pooled = (before_t, before_n)
            drift = calibrated_drift(m, latest, pooled, a_rise, a_fall, policy.draws)
            if drift is None:
                drift = memoised_drift(m, latest, pooled, a_rise, a_fall, policy.draws)
            if drift is None:
                drift = simulated_drift(
                    m, latest, pooled, a_rise, a_fall, policy.draws, _share_z(m, count - 1)
                )
        if drift is None:
            drift = normal_drift(now, shares(m, before_t, before_n, count - 1), a_rise, a_fall)
        rise = tuple(int(i) for i in np.flatnonzero(drift.z > drift.rise_threshold))
        fall = tuple(int(i) for i in np.flatnonzero(drift.z < drift.fall_threshold))
    robust = None
    cells = len(rows) * m.num_counters
    if (
        earlier_epochs is None
        and policy.robust_min_epochs <= len(rows) <= (policy.robust_max_epochs)
        and cells <= policy.robust_max_cells
    ):
        robust = tuple(float(x) for x in np.median(_estimates(m, rows, bounds), axis=0))
    return Signals(
        impossible=tuple(sorted(impossible)),
        sum_z=count_sum_z(m, [int(x) for x in total], n) if n else None,
        drift=drift,
        rise=rise,
        fall=fall,
        robust=robust,
        gain=gain(m),
        policy=policy,
        bounds=bounds,
    )


def _labels(spec: MetricSpec) -> list[str]:
    if spec.kind == "categorical":
        return list(spec.domain)
    return ["mean"] if spec.kind == "numeric" else ["true"]


def estimate_signals(
    spec: MetricSpec,
    total: Sequence[int] | npt.NDArray[Any],
    n: int,
    per_epoch: Sequence[tuple[int, Sequence[int] | npt.NDArray[Any], int]] = (),
    refused: int = 0,
    *,
    latest: Tally | None = None,
    epochs: int = 1,
) -> dict[str, Any]:
    """The signals of a metric's window as JSON, plus ``signals_flagged``; nothing fires
    on a suppressed window (too few reports to say anything).

    ``per_epoch`` rows are (epoch, tallies, n) in epoch order; without them the
    window is one epoch (no drift, no robust estimate), unless ``latest`` (the
    last epoch's tally) and ``epochs`` (epochs with data in the window) are
    given: then the earlier epochs are pooled (drift, no robust estimate).
    ``refused``: reports the collector refused as implausible in the window (a
    reason of its own).
    """
    labels = _labels(spec)
    rows = [(v, c) for _, v, c in per_epoch if c > 0] or ([(total, n)] if n > 0 else [])
    pooled: int | None = None
    if not per_epoch and latest is not None and epochs > 1 and n > 0:
        vector, count = latest
        earlier = np.asarray(total, dtype=np.int64) - np.asarray(vector, dtype=np.int64)
        rows, pooled = [(earlier, n - int(count)), latest], epochs - 1
    # A string metric's counters are per (level, seed, bucket), not per value: its
    # per-value signals have no meaning (the collector's refusals still count).
    if not rows or n < spec.min_reports or spec.kind == "string":
        return {
            "summary": None,
            "reasons": [],
            "impossible": [],
            "drift": None,
            "robust": None,
            "signals_flagged": False,
        }
    signals = assess(spec.build(), rows[-1], rows[:-1], earlier_epochs=pooled)
    out = {**signals.to_json(labels), "signals_flagged": signals.flagged}
    if refused:
        out["reasons"] = [f"{refused} implausible report(s) refused", *out["reasons"]]
        out["summary"] = "Possible poisoning: " + "; ".join(out["reasons"]) + "."
    return out
