"""The privacy audit: every mechanism passes, planted bugs are caught, paths agree.

Every pass/fail below is a statistical statement with its false-positive rate
in a comment (<= 1e-6).  An audit's lower bound exceeds the true epsilon with
probability <= 1 - confidence; the tests use confidence = 1 - 1e-6.
"""

from __future__ import annotations

import math
import random
from dataclasses import FrozenInstanceError, dataclass
from typing import Any

import numpy as np
import pytest

from ldp_core import (
    OLH,
    OUE,
    LongitudinalOLH,
    LongitudinalOUE,
    Mechanism,
    longitudinal,
    mechanism,
)
from ldp_core._rng import Rng
from ldp_core.audit import (
    AuditResult,
    audit,
    audit_all,
    audit_mechanisms,
    beta_inc,
    cp_lower,
    cp_upper,
    design,
    epsilon_lower_bound,
    format_table,
    sample_events,
)
from ldp_core.registry import classes

CONFIDENCE = 1 - 1e-6


def small_mechanisms(eps: float) -> list[Mechanism]:
    """Every mechanism (one- and two-level) over small domains, quick to audit."""
    return audit_mechanisms(eps, domain_size=5)


def ids(ms: list[Mechanism]) -> list[str]:
    return [f"{m.name}/{getattr(m, 'levels', 1)}" for m in ms]


# -- Clopper-Pearson in pure Python -----------------------------------------------------------


def test_incomplete_beta_and_cp_match_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for a, b, x in [(2, 3, 0.4), (0.5, 0.5, 0.1), (50, 70, 0.45), (1e5, 9e5, 0.1001)]:
        assert beta_inc(a, b, x) == pytest.approx(stats.beta.cdf(x, a, b), rel=1e-9, abs=1e-15)
    for k, n, alpha in [(1, 10, 0.05), (7, 7, 0.01), (0, 50, 0.01), (268_941, 10**6, 2.5e-7)]:
        lo, hi = cp_lower(k, n, alpha), cp_upper(k, n, alpha)
        ref_lo = 0.0 if k == 0 else stats.beta.ppf(alpha, k, n - k + 1)
        ref_hi = 1.0 if k == n else stats.beta.ppf(1 - alpha, k + 1, n - k)
        # Outward: never tighter than the exact bound, and within 1e-7 of it.
        assert ref_lo - 1e-7 * ref_lo <= lo <= ref_lo
        assert ref_hi <= hi <= ref_hi + 1e-7


def test_lower_bound_validation_and_symmetry() -> None:
    assert epsilon_lower_bound(500, 500, 1000, 0.99) == 0.0
    assert epsilon_lower_bound(0, 0, 1000, 0.99) == 0.0
    # The complementary event counts too: P[not E] 0.5 vs 0.05 is eps >= ln 10 - noise.
    assert epsilon_lower_bound(9500, 5000, 10_000, 0.99) > 2.0
    with pytest.raises(ValueError, match="confidence"):
        epsilon_lower_bound(1, 1, 10, 1.0)
    with pytest.raises(ValueError):
        cp_lower(11, 10, 0.1)


# -- the design attains epsilon --------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_design_event_is_most_powerful(eps: float) -> None:
    """ln(P[E|x]/P[E|x']) (or its complement) equals the channel's epsilon exactly."""
    for m in small_mechanisms(eps):
        p1, p2 = design(m).probabilities
        best = max(math.log(p1 / p2), math.log((1 - p2) / (1 - p1)))
        assert best <= m.epsilon
        assert best == pytest.approx(m.epsilon_actual, abs=1e-9), m.name


# -- every mechanism through the REAL device randomiser ------------------------------------


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_every_mechanism_passes_on_the_device_path(eps: float) -> None:
    """No violation: each fails spuriously with probability <= 1e-6 (the confidence).

    The null control (x' = x, truth 0) is also a lower bound valid at 1 - 1e-6,
    so it exceeds 0.05 > 0 with probability <= 1e-6.
    """
    for i, m in enumerate(small_mechanisms(eps)):
        r = audit(m, trials=4000, confidence=CONFIDENCE, seed=100 + i, vectorised=False)
        assert r.path == ("memoised device path" if m.levels == 2 else "device path")
        assert not r.violation, r.text()
        assert r.lower_bound <= r.declared_epsilon
        assert r.null_control < 0.05, r.text()


def test_two_level_memoised_device_path_passes() -> None:
    """The memoised path (HMAC-DRBG permanent level), fresh secret per report."""
    for m in small_mechanisms(1.0):
        if getattr(m, "levels", 1) != 2:
            continue
        r = audit(m, trials=1500, confidence=CONFIDENCE, seed=3, vectorised=False)
        assert r.path == "memoised device path"
        assert not r.violation and r.null_control < 0.05, r.text()


def test_vectorised_audit_at_one_million_trials_is_tight() -> None:
    """eps = 1, 10^6 trials: lower bound in [0.8 eps, eps], null < 0.05.

    Measured lb/eps is about 0.98-0.99; the bound is log-ratio of proportions
    whose sd is <= 0.003 here, so falling below 0.8 is a > 50 sd event.
    """
    for i, m in enumerate(audit_mechanisms(1.0, domain_size=8)):
        r = audit(m, trials=10**6, confidence=CONFIDENCE, seed=200 + i)
        assert r.path == "vectorised"
        assert 0.8 * m.epsilon <= r.lower_bound <= m.epsilon, r.text()
        assert r.null_control < 0.05
        # The declared eps is the requested one, tight; two-level OLH charges its exact
        # one-report eps_1 (0.48 here), below its instantaneous level's, which is tight.
        tight = m.instantaneous_epsilon if isinstance(m, LongitudinalOLH) else m.epsilon
        assert tight >= 1.0 - 1e-6


# -- the vectorised path is the device path, in distribution ---------------------------------


def test_vectorised_and_device_paths_agree() -> None:
    """Two-sample test per (mechanism, input), and both against the exact P[E].

    For each of the k registered classes x 2 inputs x 2 paths, a two-sided CP
    interval at level 1e-6 / (4 k): all cover their true P[E] with probability
    >= 1 - 1e-6.
    When they do, both paths' intervals contain the design's exact probability
    (if the paths agree with the mechanism) and so they intersect.
    """
    mechanisms = audit_mechanisms(1.0, domain_size=4)
    alpha = 1e-6 / (4 * len(mechanisms))
    for i, m in enumerate(mechanisms):
        d = design(m)
        for value, exact in zip((d.x, d.x_prime), d.probabilities, strict=True):
            n_dev, n_vec = 5000, 200_000
            dev = sample_events(m, value, n_dev, vectorised=False, rng=random.Random(i))
            vec = sample_events(m, value, n_vec, vectorised=True, gen=np.random.default_rng(i))
            dev_ci = (cp_lower(dev, n_dev, alpha / 2), cp_upper(dev, n_dev, alpha / 2))
            vec_ci = (cp_lower(vec, n_vec, alpha / 2), cp_upper(vec, n_vec, alpha / 2))
            assert dev_ci[0] <= vec_ci[1] and vec_ci[0] <= dev_ci[1], (m.name, value)
            assert vec_ci[0] <= exact <= vec_ci[1], (m.name, value, vec / n_vec, float(exact))
            assert dev_ci[0] <= exact <= dev_ci[1], (m.name, value, dev / n_dev, float(exact))


# -- planted bugs ---------------------------------------------------------------------------


@dataclass(frozen=True, init=False)
class NeverClearsOUE(OUE):
    """Planted bug: a unary encoder that never clears the true value's 1 bit."""

    def _perturb(self, value: int | float, rng: Rng) -> tuple[int, ...]:
        return tuple(sorted({*super()._perturb(value, rng), int(value)}))


@dataclass(frozen=True, init=False)
class LeakyOLH(OLH):
    """Planted bug: OLH that sends the true bucket unperturbed half of the time."""

    def _perturb(self, value: int | float, rng: Rng) -> tuple[int, int]:
        seed, y = super()._perturb(value, rng)
        if rng.randrange(2):
            return seed, self.bucket(seed, int(value))
        return seed, y


@dataclass(frozen=True)
class StickyOnesOUE(LongitudinalOUE):
    """Planted bug (two-level): the instantaneous level never clears a permanent 1."""

    def _instant(self, permanent: Any, rng: Rng) -> tuple[int, ...]:
        return tuple(sorted({*super()._instant(permanent, rng), *permanent}))


def planted() -> list[Mechanism]:
    good = longitudinal("oue", epsilon=1.0, epsilon_inf=2.0, domain_size=5)
    assert isinstance(good, LongitudinalOUE)
    sticky = StickyOnesOUE(base=good.base, declared_epsilon=1.0, epsilon_inf=2.0, keep=good.keep)
    return [NeverClearsOUE(1.0, 5), LeakyOLH(1.0, 5), sticky]


@pytest.mark.parametrize(
    ("m", "trials"),
    list(zip(planted(), (20_000, 20_000, 50_000), strict=True)),
    ids=["never-clears-oue", "leaky-olh", "sticky-rappor"],
)
def test_planted_bugs_are_violations(m: Mechanism, trials: int) -> None:
    """Each bug's true epsilon exceeds its declared 1.0.

    never-clears: under x' bit x' is always set, so E is impossible: eps = inf.
    leaky OLH (d=5, g=3, c=1/4): P[bucket kept] = 0.788, ratio 7.4, eps = 2.0.
    sticky RAPPOR: P[bit x = 1] = 0.598 vs 0.292, ratio 3.6, eps = 1.28.
    The CP slack is ~5 sd per bound; the remaining margin is > 6 sd in every
    case (sd of the log-ratio: 0.02 at 20000 trials, 0.013 at 50000), so the
    audit misses a bug with probability < 1e-9.
    """
    r = audit(m, trials=trials, confidence=CONFIDENCE, seed=5)
    # A subclass is never vectorised; a two-level one runs its memoised device path.
    assert r.path == ("memoised device path" if m.levels == 2 else "device path")
    assert r.violation, r.text()
    assert "VIOLATION" in r.text()
    with pytest.raises(ValueError, match="vectorised"):
        audit(m, trials=10, vectorised=True)


# -- results and the table ------------------------------------------------------------------


def test_result_is_frozen_and_prints_one_line() -> None:
    r = audit(mechanism("grr", epsilon=1.0, domain_size=4), trials=1000, seed=1, vectorised=False)
    assert isinstance(r, AuditResult)
    with pytest.raises(FrozenInstanceError):
        r.lower_bound = 9.0  # type: ignore[misc]
    line = r.text()
    assert "\n" not in line and "grr d=4" in line and "null control" in line
    assert str(r) == line
    assert r.to_json()["violation"] is False and r.to_json()["text"] == line
    with pytest.raises(ValueError, match="trials"):
        audit(mechanism("grr", epsilon=1.0, domain_size=4), trials=0)


def test_audit_all_and_format_table() -> None:
    results = audit_all(epsilons=(1.0,), trials=20_000, seed=1)
    assert len(results) == len(classes())  # every registered class, once at eps = 1
    assert {r.levels for r in results} == {1, 2}
    table = format_table(results)
    assert table.count("\n") == len(results) + 3
    assert "oue/2-level d=8" in table and "0 violations" in table
    rows = table.splitlines()[2:-2]
    assert len({len(row) for row in rows}) == 1, rows  # aligned, the longest label too


@pytest.mark.slow
def test_full_audit_table_at_one_million_trials() -> None:
    """Every registered class at 3 epsilons, 10^6 trials (vectorised): none violates;
    each lb >= min(0.8 eps, eps - 0.07).

    Violation: <= 1e-6 each at the confidence.  0.8 eps: > 50 sd (see above).  A small
    eps (two-level OLH charges eps_1 = 0.096 at eps = 0.5, eps_inf = 1) is below the
    audit's resolution relative to itself: with event probabilities >= 0.06 the four
    one-sided CP bounds lower the log-ratio by <= 0.04 and its sd is <= 0.0056, so
    eps - 0.07 is > 5 sd below the expected lower bound.
    """
    results = audit_all(epsilons=(0.5, 1.0, 2.0), trials=10**6, seed=2, confidence=CONFIDENCE)
    print("\n" + format_table(results))
    for r in results:
        assert not r.violation, r.text()
        eps = r.declared_epsilon
        assert r.lower_bound >= min(0.8 * eps, eps - 0.07), r.text()
        assert r.null_control < 0.05


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grr", "oue", "olh"])
def test_device_path_is_tight_at_scale(name: str) -> None:
    """Through m.randomize, 100000 trials at eps = 1: lb >= 0.8 eps (sd <= 0.01,
    a > 10 sd margin beyond the CP slack), both levels."""
    for m in (
        mechanism(name, epsilon=1.0, domain_size=8),
        longitudinal(name, epsilon=1.0, epsilon_inf=2.0, domain_size=8),
    ):
        r = audit(m, trials=100_000, confidence=CONFIDENCE, seed=9, vectorised=False)
        assert not r.violation and r.lower_bound >= 0.8 * m.epsilon, r.text()
