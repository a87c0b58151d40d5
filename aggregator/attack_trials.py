"""Monte Carlo trials of the poisoning harness: how often the signals see an attack.

One scenario = a mechanism, a population of n honest devices (fixed true
values), ``history`` earlier epochs of the same population (30 by default: a
month of daily epochs), and a latest epoch
to which the attacker adds MGA fakes (no tokens: any number of reports from
one fleet key) or in which its own devices send MGA fakes instead of their
honest reports (tokens: one report per device).  The shared helper of
benchmarks/bench_poisoning.py and tests/aggregator/test_poisoning_detection.py.

>>> from ldp_core import mechanism
>>> s = Scenario(mechanism("grr", epsilon=1.0, domain_size=32), honest=10_000)
>>> round(float(s.shares()[s.target]), 4), s.target
(0.0077, 31)
>>> r = run(s, fraction=0.05, trials=20, seed=1)
>>> r.detected, r.trials
(20, 20)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from aggregator.attacks import gain, mga_tallies
from aggregator.drift import mga_laws
from aggregator.poisoning import Policy, Tally, assess, shares
from ldp_core import Mechanism
from ldp_core._rng import WORD
from ldp_core.mechanisms._two_level import TwoLevel
from ldp_core.mechanisms.binary import OneBitTwoLevel
from ldp_core.mechanisms.grr import grr_steps
from ldp_core.mechanisms.olh_memo import LongitudinalOLH
from ldp_core.mechanisms.unary import _LongitudinalUnary

__all__ = ["Outcome", "Scenario", "per_epoch_bound", "predicted_detection", "run"]


@dataclass(frozen=True)
class Scenario:
    """The issue's setting by default: Zipf(1) population, the rarest value targeted."""

    mech: Mechanism
    honest: int = 10_000
    history: int = 30
    tokens: bool = False
    policy: Policy = field(default_factory=Policy)

    @property
    def width(self) -> int:
        """How many shares are estimated (d, or 2 for a binary or mean design)."""
        return self.mech.domain_size if self.mech.kind == "frequency" else 2

    @property
    def target(self) -> int:
        """The value the attacker promotes: the rarest (the "yes" of a binary design)."""
        return self.width - 1

    @property
    def index(self) -> int:
        """Where the target's share sits among the estimated shares (0 for one share)."""
        return self.target if self.mech.kind == "frequency" else 0

    def shares(self) -> npt.NDArray[np.float64]:
        """True shares: Zipf(1) over d values; 70/30 for a binary design."""
        if self.width == 2:
            return np.array([0.7, 0.3])
        w = 1.0 / np.arange(1, self.width + 1)
        return np.asarray(w / w.sum(), dtype=np.float64)

    def values(self, count: int) -> npt.NDArray[np.int64]:
        """``count`` true values with the shares above (largest remainders)."""
        raw = self.shares() * count
        counts = np.floor(raw).astype(np.int64)
        counts[np.argsort(counts - raw)[: count - int(counts.sum())]] += 1
        return np.repeat(np.arange(self.width), counts)

    def fakes(self, fraction: float) -> int:
        """Fake reports for a fraction of all reports (tokens: of the devices)."""
        if self.tokens:
            return round(self.honest * fraction)
        return round(self.honest * fraction / (1 - fraction))


@dataclass(frozen=True)
class Outcome:
    """Counts over the trials of one (scenario, fraction)."""

    trials: int
    detected: int
    mean_shift: float

    @property
    def rate(self) -> float:
        """Share of trials flagged."""
        return self.detected / self.trials


def instant_tally(
    m: Mechanism, permanent: Any, times: int, gen: np.random.Generator
) -> npt.NDArray[np.int64]:
    """The tally of ``times`` epochs of a memoised two-level population (its permanent
    responses, one per device): each epoch re-randomises them through the device
    code's own instantaneous level (bit designs: every bit kept with k = keep / 2**32,
    independently, drawn as two binomials per counter: the same law)."""
    out = np.zeros(m.num_counters, dtype=np.int64)
    if isinstance(m, _LongitudinalUnary | OneBitTwoLevel):
        ones = np.asarray(permanent, dtype=np.int64).reshape(len(permanent), -1).sum(axis=0)
        k = m.keep / WORD
        bits = gen.binomial(ones * times, k) + gen.binomial((len(permanent) - ones) * times, 1 - k)
        if m.num_counters == len(bits):
            return np.asarray(bits, dtype=np.int64)
        return np.array([len(permanent) * times - bits[0], bits[0]], dtype=np.int64)
    for _ in range(times):
        if isinstance(m, LongitudinalOLH):  # a fresh seed, then GRR over the buckets
            seeds = gen.integers(0, m.num_seeds, size=len(permanent))
            batch: Any = (seeds, grr_steps(m.family.hashes(seeds, permanent), m.keep, m.g, gen))
        else:
            assert isinstance(m, TwoLevel)
            batch = m._instant_batch(permanent, gen)
        out += np.bincount(m.batch_counters(batch), minlength=m.num_counters)
    return out


def _honest(
    scenario: Scenario, kept: int, trials: int, epochs: int, gen: np.random.Generator
) -> Iterator[tuple[Tally, list[npt.NDArray[np.int64]]]]:
    """Per trial: the pooled earlier epochs, and ``epochs`` latest honest tallies.

    One level: independent reports.  Two levels: a memoised population, one
    permanent response per device drawn once per trial and re-randomised in
    every epoch; with tokens the attacker's devices are a random part of it."""
    m, n, history = scenario.mech, scenario.honest, scenario.history
    if m.levels == 1:
        latest = m.simulate_tallies(scenario.values(kept), trials * epochs, gen)
        earlier_values = scenario.values(n * history)
        for i in range(trials):
            yield (
                (m.simulate_tallies(earlier_values, 1, gen)[0], n * history),
                list(latest[i * epochs : (i + 1) * epochs]),
            )
        return
    base = m.permanent  # type: ignore[attr-defined]
    for _ in range(trials):
        permanent = base.sample(scenario.values(n), gen)
        stays = permanent[np.sort(gen.permutation(n)[:kept])]
        yield (
            (instant_tally(m, permanent, history, gen), n * history),
            [instant_tally(m, stays, 1, gen) for _ in range(epochs)],
        )


def run(scenario: Scenario, fraction: float, trials: int, seed: int, epochs: int = 1) -> Outcome:
    """Flag rate of ``assess`` over ``trials`` attacks with ``fraction`` MGA fakes in each of
    ``epochs`` consecutive epochs, each tested as the latest against all
    before it (0 = honest data: the false-alarm rate); the shift is the first epoch's."""
    m, gen = scenario.mech, np.random.default_rng(seed)
    fakes = scenario.fakes(fraction)
    kept = scenario.honest - fakes if scenario.tokens else scenario.honest
    detected, shift = 0, 0.0
    truth = scenario.shares()[scenario.target]
    # Two levels: the window's memoised variance (impossible shares) depends on how many
    # epochs the pooled earlier tally holds; one level: it does not (kept as it was).
    pooled = scenario.history if m.levels == 2 else None
    for earlier, latest in _honest(scenario, kept, trials, epochs, gen):
        rows = [earlier]
        seen = False
        for j in range(epochs):
            vector = latest[j] + mga_tallies(m, (scenario.target,), fakes, gen)
            n = kept + fakes
            seen = (
                seen or assess(m, (vector, n), rows, scenario.policy, earlier_epochs=pooled).flagged
            )
            if j == 0:
                shift += float(shares(m, vector, n).value[scenario.index]) - truth
            rows.append((vector, n))
        detected += seen
    return Outcome(trials=trials, detected=detected, mean_shift=shift / trials)


def predicted_detection(scenario: Scenario, fraction: float) -> float:
    """P[the drift test flags the target] by the normal law.

    Where the calibrated likelihood-ratio test applies (``aggregator.drift``), its
    power is ``per_epoch_bound`` at the rise budget: it is the test of that bound
    (two-level GRR, OLH, Hadamard: the bound for independent reports, while the
    memoised null of ``aggregator.drift_memo`` is less noisy: a lower estimate).
    Else the MGA moves the target by fraction (gain - f) over a stderr
    sqrt(se_now^2 + se_before^2) (rare-value variance plus item term) against the
    Bonferroni threshold.  Other signals only add flags."""
    m, f = scenario.mech, float(scenario.shares()[scenario.target])
    policy = scenario.policy
    if policy.calibrate and mga_laws(m) is not None:
        return per_epoch_bound(scenario, fraction, policy.alpha_rise, scenario.history)
    n_now = scenario.honest + (0 if scenario.tokens else scenario.fakes(fraction))
    n_before = scenario.honest * scenario.history
    p, q = m.p_star, m.q_star
    k = scenario.width if m.kind == "frequency" else 1

    def var(n: int) -> float:
        return float(m.count_variance(n, f * n)) / n**2

    se = math.sqrt(var(n_now) + var(n_before))
    shift = fraction * (gain(m) - f)
    assert p > q
    threshold = scenario.policy.quantile(scenario.policy.alpha_rise, k)
    return NormalDist().cdf(shift / se - threshold)


def per_epoch_bound(
    scenario: Scenario, fraction: float, alpha: float = 0.01, history: int | None = None
) -> float:
    """The best flag rate a per-epoch test with false-alarm rate ``alpha`` can reach
    against the MGA on an unknown one of the k values (one-counter-per-report
    mechanisms: those with ``output_distribution``; normal approximation).

    With tokens the attacker's devices replace honest ones (n - m honest, m fakes).
    The honest output law P0 (from the true shares) is known exactly, or,
    with ``history``, estimated from that many earlier epochs of the same size.
    An MGA fake is uniform over the counters that support the target, law F.
    Against that one target the most powerful statistic (Neyman-Pearson,
    locally at small fractions) weighs each counter by F/P0; its shift over its
    sd is delta (divided by sqrt(1 + 1/history) when P0 is estimated).  Not
    knowing the target, the best symmetric test at level alpha is the mixture
    likelihood ratio over the k values, whose power equals (within 0.001 by
    simulation at k = 32) that of the largest of k independent z-scores at the
    exact level: 1 - Phi(c - delta) Phi(c)^(k-1), c = Phi^-1((1-alpha)^(1/k)).

    >>> from ldp_core import mechanism
    >>> s = Scenario(mechanism("hadamard", epsilon=1.0, domain_size=32))
    >>> round(per_epoch_bound(s, 0.05), 3), round(per_epoch_bound(s, 0.05, history=10), 3)
    (0.973, 0.953)
    >>> round(per_epoch_bound(s, 0.05, history=30), 3)
    0.967
    """
    m = scenario.mech
    f = scenario.shares()
    law = np.sum([f[v] * m.output_distribution(v) for v in range(len(f))], axis=0)
    eye = np.eye(m.num_counters, dtype=np.int64)
    support = np.array(
        [m.support_counts(eye[c])[scenario.target] for c in range(len(law))], dtype=np.float64
    )
    fake = support / support.sum()
    w = fake / law
    fakes = scenario.fakes(fraction)
    honest = scenario.honest - fakes if scenario.tokens else scenario.honest
    delta = (
        fakes * float(w @ fake - w @ law) / math.sqrt(honest * float(w**2 @ law - (w @ law) ** 2))
    )
    if history:
        delta /= math.sqrt(1 + 1 / history)
    k = scenario.width
    normal = NormalDist()
    c = normal.inv_cdf((1 - alpha) ** (1 / k))
    return 1 - normal.cdf(c - delta) * normal.cdf(c) ** (k - 1)
