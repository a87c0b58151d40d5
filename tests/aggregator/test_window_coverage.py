"""Window intervals of memoised (two-level) metrics cover the truth: exact simulation.

A fleet of 1000 devices, each with one fixed value, reports in every epoch (the
worst case for the correlation of one device's reports, where the bound of
``aggregator.estimate`` is an equality).  For a window of T epochs the 95%
interval of the checked value must cover the truth in 94-97% of replications
for every two-level mechanism, and in 94-96% for a one-level metric.

Why the simulation is exact in distribution for the support count C(u) of the
checked value u (the only tally that c_hat(u), its stderr and its interval
depend on, with n = T x 1000 fixed):

- two levels: device i's permanent response B'_i supports u with probability
  pi_i = p1 (value u) or q1 (another value), independently across devices
  (fresh secret per device); given B'_i, each of its T reports supports u with
  probability p2 (B'_i supports u) or q2, independently.  So the number S of
  devices whose B' supports u is Bin(c, p1) + Bin(N - c, q1), and given S,
  C(u) is a sum of T S Bernoulli(p2) and T (N - S) Bernoulli(q2), i.e.
  Bin(T S, p2) + Bin(T (N - S), q2): per-device binomials summed, drawn at once.
  (p2, q2) come from the mechanism's own exact channels, (p*, q*) = m.channel
  and (p1, q1) = m.permanent.channel: p2 - q2 = (p* - q*)/(p1 - q1),
  q2 = p* - p1 (p2 - q2); ``two_level_law`` checks q* = q2 + q1 (p2 - q2)
  exactly, and tests/aggregator/test_window_memoised.py ties the law to the real samplers.
  For 1BitMean pi_i = P[B' = 1 | x_i] = ``m.permanent.one_probability(x_i)``.
- one level: every report is an independent draw, so C(u) is Bin(T c, p*) +
  Bin(T (N - c), q*) (per value group for the mean).

False-positive rate.  The coverage count of R replications of an honest 95%
interval is Bin(R, 0.95).  With R = 100,000 the chance that it falls outside
[94%, 96%] (or [94%, 97%]) is 2e-45, computed in
``test_replications_give_the_stated_false_positive_rate``; over the 42 cells
below the file errs with probability < 1e-40.  The bands are not tuned to the
simulation: the normal interval's true coverage is not exactly 95%, and the
lowest measured (2,000,000 replications) is 94.62% for GRR's rare value
(100 of 1000 devices) in a window of one epoch, one- and two-level alike (the
normal approximation of a small count); an interval at 94.5% still passes
[94%, ...] except with probability < 1e-11.  Seeds are fixed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from aggregator.estimate import (
    estimate,
    window_count_variance,
    window_mean_variance,
    z_value,
)
from ldp_core import Mechanism, longitudinal, mechanism
from ldp_core.simulate import tallies

REPLICATIONS = 100_000
WINDOWS = (1, 7, 30)
EPS, EPS_INF = 1.0, 2.0
#: Devices per value, 1000 in all (the checked values are 0 and 3).
COUNTS_4 = (400, 300, 200, 100)
COUNTS_16 = COUNTS_4 + (0,) * 12
#: 1BitMean on [0, 10]: half the devices at 2.5, half at 3.5.
MEAN_GROUPS = ((500, 2.5), (500, 3.5))
LO, HI = 0.0, 10.0


@dataclass(frozen=True)
class Case:
    """One mechanism, its fleet (devices per value) and the value whose interval is checked."""

    label: str
    m: Mechanism
    groups: tuple[tuple[int, float], ...]
    target: int  # frequency: the value u; binary: 1; mean: unused

    @property
    def devices(self) -> int:
        return sum(k for k, _ in self.groups)

    @property
    def two_level(self) -> bool:
        return self.m.levels == 2


def _freq(name: str, d: int, u: int, levels: int = 2) -> Case:
    counts = COUNTS_4 if d == 4 else COUNTS_16
    m = (
        longitudinal(name, epsilon=EPS, epsilon_inf=EPS_INF, domain_size=d)
        if levels == 2
        else mechanism(name, epsilon=EPS, domain_size=d)
    )
    groups = tuple((k, float(v)) for v, k in enumerate(counts) if k)
    return Case(f"{name}{'' if levels == 2 else '-1level'} d={d} u={u}", m, groups, u)


def cases() -> list[Case]:
    out = [_freq(name, d, u) for name, d in (("grr", 4), ("sue", 16), ("oue", 16), ("olh", 16),
                                             ("hadamard", 16))
           for u in (0, 3)]
    out.append(Case("binary_rr", longitudinal("binary_rr", epsilon=EPS, epsilon_inf=EPS_INF),
                    ((300, 1.0), (700, 0.0)), 1))
    out.append(Case("one_bit_mean",
                    longitudinal("one_bit_mean", epsilon=EPS, epsilon_inf=EPS_INF, lo=LO, hi=HI),
                    MEAN_GROUPS, 0))
    out += [_freq("grr", 4, u, levels=1) for u in (0, 3)]
    return out


CASES = cases()


def two_level_law(m: Mechanism) -> tuple[Fraction, Fraction]:
    """(p2, q2): P[a report supports u | B' supports u], and | B' does not."""
    p, q = m.channel
    p1, q1 = m.permanent.channel  # type: ignore[attr-defined]
    spread = (p - q) / (p1 - q1)
    q2 = p - p1 * spread
    p2 = q2 + spread
    assert q == q2 + q1 * spread, (m.name, p, q, p1, q1)
    assert 0 <= q2 < p2 <= 1
    return p2, q2


def _first_level(case: Case, value: float) -> Fraction:
    """P[the device's B' (two levels) or its report (one level) supports the target]."""
    m = case.m
    if m.kind == "mean":
        base = m.permanent if case.two_level else m  # type: ignore[attr-defined]
        return Fraction(base.one_probability(value))
    p, q = (m.permanent.channel if case.two_level else m.channel)  # type: ignore[attr-defined]
    return p if int(value) == case.target else q


def simulate_support(
    case: Case, epochs: int, replications: int, seed: int
) -> npt.NDArray[np.int64]:
    """C(target) of a window of ``epochs`` epochs, ``replications`` times (module docstring)."""
    rng = np.random.default_rng(seed)
    if not case.two_level:
        total = np.zeros(replications, dtype=np.int64)
        for k, value in case.groups:
            total += rng.binomial(epochs * k, float(_first_level(case, value)), replications)
        return total
    p2, q2 = two_level_law(case.m)
    supported = np.zeros(replications, dtype=np.int64)
    for k, value in case.groups:
        supported += rng.binomial(k, float(_first_level(case, value)), replications)
    rest = case.devices - supported
    return rng.binomial(epochs * supported, float(p2)) + rng.binomial(epochs * rest, float(q2))


@dataclass(frozen=True)
class Coverage:
    honest: float  # with the window variance (epochs = T)
    naive: float  # every report independent (epochs = 1): today's defect
    spread_ratio: float  # sd of the estimate over the mean reported stderr (honest)


def coverage(case: Case, epochs: int, replications: int = REPLICATIONS,
             seed: int = 0, confidence: float = 0.95) -> Coverage:
    """Share of replications whose interval covers the truth, honest and naive."""
    m = case.m
    n = epochs * case.devices
    support = simulate_support(case, epochs, replications, seed)
    p, q = m.p_star, m.q_star
    z = z_value(confidence)
    if m.kind == "mean":
        share = (support / n - q) / (p - q)
        truth = sum(k * (v - LO) / (HI - LO) for k, v in case.groups) / case.devices
        se = np.sqrt(window_mean_variance(m, n, share, epochs))
        se1 = np.sqrt(window_mean_variance(m, n, share, 1))
        error = share - truth
    else:
        c_hat = (support - n * q) / (p - q)
        truth = epochs * sum(k for k, v in case.groups if int(v) == case.target)
        plug_in = np.clip(c_hat, 0, n)
        se = np.sqrt(window_count_variance(m, n, plug_in, epochs))
        se1 = np.sqrt(window_count_variance(m, n, plug_in, 1))
        error = c_hat - truth
    return Coverage(
        honest=float(np.mean(np.abs(error) <= z * se)),
        naive=float(np.mean(np.abs(error) <= z * se1)),
        spread_ratio=float(np.std(error) / np.mean(se)),
    )


def false_failure(replications: int, lo: float, hi: float, p: float = 0.95) -> float:
    """P[Bin(R, p)/R outside [lo, hi]]: an honest interval failing the band."""
    below = stats.binom.cdf(math.ceil(lo * replications) - 1, replications, p)
    above = stats.binom.sf(math.floor(hi * replications), replications, p)
    return float(below + above)


def test_replications_give_the_stated_false_positive_rate() -> None:
    cells = len(CASES) * len(WINDOWS)
    assert cells == 42
    assert cells * false_failure(REPLICATIONS, 0.94, 0.96) < 1e-40
    assert cells * false_failure(REPLICATIONS, 0.94, 0.97) < 1e-40
    # 1000 replications would not do: an honest interval fails [94%, 97%] 7% of the time.
    assert false_failure(1000, 0.94, 0.97) > 0.05
    # Robust to an honest interval slightly below nominal: 94.5% fails < 1e-11.
    assert false_failure(REPLICATIONS, 0.94, 1.0, p=0.945) < 1e-11


@pytest.mark.parametrize("epochs", WINDOWS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_window_intervals_cover(case: Case, epochs: int) -> None:
    result = coverage(case, epochs, seed=epochs * 1000 + CASES.index(case))
    if case.two_level:
        assert 0.94 <= result.honest <= 0.97, result
        if epochs == 30:
            # Today's intervals (reports taken as independent) cover ~45-60%, and
            # 84-89% for OLH, whose instantaneous level (eps_2 = eps_1) carries
            # less of u: the test fails on the code before the fix.
            assert result.naive < (0.92 if case.m.name == "olh" else 0.80), result
    else:
        assert 0.94 <= result.honest <= 0.96, result
        assert result.naive == result.honest  # one level: epochs change nothing


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_estimate_serves_the_window_variance(case: Case) -> None:
    """``estimate(..., epochs=T)`` gives exactly the stderr the coverage test checks."""
    m = case.m
    values = np.concatenate([np.full(k, v) for k, v in case.groups])
    if m.kind != "mean":
        values = values.astype(np.int64)
    t, n = tallies(m, values, seed=7)
    for epochs in WINDOWS:
        e = estimate(m, t, n, epochs=epochs)
        support = m.support_counts(t)
        p, q = m.p_star, m.q_star
        if m.kind == "mean":
            share = (support[1] / n - q) / (p - q)
            want = math.sqrt(float(window_mean_variance(m, n, share, epochs))) * (HI - LO)
            assert e.stderr == pytest.approx(want, rel=1e-12)
            continue
        u = case.target if m.kind == "frequency" else 1
        c_hat = (support[u] - n * q) / (p - q)
        want = math.sqrt(float(window_count_variance(m, n, min(max(c_hat, 0), n), epochs))) / n
        got = e.stderr[u] if m.kind == "frequency" else e.stderr  # type: ignore[index]
        assert got == pytest.approx(want, rel=1e-12)
    one, thirty = estimate(m, t, n), estimate(m, t, n, epochs=30)
    ratio = np.asarray(thirty.stderr) / np.asarray(one.stderr)
    if case.two_level:
        # 30 epochs: the bound is >= 2x the naive stderr (OLH: >= 1.1x, its reports say
        # less about the permanent u, so the correlation term weighs less).
        assert np.all(ratio > (1.1 if m.name == "olh" else 2.0)), ratio
    else:
        assert np.all(ratio == 1.0)


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "7"])
def test_estimate_refuses_a_bad_epoch_count(bad: object) -> None:
    m = longitudinal("grr", epsilon=EPS, epsilon_inf=EPS_INF, domain_size=4)
    with pytest.raises(ValueError, match="epochs must be a positive number"):
        estimate(m, [250, 250, 250, 250], 1000, epochs=bad)  # type: ignore[arg-type]
