"""Repeated reporting of a numeric value: what 365 reports leak, and what a mean costs.

Run: ``.venv/bin/python benchmarks/bench_memoised_mean.py [--quick]`` (about 2
minutes on 2 idle cores; --quick about 30 s).

Table 1, "does not average away": devices hold lo or hi of [0, 1] (the pair
farthest apart) and report it in each of 365 epochs.  For each device the exact
log-likelihood ratio ln P[its 365 reports | hi] / P[... | lo] is computed from
the channels (two levels: a mixture over the permanent response, so it can
never pass ln(a1/b1) = eps_inf); the table prints its largest value over the
devices (the privacy loss realised, against the lifetime bound), the mean
posterior P[hi | reports] of a device at hi under a fair prior (bounded by
e^eps_inf / (1 + e^eps_inf) for a memoised form), and the RMSE of the device's
own average report as an estimate of its value after 1, 30 and 365 epochs
(one level: it shrinks as 1/sqrt(T); memoised: it stops at the permanent
level's noise).

Table 2, the variance of the mean against two-level 1BitMean: 1000 devices
with values uniform on [0, 1], each reporting in every epoch of a window of T
epochs (T = 1 and 30), eps_inf in {1, 2, 4}, eps_1 in {0.5, 1}.  "exact" is
sum_i [V*(x_i) + (T - 1) V1(x_i)] / (n^2 T) from the hooks (the variance of the
window mean when every device reports every epoch); "measured" is the variance
of the window mean over R simulated windows through the mechanisms' own
vectorised samplers (permanent level per device, then T instantaneous draws),
in the same run (500 windows: each measured variance is within about 6% of the
exact one, sd sqrt(2/500)).  The ratio is 1BitMean's variance over the Piecewise's.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._table import header, table
from ldp_core import Mechanism, longitudinal, mechanism
from ldp_core._rng import WORD
from ldp_core.mechanisms.mean import LongitudinalOneBitMean, OneBitMean
from ldp_core.mechanisms.piecewise import PiecewiseHooks, PiecewiseMean
from ldp_core.mechanisms.piecewise_memo import LongitudinalPiecewise

LIFETIME = 365


def _logsumexp(a: npt.NDArray[np.float64], axis: int) -> npt.NDArray[np.float64]:
    top = a.max(axis=axis, keepdims=True)
    return np.squeeze(top, axis) + np.log(np.exp(a - top).sum(axis=axis))  # type: ignore[no-any-return]


def log_likelihoods(m: Mechanism, reports: npt.NDArray[np.int64],
                    values: tuple[float, ...]) -> npt.NDArray[np.float64]:
    """ln P[row of reports | x] for each row and each x in ``values``: shape (rows, len)."""
    rows = reports.shape[0]
    out = np.empty((rows, len(values)))
    if isinstance(m, LongitudinalPiecewise | LongitudinalOneBitMean):
        size = m.num_counters
        kappa = m.keep / WORD
        if isinstance(m, LongitudinalPiecewise):
            # P2(r | c) = kappa [r = c] + (1 - kappa)/M: only n_c = #{t: r_t = c} matters.
            counts = np.stack([np.bincount(r, minlength=size) for r in reports])
            keep_log = math.log(kappa + (1 - kappa) / size)
            other_log = math.log((1 - kappa) / size)
            given = counts * keep_log + (reports.shape[1] - counts) * other_log
            for i, x in enumerate(values):
                prior = np.log(np.maximum(m.permanent.output_distribution(x), 1e-300))
                out[:, i] = _logsumexp(given + prior, axis=1)
            return out
        ones = reports.sum(axis=1)
        zeros = reports.shape[1] - ones
        given = np.stack([ones * math.log(1 - kappa) + zeros * math.log(kappa),
                          ones * math.log(kappa) + zeros * math.log(1 - kappa)], axis=1)
        for i, x in enumerate(values):
            one = float(m.permanent.one_probability(x))
            out[:, i] = _logsumexp(given + np.log([1 - one, one]), axis=1)
        return out
    if isinstance(m, PiecewiseMean):
        for i, x in enumerate(values):
            out[:, i] = np.log(m.output_distribution(x))[reports].sum(axis=1)
        return out
    assert isinstance(m, OneBitMean)
    for i, x in enumerate(values):
        one = float(m.one_probability(x))
        out[:, i] = np.where(reports == 1, math.log(one), math.log(1 - one)).sum(axis=1)
    return out


def lifetime_reports(m: Mechanism, value: float, devices: int, epochs: int,
                     gen: np.random.Generator) -> npt.NDArray[np.int64]:
    """(devices, epochs) reports of one fixed value, memoised where ``m`` is."""
    if isinstance(m, LongitudinalPiecewise | LongitudinalOneBitMean):
        permanent = m.permanent.sample(np.full(devices, value), gen)
        batch = m._instant_batch(np.repeat(np.asarray(permanent, dtype=np.int64), epochs), gen)
    else:
        batch = m.sample(np.full(devices * epochs, value), gen)
    return np.asarray(batch, dtype=np.int64).reshape(devices, epochs)


def unbiased_values(m: Mechanism) -> npt.NDArray[np.float64]:
    """The unbiased estimate of x each report stands for (cells, or the bit's two)."""
    if isinstance(m, PiecewiseHooks):
        return np.asarray(m.report_values())
    p, q = m.p_star, m.q_star
    lo, hi = m.lo, m.hi  # type: ignore[attr-defined]
    return np.array([lo + (b - q) / (p - q) * (hi - lo) for b in (0, 1)])


def lifetime_rows(devices: int, gen: np.random.Generator) -> list[list[str]]:
    rows = []
    for eps, eps_inf in ((0.5, 1.0), (1.0, 2.0), (1.0, 4.0)):
        built: list[tuple[str, Mechanism, float]] = [
            ("piecewise, 1 level", mechanism("piecewise", epsilon=eps, lo=0.0, hi=1.0), math.inf),
            ("one_bit_mean, 1 level", mechanism("one_bit_mean", epsilon=eps, lo=0.0, hi=1.0),
             math.inf),
        ]
        for name in ("piecewise", "one_bit_mean"):
            m = longitudinal(name, epsilon=eps, epsilon_inf=eps_inf, lo=0.0, hi=1.0)
            built.append((f"{name}, memoised", m, m.permanent.epsilon_actual))  # type: ignore[attr-defined]
        for label, m, bound in built:
            at_hi = lifetime_reports(m, 1.0, devices, LIFETIME, gen)
            at_lo = lifetime_reports(m, 0.0, devices, LIFETIME, gen)
            ll_hi = log_likelihoods(m, at_hi, (1.0, 0.0))
            ll_lo = log_likelihoods(m, at_lo, (1.0, 0.0))
            ratio = np.concatenate([ll_hi[:, 0] - ll_hi[:, 1], ll_lo[:, 1] - ll_lo[:, 0]])
            posterior = 1 / (1 + np.exp(np.clip(-(ll_hi[:, 0] - ll_hi[:, 1]), -700, 700)))
            y = unbiased_values(m)
            rmse = [float(np.sqrt(((y[at_hi[:, :t]].mean(axis=1) - 1.0) ** 2).mean()))
                    for t in (1, 30, LIFETIME)]
            verdict = "holds" if ratio.max() <= bound else "EXCEEDED"
            rows.append([
                label, f"{eps:g}", "-" if bound == math.inf else f"{eps_inf:g}",
                f"{ratio.max():.6f}",
                "-" if bound == math.inf else f"{bound:.6f} ({verdict})",
                f"{posterior.mean():.4f}",
                *(f"{r:.3f}" for r in rmse),
            ])
    return rows


def per_report_variance(m: Mechanism, x: npt.NDArray[np.float64], epochs: int) -> float:
    """mean_i [V*(x_i) + (T - 1) V1(x_i)]: T reports of each device, per report x T."""

    def one(level: Any) -> npt.NDArray[np.float64]:
        if isinstance(level, PiecewiseHooks):
            return np.array([level.value_variance(float(v)) for v in x])
        p, q = level.p_star, level.q_star
        pi = q + (x - level.lo) / (level.hi - level.lo) * (p - q)
        return pi * (1 - pi) / (p - q) ** 2 * (level.hi - level.lo) ** 2  # type: ignore[no-any-return]

    permanent = one(m.permanent)  # type: ignore[attr-defined]
    return float((one(m) + (epochs - 1) * permanent).mean())


def measured_variance(m: Mechanism, x: npt.NDArray[np.float64], epochs: int, windows: int,
                      gen: np.random.Generator) -> float:
    """The variance of the window mean over ``windows`` simulated windows."""
    y = unbiased_values(m)
    means = np.empty(windows)
    n = len(x)
    for w in range(windows):
        permanent = np.asarray(m.permanent.sample(x, gen), dtype=np.int64)  # type: ignore[attr-defined]
        reports = m._instant_batch(np.repeat(permanent, epochs), gen)  # type: ignore[attr-defined]
        means[w] = y[np.asarray(reports, dtype=np.int64)].sum() / (n * epochs)
    return float(means.var(ddof=1))


def variance_rows(devices: int, windows: int, gen: np.random.Generator) -> list[list[str]]:
    x = gen.uniform(0.0, 1.0, devices)
    rows = []
    for eps_inf in (1.0, 2.0, 4.0):
        for eps in (0.5, 1.0):
            if eps >= eps_inf:
                continue
            pm = longitudinal("piecewise", epsilon=eps, epsilon_inf=eps_inf, lo=0.0, hi=1.0)
            bit = longitudinal("one_bit_mean", epsilon=eps, epsilon_inf=eps_inf, lo=0.0, hi=1.0)
            for epochs in (1, 30):
                exact = [per_report_variance(m, x, epochs) / (devices * epochs) for m in (pm, bit)]
                got = [measured_variance(m, x, epochs, windows, gen) for m in (pm, bit)]
                rows.append([
                    f"{eps_inf:g}", f"{eps:g}", str(epochs),
                    f"{exact[0]:.3e}", f"{got[0]:.3e}", f"{exact[1]:.3e}", f"{got[1]:.3e}",
                    f"{exact[1] / exact[0]:.2f}", f"{got[1] / got[0]:.2f}",
                ])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer devices and windows")
    args = parser.parse_args()
    devices, windows = (500, 200) if args.quick else (2000, 500)
    gen = np.random.default_rng(2026)
    print(header(f"Memoised means: {LIFETIME} reports of one value, {devices} devices per value"))
    print(table(
        ["mechanism", "eps_1", "eps_inf", "max ln LR (365 reports)", "lifetime bound",
         "mean P(hi given reports)", "RMSE avg, T=1", "T=30", "T=365"],
        lifetime_rows(devices, gen),
    ))
    print()
    print(header(f"Variance of the window mean, 1000 devices uniform on [0, 1], "
                 f"{windows} windows measured"))
    print(table(
        ["eps_inf", "eps_1", "epochs", "piecewise exact", "measured", "1BitMean exact",
         "measured", "ratio exact", "ratio measured"],
        variance_rows(1000, windows, gen),
    ))


if __name__ == "__main__":
    main()
