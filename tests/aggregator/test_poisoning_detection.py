"""The maximal gain attack against every mechanism, and how often the signals see it.

The issue's setting (d = 32, eps = 1, 10,000 honest reports in the attacked
epoch, 30 earlier honest epochs; ``aggregator.attack_trials``).  Each check is
a count over fixed seeds compared with a band from its binomial (or normal)
law at a false-positive rate of 1e-7 per check, at most ~3e-6 over the file.
"""

from __future__ import annotations

import asyncio
import math
import time

import numpy as np
import pytest
import redis
from scipy import stats

from aggregator.attack_trials import Scenario, per_epoch_bound, predicted_detection, run
from aggregator.attacks import fraction_to_move, manipulation_bound, mga_tallies
from aggregator.drift import bit_rows, fake_laws
from aggregator.poisoning import Policy, assess, shares
from aggregator.service import estimate_response
from aggregator.views import EstimateOptions
from collector.plausibility import max_set_bits
from collector.store import Store
from ldp_core import Mechanism, mechanism
from ldp_core.registry import names_for
from ldp_core.simulate import tallies
from ldp_server.redis_server import RedisServer
from tests.support.tallies import register, write_tallies

#: False-positive rate of each statistical check below.
FP = 1e-7
HONEST = 10_000


def _mechanisms() -> list[Mechanism]:
    out = [mechanism(name, epsilon=1.0, domain_size=32) for name in names_for("frequency")]
    for name in names_for("binary"):
        out.append(mechanism(name) if name == "forced_response" else mechanism(name, epsilon=1.0))
    return out


MECHANISMS = _mechanisms()
IDS = [m.name for m in MECHANISMS]


def test_every_registered_mechanism_is_attacked() -> None:
    names = {m.name for m in MECHANISMS}
    assert names == set(names_for("frequency")) | set(names_for("binary"))


@pytest.mark.parametrize("m", MECHANISMS, ids=IDS)
def test_mga_fakes_support_the_target_and_pass_the_shape_checks(m: Mechanism) -> None:
    scenario = Scenario(m)
    fakes = mga_tallies(m, (scenario.target,), 1000, np.random.default_rng(7))
    support = np.asarray(m.support_counts(fakes))
    assert int(fakes.sum()) >= 1000 and support[scenario.target] == 1000  # every fake
    law = m.tally_sum_law()
    if law is not None:  # unary: an honest number of bits, far below the per-report limit
        assert abs(fakes.sum() / 1000 - law[0]) < 1
        limit = max_set_bits(m)
        assert limit is not None and round(law[0]) < limit


@pytest.mark.parametrize("m", MECHANISMS, ids=IDS)
def test_mga_moves_the_target_by_the_exact_gain(m: Mechanism) -> None:
    """Mean shift over 200 epochs at the fraction that should move it by 10 points.

    The fakes support the target surely, so the shift's spread is the honest
    share's: sd = sqrt(count_variance(n, f n)) / N; the band is the normal
    quantile at FP over 200 trials.
    """
    # Only the shift is checked: the drift test's simulation is not needed here.
    scenario, trials = Scenario(m, policy=Policy(calibrate=False)), 200
    share = float(scenario.shares()[scenario.target])
    beta = fraction_to_move(m, 0.10, share)
    outcome = run(scenario, beta, trials, seed=11)
    total = HONEST + scenario.fakes(beta)
    sd = math.sqrt(float(m.count_variance(HONEST, share * HONEST))) / total
    band = stats.norm.isf(FP / 2) * sd / math.sqrt(trials) + 0.10 * 0.01  # + rounding of m
    assert abs(outcome.mean_shift - 0.10) < band
    up, down = manipulation_bound(m, beta, share)
    assert up == pytest.approx(0.10)
    assert down == pytest.approx(beta * (m.q_star / (m.p_star - m.q_star) + share))


CALIBRATED = [m for m in MECHANISMS if fake_laws(m) is not None]
SHARES = [m for m in MECHANISMS if fake_laws(m) is None]


def test_every_mechanism_is_calibrated_by_simulation() -> None:
    assert {m.name for m in CALIBRATED} == {"grr", "olh", "hadamard", "hcms"}
    assert all(bit_rows(m) is not None for m in SHARES)
    for m in MECHANISMS:
        s = Scenario(m)
        rows = [tallies(m, s.values(HONEST), seed=i) for i in range(3)]
        drift = assess(m, rows[-1], rows[:-1]).drift
        assert drift is not None and "Monte Carlo (1999 draws)" in drift.method


@pytest.mark.parametrize("m", SHARES, ids=[m.name for m in SHARES])
def test_false_alarms_on_honest_data_stay_within_the_budget(m: Mechanism) -> None:
    """Flags over 1,500 honest epochs against Binomial(1500, 0.95%), the design bound
    (rise 0.9% + fall 0.05% + impossible 2e-6 + set-bit total 6e-7)."""
    scenario, trials = Scenario(m), 1500
    rate = scenario.policy.false_alarm_rate
    assert rate < 0.01
    outcome = run(scenario, 0.0, trials, seed=21)
    assert outcome.detected <= stats.binom.isf(FP, trials, rate)


def test_a_budget_too_small_for_the_draws_is_refused_with_its_value() -> None:
    with pytest.raises(ValueError, match=r"0\.0001.*draws = 1999"):
        Policy(alpha_rise=0.0001)
    assert Policy().false_alarm_rate < 0.0096


#: Large budgets, so that 1,000 honest epochs measure the Monte Carlo calibration
#: sharply (the code path of the default; only alpha and the draws differ).
LOUD = Policy(alpha_rise=0.1, alpha_fall=0.01, draws=99)


@pytest.mark.parametrize("m", MECHANISMS, ids=IDS)
def test_the_monte_carlo_thresholds_hold_their_level(m: Mechanism) -> None:
    """At rise budget 0.1 (the 10th largest of 99 simulated maxima) and fall budget
    0.01, the flag rate on 1,000 honest epochs lies between the FP/2 quantiles of
    Binomial(1000, 0.1) (the rise test alone, were the simulated null exact) and
    Binomial(1000, 0.11) (the union): 5.3% to 16.6%.  A calibration off by half
    its budget either way (a wrong null law, a wrong order statistic) fails it."""
    scenario, trials = Scenario(m, policy=LOUD), 1000
    outcome = run(scenario, 0.0, trials, seed=23)
    assert stats.binom.ppf(FP / 2, trials, 0.1) <= outcome.detected
    assert outcome.detected <= stats.binom.isf(FP / 2, trials, 0.11)


@pytest.mark.parametrize("m", MECHANISMS, ids=IDS)
def test_detection_at_five_percent_fakes_matches_its_power(m: Mechanism) -> None:
    """Flags over 200 attacked epochs (5% of reports are MGA fakes, 30 earlier epochs)
    against the drift test's predicted power: the normal-law power of the
    Bonferroni share test (a lower bound: other signals only add flags), or for
    the calibrated likelihood-ratio test the power of the best per-epoch test at
    its budget (``per_epoch_bound``, which it is)."""
    scenario, trials = Scenario(m), 200
    power = predicted_detection(scenario, 0.05)
    outcome = run(scenario, 0.05, trials, seed=31)
    assert outcome.detected >= stats.binom.ppf(FP, trials, power)


def test_the_95_percent_goal_is_within_reach_of_every_mechanism() -> None:
    """Predicted power at 5% fakes, 1% of false alarms, 30 earlier epochs: >= 95% for
    every mechanism (Hadamard 96.5%, HCMS 96.6%).  With 10 earlier epochs the best
    any per-epoch test can do on Hadamard is 95.3% (spending the whole 1%); when
    the attacker's devices replace honest ones (tokens: 500 fakes, not 526) it is
    93.9%, out of reach (docs/poisoning.md)."""
    power = {m.name: predicted_detection(Scenario(m), 0.05) for m in MECHANISMS}
    assert min(power.values()) >= 0.95, power
    hadamard = Scenario(mechanism("hadamard", epsilon=1.0, domain_size=32))
    assert per_epoch_bound(hadamard, 0.05, 0.01, history=10) < 0.954
    tokens = Scenario(hadamard.mech, tokens=True)
    assert per_epoch_bound(tokens, 0.05, 0.01, history=10) < 0.95


EPOCH = int(time.time() // 86400)
SPEC = {
    "name": "poison.drift",
    "kind": "categorical",
    "domain": [f"v{i}" for i in range(8)],
    "epsilon": 2.0,
    "mechanism": "grr",
}


def _estimate(url: str, name: str) -> dict[str, object]:
    async def go() -> dict[str, object]:
        store = Store.connect(url)
        try:
            spec = await store.get_metric(name)
            assert spec is not None
            return await estimate_response(
                store,
                spec,
                start=None,
                end=None,
                options=EstimateOptions(),
                series=False,
                max_epochs=100,
            )
        finally:
            await store.close()

    return asyncio.run(go())


def test_the_estimate_flags_an_attacked_epoch_through_redis(redis_server: RedisServer) -> None:
    """GRR, d = 8, eps = 2: four honest epochs of 2,000, then a fifth with 150 MGA
    fakes for v7 (7% of its reports: +0.15, about 11 stderr).  Honest window: every
    |drift z| < 5.3 (P[any above] < 1e-6).  Attacked: v7 rises past the threshold
    (3.0; missed with probability < 1e-12); the robust median of the five per-epoch
    estimates cannot exceed the largest honest one (a property, not a tolerance)."""
    redis.Redis.from_url(redis_server.url).flushall()
    spec = register(redis_server.url, SPEC)
    m = spec.build()
    values = np.repeat(np.arange(8), [600, 400, 300, 250, 200, 150, 70, 30])
    honest = {EPOCH - 4 + i: tallies(m, values, seed=40 + i) for i in range(4)}
    write_tallies(redis_server.url, spec, {e: (t.tolist(), n) for e, (t, n) in honest.items()})
    clean = _estimate(redis_server.url, spec.name)["poisoning"]
    assert isinstance(clean, dict) and clean["impossible"] == []
    assert max(abs(z) for z in clean["drift"]["z"]) < 5.3
    assert clean["robust"]["method"] == "median of per-epoch estimates"

    t, n = tallies(m, values, seed=50)
    t = t + mga_tallies(m, (7,), 150, np.random.default_rng(51))
    write_tallies(redis_server.url, spec, {EPOCH: (t.tolist(), n + 150)})
    body = _estimate(redis_server.url, spec.name)
    flags = body["poisoning"]
    assert isinstance(flags, dict) and flags["flagged"] is True
    assert flags["drift"]["rising"] == ["v7"]
    assert any(r.startswith("v7: rose") for r in flags["reasons"])
    honest_high = max(float(shares(m, t_e, n_e).value[7]) for t_e, n_e in honest.values())
    assert flags["robust"]["values"][7] <= honest_high + 1e-12


@pytest.mark.parametrize("name", ["oue", "olh", "hadamard"])
def test_the_issues_unflagged_attacks_are_flagged(name: str) -> None:
    """Issue 13: OUE fakes with an honest number of bits and OLH fakes were never
    flagged.  10% MGA fakes after 10 honest epochs: the target rises by >= 10 stderr
    on average over a 3.5 threshold (missed with probability 4e-11 for Hadamard,
    < 1e-14 for the others), while the set-bit total of OUE stays honest (|z| < 5,
    FP 6e-7)."""
    m = mechanism(name, epsilon=1.0, domain_size=32)
    scenario, gen = Scenario(m), np.random.default_rng(61)
    earlier = m.simulate_tallies(scenario.values(10 * HONEST), 1, gen)[0]
    fakes = scenario.fakes(0.10)
    latest = m.simulate_tallies(scenario.values(HONEST), 1, gen)[0]
    latest = latest + mga_tallies(m, (scenario.target,), fakes, gen)
    signals = assess(m, (latest, HONEST + fakes), [(earlier, 10 * HONEST)])
    assert signals.flagged and scenario.target in signals.rise
    assert signals.sum_z is None or abs(signals.sum_z) < 5


def test_a_grr_share_above_one_is_flagged_in_one_epoch(redis_server: RedisServer) -> None:
    """Issue 13: 1,000 GRR fakes on 10,000 honest reports (d = 32, eps = 1) pushed a
    share to 1.76 unflagged.  One epoch, no history: the share is ~1.7 with a
    stderr of ~0.03, so its interval lies above 1 by ~20 stderr (the threshold is
    5.3 for 1e-6 of false alarms)."""
    redis.Redis.from_url(redis_server.url).flushall()
    spec = register(
        redis_server.url,
        {**SPEC, "name": "poison.grr32", "domain": [f"v{i}" for i in range(32)], "epsilon": 1.0},
    )
    m = spec.build()
    scenario = Scenario(m)
    t, n = tallies(m, scenario.values(HONEST), seed=71)
    t = t + mga_tallies(m, (31,), 1000, np.random.default_rng(72))
    write_tallies(redis_server.url, spec, {EPOCH: (t.tolist(), n + 1000)})
    body = _estimate(redis_server.url, spec.name)
    flags = body["poisoning"]
    assert isinstance(flags, dict) and flags["flagged"] is True
    assert flags["impossible"] == ["v31"] and flags["drift"] is None
    assert body["estimate"]["values"][31]["value"] > 1.5  # type: ignore[index]
    assert str(flags["summary"]).startswith("Possible poisoning: v31: interval")
