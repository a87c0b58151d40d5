"""The two-level string form (``prefix_memo``): derivation, channel, audit, no averaging."""

from __future__ import annotations

import math
import os
import random
from fractions import Fraction

import numpy as np
import pytest

from ldp_core import longitudinal
from ldp_core._rng import WORD
from ldp_core.audit import audit, audit_mechanisms
from ldp_core.epsilon import log_up
from ldp_core.mechanisms.prefix import PrefixOLH
from ldp_core.mechanisms.prefix_memo import LongitudinalPrefixOLH
from ldp_core.memo import HmacDrbg, permanent_seed
from ldp_core.metric import MetricSpec

SECRET = bytes(range(32))


def memo(eps: float = 2.0, eps_inf: float = 6.0) -> LongitudinalPrefixOLH:
    m = longitudinal("prefix_olh", epsilon=eps, epsilon_inf=eps_inf)
    assert isinstance(m, LongitudinalPrefixOLH)
    return m


def test_the_permanent_response_is_the_documented_derivation() -> None:
    """(j S + s) g + B' = prefix_olh at eps_inf drawn from HMAC_DRBG(permanent_seed(secret,
    context, code)): level, seed, then the GRR's word and other bucket (the JS port's
    conformance target).  Keyed on the normalised code, never on the raw string."""
    m = memo()
    code = m.check_value("hello")
    expected = m.base._perturb(code, HmacDrbg(permanent_seed(SECRET, "search|f", code)))
    for spelling in ("hello", "Hello", "HELLO"):
        assert m.permanent_response(spelling, SECRET, "search|f") == expected
    # A draw by hand from the same stream: level by the shares, seed, then GRR.
    drbg = HmacDrbg(permanent_seed(SECRET, "search|f", code))
    draw, level = drbg.randrange(sum(m.shares)), 0
    while draw >= m.shares[level]:
        draw -= m.shares[level]
        level += 1
    seed = drbg.randrange(m.seeds)
    bucket = m.bucket(level, seed, code)
    kept = drbg.getrandbits(32) < m.base.keep
    other = (bucket + 1 + drbg.randrange(m.g - 1)) % m.g
    assert expected == (level * m.seeds + seed) * m.g + (bucket if kept else other)
    others = {m.permanent_response("hello", SECRET, f"search|{k}") for k in range(20)}
    assert len(others) > 15  # another context draws another cohort (P[<=15 of 20] < 1e-20)


def test_every_report_keeps_the_cohort_and_randomises_only_the_bucket() -> None:
    m = memo()
    permanent = m.permanent_response("world", SECRET, "c")
    rng = random.Random(3)
    reports = [m.randomize_memoised("world", SECRET, "c", rng) for _ in range(200)]
    assert {r // m.g for r in reports} == {permanent // m.g}
    # The bucket is B' with probability p2 ~ 0.22 here: 200 equal ones have P < 1e-100.
    assert len({r % m.g for r in reports}) > 1
    assert all(0 <= r < m.num_counters for r in reports)
    with pytest.raises(ValueError, match="randomize_memoised"):
        m.randomize("world", rng)


@pytest.mark.parametrize(("eps", "eps_inf"), [(0.5, 1.0), (1.0, 4.0), (2.0, 6.0), (4.0, 8.0)])
def test_epsilons_are_exact_and_rounded_outward(eps: float, eps_inf: float) -> None:
    m = memo(eps, eps_inf)
    p1 = Fraction(m.base.keep, WORD)
    p2 = Fraction(m.keep, WORD)
    q2 = (1 - p2) / (m.g - 1)
    p_star = p1 * p2 + (1 - p1) * q2
    assert m.channel == (p_star, Fraction(1, m.g))
    assert m.epsilon == log_up(p_star * (m.g - 1) / (1 - p_star)) <= eps
    assert m.base.epsilon_actual <= eps_inf
    # The largest threshold: one more unit of p2 would cost more than eps.
    p_up = p1 * (p2 + Fraction(1, WORD)) + (1 - p1) * (1 - p2 - Fraction(1, WORD)) / (m.g - 1)
    assert log_up(p_up * (m.g - 1) / (1 - p_up)) > eps
    assert m.describe()["instantaneous_threshold"] == m.keep
    assert m.describe()["permanent_keep"] == m.base.keep


def test_a_string_spec_with_longitudinal_builds_it() -> None:
    spec = MetricSpec.from_json(
        {
            "name": "search",
            "kind": "string",
            "epsilon": 2.0,
            "max_length": 6,
            "longitudinal": {"epsilon_inf": 6.0},
        }
    )
    m = spec.build()
    assert isinstance(m, LongitudinalPrefixOLH) and m.levels == 2
    one = MetricSpec.from_json(
        {"name": "search", "kind": "string", "epsilon": 2.0, "max_length": 6}
    ).build()
    assert isinstance(one, PrefixOLH) and one.levels == 1
    assert (m.num_counters, m.g) == (one.num_counters, one.g)  # the same counters
    assert "per distinct normalised string" in m.unit_text()


@pytest.mark.parametrize("vectorised", [True, False])
def test_the_audit_bounds_eps_1_from_below_and_the_null_control_is_zero(
    vectorised: bool,
) -> None:
    """99.9% Clopper-Pearson: the bound exceeds the true eps_1 with probability 1e-3;
    the stated eps_1 is exact, so a lower bound above it fails this test."""
    m = memo(2.0, 6.0)
    trials = 400_000 if vectorised else 20_000
    r = audit(m, trials=trials, seed=11, vectorised=vectorised)
    assert not r.violation and r.lower_bound <= m.epsilon
    assert r.null_control < 0.2 * m.epsilon
    assert r.lower_bound > (0.85 if vectorised else 0.5) * m.epsilon  # the event has power
    assert any(isinstance(x, LongitudinalPrefixOLH) for x in audit_mechanisms(1.0))


def test_the_sampler_draws_the_output_distribution() -> None:
    """The vectorised sampler against the exact output law: Pearson's statistic over
    the k = 4,096 cells expecting > 20 reports is below k + 6 sqrt(2k) (chi-square
    tail 4e-9, the false-failure rate)."""
    m = memo(1.0, 2.0)
    code = m.check_value("ab")
    law = m.output_distribution(code)
    assert math.isclose(law.sum(), 1.0)
    gen = np.random.default_rng(5)
    n = 2_000_000
    counts = np.bincount(m.sample(np.full(n, code), gen), minlength=m.num_counters)
    expected = law * n
    seen = expected > 20
    stat = float((((counts - expected) ** 2)[seen] / expected[seen]).sum())
    assert stat < seen.sum() + 6 * math.sqrt(2 * seen.sum())


def test_repeated_reports_of_one_device_do_not_average_to_its_value() -> None:
    """A device whose permanent bucket B' is not h_s("hello") never supports "hello"
    more than q2 of the time, however many epochs it reports.

    eps = 2, eps_inf = 4, g = 29: P[B' != h] = 1 - p1 ~ 0.34, so a secret with it is
    found in 200 tries but with P ~ 1e-36.  Over 2,000 reports the share supporting
    h is Bin(2000, q2)/2000, q2 ~ 0.025 (sd 0.0035); a one-level device would support
    it p* ~ 0.21 of the time.  Bound: q2 + 6 sd = 0.046 (FPR < 1e-9), far below p*.
    """
    m = memo(2.0, 4.0)
    code = m.check_value("hello")
    for _ in range(200):
        secret = os.urandom(32)
        permanent = m.permanent_response(code, secret, "search|x")
        row, bucket = divmod(permanent, m.g)
        level, seed = divmod(row, m.seeds)
        if bucket != m.bucket(level, seed, code):
            break
    else:
        raise AssertionError("no device with a wrong permanent bucket in 200 tries")
    rng = random.Random(8)
    n = 2000
    hits = sum(
        m.randomize_memoised("hello", secret, "search|x", rng) % m.g == m.bucket(level, seed, code)
        for _ in range(n)
    )
    q2 = (1 - m.keep / WORD) / (m.g - 1)
    assert hits / n <= q2 + 6 * math.sqrt(q2 * (1 - q2) / n)
    assert float(m.channel[0]) > 0.2 > hits / n


def test_window_intervals_count_the_correlation_of_one_devices_reports() -> None:
    """20,000 devices report the same string in each of T = 10 epochs (eps = 2,
    eps_inf = 4); the window's tallies are discovered with ``epochs=T``.

    Over 30 windows x 3 heavy strings (20%, 10%, 5%, each far above the cut: no
    selection), sum z^2 with z = (estimate - share)/stderr is ~ chi-square(90) when
    the variance is right (exact here: every device reports in every epoch); the
    bound 90 + 6 sqrt(180) = 170 is exceeded with probability < 1e-6 (the z of one
    window are nearly independent).  Treating the reports as independent
    (``epochs=1``) gives the same numerators over stderrs sqrt(1.95) times smaller
    here (the level cluster and the shared permanent bucket), so its sum is ~1.95
    times this one (~176: it would fail the bound about half the time); the ratio
    of the two sums is the stderrs' ratio squared, nearly free of noise: > 1.5.
    """
    m = memo(2.0, 4.0)
    heavy = {"hello": 0.2, "world": 0.1, "ab": 0.05}
    devices, epochs = 20_000, 10
    rng = np.random.default_rng(1)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    tail: list[str] = []
    while len(tail) < 2000:
        text = "".join(rng.choice(letters, size=int(rng.integers(3, 7))))
        if text not in heavy:
            tail.append(text)
    values = [k for k, f in heavy.items() for _ in range(int(f * devices))]
    values += [tail[i % len(tail)] for i in range(devices - len(values))]
    codes = np.array([m.check_value(v) for v in values], dtype=np.int64)
    right, naive = 0.0, 0.0
    for window in range(30):
        tallies = m.simulate_window(codes, epochs, np.random.default_rng(100 + window))
        assert int(tallies.sum()) == devices * epochs
        for assumed in (epochs, 1):
            rows = {f.value: f for f in m.discover(tallies, epochs=assumed).found}
            for text, share in heavy.items():
                z2 = ((rows[text].estimate - share) / rows[text].stderr) ** 2
                if assumed == epochs:
                    right += z2
                else:
                    naive += z2
    assert right <= 90 + 6 * math.sqrt(180)
    assert naive > 1.5 * right
