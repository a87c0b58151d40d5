"""Two-level (memoised) mechanisms: contract, exact channel, memoisation, averaging attack.

Statistical checks use exact Clopper-Pearson intervals (``ldp_core.audit.cp_*``)
with the false-positive rate of each test stated beside it (<= 1e-6 in total).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import FrozenInstanceError, dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from ldp_core import (
    LongitudinalGRR,
    LongitudinalOUE,
    Mechanism,
    Memoisable,
    Report,
    TwoLevel,
    longitudinal,
    mechanism,
)
from ldp_core._rng import WORD, Rng, resolve
from ldp_core.audit import cp_lower, cp_upper
from ldp_core.memo import HmacDrbg, permanent_seed
from ldp_core.metric import MetricSpec
from ldp_core.registry import classes

FREQUENCY = tuple(c.name for c in classes(levels=2) if c.kind == "frequency")
#: The families whose two-level form is the TwoLevel shape (tally, wire and values the
#: base's); two-level OLH reports a fresh OLH of a permanent GRR (test_olh_memo.py).
SHAPED = tuple(name for name in FREQUENCY if name != "olh")
SECRET = bytes(range(32))


def covers(k: int, n: int, p: float | Fraction, alpha: float) -> bool:
    """Whether the two-sided CP interval (total level alpha) for k/n contains p."""
    return cp_lower(k, n, alpha / 2) <= float(p) <= cp_upper(k, n, alpha / 2)


def build(name: str, eps: float = 1.0, eps_inf: float = 3.0, d: int = 6) -> Any:
    if name == "one_bit_mean":
        m = longitudinal(name, epsilon=eps, epsilon_inf=eps_inf, lo=-1.0, hi=3.0)
    elif name == "binary_rr":
        m = longitudinal(name, epsilon=eps, epsilon_inf=eps_inf)
    else:
        m = longitudinal(name, epsilon=eps, epsilon_inf=eps_inf, domain_size=d)
    assert isinstance(m, Memoisable)
    return m


# -- contract ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*SHAPED, "one_bit_mean", "binary_rr"])
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_contract_matches_the_one_level_base(name: str, eps: float) -> None:
    m = build(name, eps, eps_inf=2.5 * eps, d=16)
    one = (
        mechanism(name, epsilon=eps, lo=-1.0, hi=3.0)
        if name == "one_bit_mean"
        else mechanism(name, epsilon=eps)
        if name == "binary_rr"
        else mechanism(name, epsilon=eps, domain_size=16)
    )
    assert (m.name, m.kind, m.levels) == (one.name, one.kind, 2)
    assert (m.num_counters, m.domain_size) == (one.num_counters, one.domain_size)
    assert m.epsilon_inf == 2.5 * eps
    # eps_1 is an upper bound (outward) <= the request, and the threshold is the
    # largest that keeps it so: one more unit of keep would exceed the request.
    assert m.epsilon <= eps and m.epsilon == m.epsilon_actual
    assert m._epsilon_of(m.base, m._compose(m.base, m.keep + 1)) > eps
    assert eps - m.epsilon < 1e-6
    assert m.base.epsilon == 2.5 * eps and m.base.epsilon_actual <= m.epsilon_inf
    r = m.randomize_memoised(one.check_value(1), SECRET, "metric/1", rng=random.Random(0))
    assert m.decode(m.encode(r)) == r
    assert m.counters(r) == one.counters(r)
    with pytest.raises(FrozenInstanceError):
        m.keep = 1


def test_auto_takes_the_lowest_variance_two_level_form() -> None:
    """auto weighs the two-level forms at (eps_1, eps_inf): the memoised OLH has its own
    variance (a permanent GRR over d), not the one-level OLH's; a memoised mean weighs
    them over 30 epochs (registry.AUTO_WINDOW): at eps_inf = 2 the Piecewise's permanent
    level is 1.6x less noisy than the bit's."""
    numeric = longitudinal("auto", epsilon=1.0, epsilon_inf=2.0, domain_size=2, lo=0.0, hi=5.0)
    assert numeric.name == "piecewise"
    small = longitudinal("auto", epsilon=0.5, epsilon_inf=1.0, domain_size=2, lo=0.0, hi=5.0)
    assert small.name == "one_bit_mean"
    for d in (4, 16, 1024):
        for eps_inf in (2.0, 4.0, 8.0):
            m = longitudinal("auto", epsilon=1.0, epsilon_inf=eps_inf, domain_size=d)
            forms = {name: longitudinal(name, epsilon=1.0, epsilon_inf=eps_inf, domain_size=d)
                     for name in ("grr", "oue", "olh")}
            lowest = min(f.unit_variance() for f in forms.values())
            # The lowest, or a compact report within REPORT_SIZE_TOLERANCE of it.
            assert m.unit_variance() <= 1.05 * lowest, (d, eps_inf, m.name)
            assert m.report_bits <= min(f.report_bits for f in forms.values()
                                        if f.unit_variance() == lowest)
    # At d = 1024 the memoised OLH pays the permanent GRR's price: auto leaves it.
    assert longitudinal("auto", epsilon=1.0, epsilon_inf=4.0, domain_size=1024).name == "oue"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"epsilon": 2.0, "epsilon_inf": 2.0, "domain_size": 4}, "epsilon_inf 2.0"),
        ({"epsilon": 3.0, "epsilon_inf": 2.0, "domain_size": 4}, "epsilon 3.0"),
        ({"epsilon": 1.0, "epsilon_inf": float("nan"), "domain_size": 4}, "epsilon_inf"),
        ({"epsilon": 1.0, "epsilon_inf": 2.0}, "domain_size"),
        ({"epsilon": 1.0, "epsilon_inf": 2.0, "domain_size": 1}, "domain_size"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, float], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        longitudinal("oue", **kwargs)  # type: ignore[arg-type]


def test_unknown_and_unsupported_names() -> None:
    with pytest.raises(ValueError, match="forced_response"):
        longitudinal("forced_response", epsilon=1.0, epsilon_inf=2.0, domain_size=2)
    with pytest.raises(ValueError, match="needs lo="):
        longitudinal("one_bit_mean", epsilon=1.0, epsilon_inf=2.0)


# -- the exact composed channel ------------------------------------------------------------


def test_channels_are_the_exact_compositions() -> None:
    # Recomputed here from the two levels' thresholds, independently of the module.

    def k(m: Any) -> Fraction:
        return Fraction(m.keep, WORD)

    g = build("grr", d=5)
    p1 = Fraction(g.base.keep, WORD)
    q1, q2 = (1 - p1) / 4, (1 - k(g)) / 4
    assert g.channel == (p1 * k(g) + (1 - p1) * q2, q1 * k(g) + (1 - q1) * q2)
    for name in ("sue", "oue"):
        u = build(name)
        p1, q1 = Fraction(u.base.one, WORD), Fraction(u.base.zero, WORD)
        p2, q2 = k(u), 1 - k(u)  # RAPPOR's IRR, symmetric
        assert u.channel == (p1 * p2 + (1 - p1) * q2, q1 * p2 + (1 - q1) * q2)
    mm = build("one_bit_mean")
    assert mm.channel == (mm.one_probability(3.0), mm.one_probability(-1.0))
    mid = mm.base.one_probability(0.5)
    assert mm.one_probability(0.5) == k(mm) * mid + (1 - k(mm)) * (1 - mid)


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_one_report_costs_no_accuracy(eps: float) -> None:
    """Each composed channel is the one-level channel at eps_1 (GRR o GRR is a GRR,
    the OUE IRR keeps p* = 1/2, SUE and 1BitMean stay symmetric), so the
    estimator's variance is the one-level one's at the same epsilon."""
    for name in SHAPED:
        two = build(name, eps, eps_inf=3 * eps, d=16)
        one = mechanism(name, epsilon=eps, domain_size=16)
        assert two.unit_variance() == pytest.approx(one.unit_variance(), rel=1e-6)
    two = build("one_bit_mean", eps, eps_inf=3 * eps)
    one = mechanism("one_bit_mean", epsilon=eps, lo=-1.0, hi=3.0)
    assert two.p_star == pytest.approx(one.p_star, rel=1e-7)
    assert two.q_star == pytest.approx(one.q_star, rel=1e-7)


def test_one_report_epsilon_matches_the_channel() -> None:
    import math

    for name in (*FREQUENCY, "one_bit_mean"):
        m = build(name, eps=1.0, eps_inf=3.0)
        # The audit's most powerful event has the channel's extreme ratio.
        p, q = (float(x) for x in m.audit_design().probabilities)
        ratio = max(p / q, (1 - q) / (1 - p))
        assert math.log(ratio) == pytest.approx(m.epsilon, abs=1e-9)


@pytest.mark.parametrize("name", [*FREQUENCY, "one_bit_mean"])
def test_device_path_has_the_composed_channel(name: str) -> None:
    """Reports of one value (fresh permanent each time) follow (p*, q*) exactly.

    At most 8 CP intervals per case, each at 2e-8: false-positive rate < 2e-7 per
    case, < 1e-6 over the cases.
    """
    m = build(name, d=5)
    rng = random.Random(sum(map(ord, name)))
    n, alpha = 6000, 2e-8
    value: float = 3.0 if name == "one_bit_mean" else 2
    # A fresh device secret per report: one report each.
    reports = [m.randomize_memoised(value, rng.randbytes(32), "metric/1", rng) for _ in range(n)]
    p, q = m.channel
    support = [0] * m.domain_size
    for r in reports:
        for v in _supported(m, r):
            support[v] += 1
    for v, hits in enumerate(support):
        truth = p if v == (1 if name == "one_bit_mean" else value) else q
        assert covers(hits, n, truth, alpha), (v, hits / n, float(truth))


@pytest.mark.parametrize("name", [*FREQUENCY, "one_bit_mean", "binary_rr"])
def test_randomize_without_a_secret_refuses(name: str) -> None:
    """Without a device secret every call would draw a fresh permanent response."""
    m = build(name, d=5)
    with pytest.raises(ValueError, match="randomize_memoised"):
        m.randomize(m.check_value(1), rng=random.Random(0))


def _supported(m: Mechanism, r: Report) -> list[int]:
    """The values (indices; for one bit: 1 = hi, 0 = lo) that report r supports."""
    one_hot = [0] * m.num_counters
    for c in m.counters(r):
        one_hot[c] += 1
    return [v for v, hits in enumerate(m.support_counts(one_hot)) if hits]


def test_simulated_tallies_debias_with_the_composed_channel() -> None:
    """The generic estimator is unbiased with (p*, q*) and its exact variance.

    Per value |c_hat - c| <= 5.45 sd: two-sided rate 5e-8, x 20 checks = 1e-6.
    """
    from ldp_core.simulate import tallies

    for name in FREQUENCY:
        m = build(name, eps=1.0, eps_inf=3.0, d=5)
        truth = np.repeat(np.arange(5), [40_000, 25_000, 20_000, 10_000, 5_000])
        t, n = tallies(m, truth, seed=7)
        support = np.array(m.support_counts(t), dtype=float)
        p, q = m.p_star, m.q_star
        c_hat = (support - n * q) / (p - q)
        counts = np.bincount(truth, minlength=5)
        for v in range(5):
            sd = m.count_variance(n, float(counts[v])) ** 0.5
            assert abs(c_hat[v] - counts[v]) <= 5.45 * sd, (name, v)


# -- memoisation -------------------------------------------------------------------------------


def test_permanent_response_is_a_function_of_secret_context_and_value() -> None:
    spec = MetricSpec.from_json(
        {
            "name": "app.theme",
            "kind": "categorical",
            "domain": [f"c{i}" for i in range(32)],
            "epsilon": 1.0,
            "mechanism": "oue",
            "longitudinal": {"epsilon_inf": 3.0},
        }
    )
    m = spec.build()
    assert isinstance(m, LongitudinalOUE)
    first = [m.permanent_response(v, SECRET, "app.theme/1") for v in range(32)]
    # "Survives restarts": a new process rebuilds the mechanism from the spec.
    again = MetricSpec.from_json(spec.to_json()).build()
    assert isinstance(again, TwoLevel)
    assert [again.permanent_response(v, SECRET, "app.theme/1") for v in range(32)] == first
    # Other context, other secret: other draws.  Deterministic given these inputs;
    # two independent draws of the 32 x 32 bits coincide with probability
    # (0.5 * 0.91^31)^32 < 1e-40 (OUE at eps_inf = 3: p1 = 1/2, q1 = 0.047).
    assert [m.permanent_response(v, SECRET, "app.theme/2") for v in range(32)] != first
    other = bytes(32)
    assert [m.permanent_response(v, other, "app.theme/1") for v in range(32)] != first


def test_permanent_seed_known_answer() -> None:
    # Pinned: changing the derivation would redraw every device's permanent
    # responses, which hands an averaging attacker fresh samples.
    seed = permanent_seed(SECRET, "app.theme/1", 3)
    assert seed.hex()[:16] == KNOWN_SEED_PREFIX
    assert HmacDrbg(seed).getrandbits(64) == KNOWN_FIRST_WORD
    assert permanent_seed(SECRET, "m/1", 1.0) != permanent_seed(SECRET, "m/1", 1)
    with pytest.raises(ValueError, match="secret"):
        permanent_seed(b"short", "m/1", 1)


def test_hmac_drbg_matches_the_nist_cavp_vector() -> None:
    # NIST CAVP HMAC_DRBG.rsp, [SHA-256], no reseed, no personalisation, COUNT = 0:
    # instantiate with entropy | nonce, generate 1024 bits twice, the second is checked.
    entropy = bytes.fromhex("ca851911349384bffe89de1cbdc46e6831e44d34a4fb935ee285dd14b71a7488")
    nonce = bytes.fromhex("659ba96c601dc69fc902940805ec0ca8")
    drbg = HmacDrbg(entropy + nonce)
    drbg.generate(128)
    assert drbg.generate(128).hex() == (
        "e528e9abf2dece54d47c7e75e5fe302149f817ea9fb4bee6f4199697d04d5b89"
        "d54fbb978a15b5c443c9ec21036d2460b6f73ebad0dc2aba6e624abf07745bc1"
        "07694bb7547bb0995f70de25d6b29e2d3011bb19d27676c07162c8b5ccde0668"
        "961df86803482cb37ed6d5c0bb8d50cf1f50d476aa0458bdaba806f48be9dcb8"
    )


def test_hmac_drbg_is_uniform_and_exact() -> None:
    """randrange(6) over 24000 draws: each face's CP interval at 1e-7 (6e-7 total)."""
    drbg = HmacDrbg(b"uniformity")
    counts = Counter(drbg.randrange(6) for _ in range(24_000))
    assert set(counts) == set(range(6))
    assert all(covers(counts[f], 24_000, Fraction(1, 6), 1e-7) for f in range(6))
    assert 0 <= drbg.getrandbits(5) < 32 and drbg.getrandbits(0) == 0
    with pytest.raises(ValueError):
        drbg.randrange(0)


def test_permanent_level_has_the_lifetime_channel() -> None:
    """Over 4000 device secrets, P[B' = v] is the eps_inf GRR's p1 (CP at 1e-6)."""
    m = build("grr", eps=1.0, eps_inf=2.0, d=4)
    hits = sum(m.permanent_response(2, i.to_bytes(16, "big"), "metric/1") == 2 for i in range(4000))
    assert covers(hits, 4000, Fraction(m.base.keep, WORD), 1e-6)


# -- the averaging attack ----------------------------------------------------------------------

REPEATS = 2000


def _secret_with_permanent_away_from(m: Any, value: int) -> bytes:
    """A device secret whose memoised response does not carry ``value`` (deterministic)."""
    for i in range(1000):
        secret = i.to_bytes(16, "big")
        b = m.permanent_response(value, secret, "app.theme/1")
        if (b != value) if isinstance(b, int) else (value not in b):
            return secret
    raise AssertionError("no such secret in 1000 tries")


def averaging_attack(reports: list[Report], d: int) -> int:
    """The attacker's guess from many reports of one value: the most supported index."""
    support = Counter(i for r in reports for i in ((r,) if isinstance(r, int) else r))
    return max(range(d), key=lambda i: support[i])


@pytest.mark.parametrize("name", ["grr", "oue", "sue"])
def test_one_level_reports_reveal_the_value(name: str) -> None:
    # The gap between p and q is >= 0.16 at eps = 1, d = 6: by Hoeffding the
    # value loses the argmax with probability < 6 exp(-2 * 2000 * 0.08^2) < 1e-10.
    one = mechanism(name, epsilon=1.0, domain_size=6)
    rng = random.Random(11)
    reports = [one.randomize(4, rng) for _ in range(REPEATS)]
    assert averaging_attack(reports, 6) == 4


@pytest.mark.parametrize("name", ["grr", "oue", "sue"])
def test_two_level_reports_reveal_only_the_memoised_response(name: str) -> None:
    """2000 reports of value 4 follow the channel of B', not of the value.

    For each index i, the share of reports supporting i is p2 if i is in B'
    else q2 (6 CP intervals at 1.6e-7: 1e-6 in total per case).
    """
    m = build(name, eps=1.0, eps_inf=3.0, d=6)
    secret = _secret_with_permanent_away_from(m, 4)
    b = m.permanent_response(4, secret, "app.theme/1")
    rng = random.Random(12)
    reports = [m.randomize_memoised(4, secret, "app.theme/1", rng) for _ in range(REPEATS)]
    assert_reports_follow(m, b, reports)
    # The attack recovers B', not the value: when B' supports anything, the guess
    # is in B' (p2 - q2 >= 0.2 here: Hoeffding, error < 6 exp(-2*2000*0.1^2) < 1e-15).
    held = {b} if isinstance(b, int) else set(b)
    if held:
        assert averaging_attack(reports, 6) in held - {4}


def assert_reports_follow(m: Any, b: Report, reports: list[Report]) -> None:
    held = {b} if isinstance(b, int) else set(b)
    support = Counter(i for r in reports for i in ((r,) if isinstance(r, int) else r))
    p2 = Fraction(m.keep, WORD)
    q2 = (1 - p2) / (m.domain_size - 1) if isinstance(m, LongitudinalGRR) else 1 - p2
    for i in range(m.domain_size):
        expected = p2 if i in held else q2
        assert covers(support[i], len(reports), expected, 1.6e-7), (i, support[i], float(expected))


@dataclass(frozen=True)
class RedrawnOUE(LongitudinalOUE):
    """Planted bug: the 'permanent' response is redrawn on every call."""

    def randomize_memoised(
        self, value: object, secret: bytes, context: str, rng: Rng | None = None
    ) -> Report:
        fresh = self.base.randomize(value, rng)  # a new permanent response every call
        return self._instant(fresh, resolve(rng))


def test_a_redrawn_permanent_response_is_caught() -> None:
    good = build("oue", eps=1.0, eps_inf=3.0, d=6)
    assert isinstance(good, LongitudinalOUE)
    bad = RedrawnOUE(base=good.base, declared_epsilon=1.0, epsilon_inf=3.0, keep=good.keep)
    secret = _secret_with_permanent_away_from(good, 4)
    b = good.permanent_response(4, secret, "app.theme/1")
    rng = random.Random(13)
    reports = [bad.randomize_memoised(4, secret, "app.theme/1", rng) for _ in range(REPEATS)]
    # The averaging attack now recovers the true value (p* - q* = 0.23 at eps_1 = 1:
    # Hoeffding, < 1e-10), and the reports no longer follow B''s channel.
    assert averaging_attack(reports, 6) == 4
    with pytest.raises(AssertionError):
        assert_reports_follow(good, b, reports)


def test_two_level_one_bit_mean_memoises_per_value() -> None:
    """1000 reports of 3.0: the share of 1s is k or 1 - k by B' (CP at 1e-6)."""
    m = build("one_bit_mean", eps=0.5, eps_inf=2.0)
    b = m.permanent_response(3.0, SECRET, "latency/1")
    rng = random.Random(14)
    ones = sum(m.randomize_memoised(3.0, SECRET, "latency/1", rng) for _ in range(1000))
    k = Fraction(m.keep, WORD)
    assert covers(ones, 1000, k if b == 1 else 1 - k, 1e-6)


KNOWN_SEED_PREFIX = "383639a9e5c65842"  # LABEL v2
KNOWN_FIRST_WORD = 17388521513152033642


def test_hand_built_objects_are_checked() -> None:
    good = build("oue", eps=1.0, eps_inf=3.0)
    with pytest.raises(ValueError, match="declared epsilon"):
        LongitudinalOUE(base=good.base, declared_epsilon=0.5, epsilon_inf=3.0, keep=good.keep)
    with pytest.raises(ValueError, match="permanent level"):
        LongitudinalOUE(base=good.base, declared_epsilon=1.0, epsilon_inf=2.0, keep=good.keep)
    with pytest.raises(ValueError, match="keep"):
        LongitudinalOUE(base=good.base, declared_epsilon=1.0, epsilon_inf=3.0, keep=WORD)
