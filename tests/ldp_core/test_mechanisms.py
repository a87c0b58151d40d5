"""The mechanism core: parameters, validation, randomness, wire format, channel."""

from __future__ import annotations

import math
import os
import random
from fractions import Fraction

import numpy as np
import pytest

from ldp_core import NAMES, OLH, Bounded, Mechanism, ReportError, mechanism
from ldp_core.simulate import tallies
from tests.stats import counter_probabilities, z_for

EPSILONS = (0.5, 1.0, 2.0, 4.0)


def build(name: str, epsilon: float, d: int = 8) -> Mechanism:
    """Any registered mechanism: each takes the parameters of its kind."""
    return mechanism(name, epsilon=epsilon, domain_size=d, lo=-5.0, hi=20.0)


#: Every registered one-level mechanism: a new one is tested by being registered.
ALL = tuple(name for name in NAMES if name != "auto")


def some_value(m: Mechanism, k: int) -> float:
    """The k-th of a few fixed values in the domain."""
    if isinstance(m, Bounded):
        return m.lo + (m.hi - m.lo) * (k % 8) / 7
    if m.kind == "string":  # the code of a string, as the device path makes it
        return m.check_value(("a", "b", "ab", "hello", "z", "ba", "abc", "zz")[k % 8])
    return k % m.domain_size


# -- epsilon -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_implemented_epsilon_is_an_upper_bound_and_tight(name: str, epsilon: float) -> None:
    m = build(name, epsilon)
    assert m.epsilon_actual <= m.epsilon
    # Integer thresholds cost at most a few parts in 2**32 of privacy budget.
    assert m.epsilon - m.epsilon_actual < 1e-6
    assert 0 < m.q_star < m.p_star < 1


def test_warner_from_p_and_forced_response_design() -> None:
    warner = mechanism("binary_rr", p=0.70)
    assert warner.channel == (Fraction(7, 10), Fraction(3, 10))
    assert math.log(7 / 3) <= warner.epsilon < math.log(7 / 3) + 1e-9
    coins = mechanism("forced_response")
    assert coins.channel == (Fraction(3, 4), Fraction(1, 4))
    assert math.log(3) <= coins.epsilon < math.log(3) + 1e-9
    lopsided = mechanism("forced_response", truth=0.5, yes=0.8)
    # P[yes|yes] = 0.9, P[yes|no] = 0.4; the "no" answer is the riskier: 0.6 / 0.1.
    assert lopsided.channel == (Fraction(9, 10), Fraction(2, 5))
    assert math.log(6) <= lopsided.epsilon < math.log(6) + 1e-9


# -- validation ----------------------------------------------------------------------

BAD = [
    ({"name": "grr", "epsilon": float("nan"), "domain_size": 4}, "nan"),
    ({"name": "grr", "epsilon": float("inf"), "domain_size": 4}, "inf"),
    ({"name": "grr", "epsilon": 0.0, "domain_size": 4}, "0.0"),
    ({"name": "oue", "epsilon": -1.0, "domain_size": 4}, "-1.0"),
    ({"name": "sue", "epsilon": "1", "domain_size": 4}, "'1'"),
    ({"name": "olh", "epsilon": True, "domain_size": 4}, "True"),
    ({"name": "grr", "epsilon": 1.0, "domain_size": 1}, "1"),
    ({"name": "oue", "epsilon": 1.0, "domain_size": 2.5}, "2.5"),
    ({"name": "olh", "epsilon": 1.0, "domain_size": 0}, "0"),
    ({"name": "olh", "epsilon": 1.0, "domain_size": 64, "g": 4}, "4"),
    ({"name": "one_bit_mean", "epsilon": 1.0, "lo": 3.0, "hi": 3.0}, "3.0"),
    ({"name": "one_bit_mean", "epsilon": 1.0, "lo": float("nan"), "hi": 3.0}, "nan"),
    ({"name": "binary_rr", "p": 0.5}, "0.5"),
    ({"name": "binary_rr", "p": 1.0}, "1.0"),
    ({"name": "forced_response", "truth": 1.5}, "1.5"),
    ({"name": "forced_response", "yes": 0.0}, "0.0"),
    ({"name": "warner", "epsilon": 1.0}, "warner"),
    ({"name": "grr", "epsilon": 1.0}, "domain_size"),
]


@pytest.mark.parametrize(("kwargs", "named"), BAD)
def test_bad_parameters_raise_a_value_error_naming_the_value(
    kwargs: dict[str, object], named: str
) -> None:
    args = dict(kwargs)
    name = args.pop("name")
    with pytest.raises(ValueError, match=None) as info:
        mechanism(str(name), **args)  # type: ignore[arg-type]
    assert named in str(info.value)


@pytest.mark.parametrize("name", ALL)
def test_values_outside_the_domain_are_refused_by_name(name: str) -> None:
    m = build(name, 1.0)
    outside: list[object] = [99.0, float("nan"), "x"]
    if m.kind == "string":  # a string too long or off the alphabet, a code with a hole
        outside = ["abcdefg", "a1", "é", m.domain_size, -1, 27 * 27, 1.5]
    elif m.kind != "mean":
        outside = [m.domain_size, -1, "a", 1.5]
    for value in outside:
        with pytest.raises(ValueError) as info:
            m.randomize(value)
        assert repr(value) in str(info.value)


# -- randomness ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_default_randomness_is_the_os_csprng(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no ``rng``, every draw comes from os.urandom and none from ``random``'s state."""
    drawn: list[int] = []
    real = random._urandom  # type: ignore[attr-defined]

    def counting(k: int) -> bytes:
        drawn.append(k)
        return real(k)

    monkeypatch.setattr(random, "_urandom", counting)
    monkeypatch.setattr(os, "urandom", counting)
    random.seed(1234)
    state = random.getstate()
    m = build(name, 1.0)
    m.randomize(some_value(m, 1))
    assert drawn, "the device path did not read the OS CSPRNG"
    assert random.getstate() == state, "the device path touched the global Mersenne Twister"


@pytest.mark.parametrize("name", ALL)
def test_injected_generator_makes_reports_reproducible(name: str) -> None:
    m = build(name, 1.0)
    first = [m.randomize(some_value(m, k), rng=random.Random(7)) for k in range(20)]
    second = [m.randomize(some_value(m, k), rng=random.Random(7)) for k in range(20)]
    assert first == second


# -- wire format ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_reports_round_trip_through_the_wire(name: str) -> None:
    m = build(name, 2.0, d=13)
    rng = random.Random(3)
    for k in range(50):
        report = m.randomize(some_value(m, k), rng=rng)
        assert m.decode(m.encode(report)) == report
        assert all(0 <= c < m.num_counters for c in m.counters(report))


def test_decode_rejects_what_no_device_sends() -> None:
    grr = mechanism("grr", epsilon=1.0, domain_size=5)
    oue = mechanism("oue", epsilon=1.0, domain_size=13)
    olh = mechanism("olh", epsilon=1.0, domain_size=100)
    assert isinstance(olh, OLH)
    cases = [
        (grr, 5, "bucket_out_of_range"),
        (grr, -1, "bucket_out_of_range"),
        (grr, "1", "payload_type"),
        (grr, True, "payload_type"),
        (oue, "AA", "bitvector_length"),
        (oue, "AAAAA", "bitvector_length"),
        (oue, "AP8", "bitvector_length"),  # bits 13..15 set
        (oue, "A!A", "payload_encoding"),
        (oue, 3, "payload_type"),
        (olh, [olh.num_seeds, 0], "seed_out_of_range"),
        (olh, [0, olh.g], "bucket_out_of_range"),
        (olh, [0], "payload_type"),
        (olh, [0, 1.0], "payload_type"),
        (mechanism("binary_rr", epsilon=1.0), 2, "bit_out_of_range"),
    ]
    for m, payload, code in cases:
        with pytest.raises(ReportError) as info:
            m.decode(payload)
        assert info.value.code == code, (m.name, payload)


# -- the channel, through the real device path -----------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_device_path_and_simulation_have_the_channel_distribution(name: str) -> None:
    """Counters from 20,000 real ``randomize`` calls and from ``simulate.tallies``
    both match the exact expected counts, and each other.

    Each counter is a sum of independent Bernoullis with known probabilities;
    z-tests at |z| > 6.0 with Bonferroni over all counters of all mechanisms
    (< 400 checks) give a false-positive rate below 1e-6.
    """
    m = build(name, 1.0, d=6)
    rng = random.Random(11)
    values = [some_value(m, k % 6) for k in range(20_000)]
    device = np.zeros(m.num_counters, dtype=np.int64)
    for v in values:
        for c in m.counters(m.randomize(v, rng=rng)):
            device[c] += 1
    simulated, n = tallies(m, values, seed=5)
    probs = np.array([counter_probabilities(m, v) for v in sorted(set(values))])
    weights = np.array([values.count(v) for v in sorted(set(values))])
    if m.kind == "string":
        # 3 S g counters of about 0.1 reports each: pooled into 61 groups (index mod
        # 61), each a sum of one-counter reports, so Binomial per value still holds.
        def pool(a: np.ndarray) -> np.ndarray:
            return np.stack([np.bincount(np.arange(a.shape[-1]) % 61, row, minlength=61)
                             for row in np.atleast_2d(a)]).reshape(*a.shape[:-1], 61)
        device, simulated, probs = pool(device), pool(simulated), pool(probs)
    expected = weights @ probs
    variance = weights @ (probs * (1 - probs))
    z = z_for(1e-6)
    assert n == len(values)
    assert np.all(np.abs(device - expected) <= z * np.sqrt(variance) + 1e-9)
    assert np.all(np.abs(simulated - expected) <= z * np.sqrt(variance) + 1e-9)
    assert np.all(np.abs(device - simulated) <= z * np.sqrt(2 * variance) + 1e-9)


def test_olh_family_collides_every_pair_equally() -> None:
    """Over all seeds, every pair of distinct values shares a bucket exactly S*c times."""
    m = OLH(epsilon=1.0, domain_size=30)
    buckets = np.array([[m.bucket(s, v) for v in range(30)] for s in range(m.num_seeds)])
    expected = m.collision * m.num_seeds
    assert expected.denominator == 1
    for v in range(30):
        for w in range(v + 1, 30):
            assert int((buckets[:, v] == buckets[:, w]).sum()) == expected


@pytest.mark.timeout(30)
@pytest.mark.parametrize("epsilon", [30.0, 50.0, 64.0])
def test_olh_choice_of_g_is_bounded_by_the_domain(epsilon: float) -> None:
    """Past the first prime >= d, more buckets only add variance: the search stops
    there (it used to loop to e^eps, forever at eps = 50; the timeout is a hang guard)."""
    for d in (2, 1024, 65536):
        m = mechanism("olh", epsilon=epsilon, domain_size=d)
        assert isinstance(m, OLH) and m.g <= 2 * d + 2
        assert mechanism("auto", epsilon=epsilon, domain_size=d).q_star < 1e-6


@pytest.mark.parametrize("name", ALL)
def test_an_epsilon_past_the_core_cap_is_a_value_error(name: str) -> None:
    """e^1000 overflows a float: refused with the bound named, never an OverflowError."""
    with pytest.raises(ValueError, match="at most 64"):
        build(name, 1000.0)
