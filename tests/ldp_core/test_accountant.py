"""The budget accountant: composition bounds, the bound it takes, and the unit of privacy."""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError
from decimal import Decimal, getcontext

import pytest

from ldp_core import epsilon as epsilon_module
from ldp_core.accountant import (
    DEFAULT_UNIT,
    Guarantee,
    advanced_epsilon,
    adversary_accuracy,
    compose,
    lifetime,
    mechanism_guarantees,
    parallel,
    sequential,
    single,
    year_budget,
)


def exact_advanced(eps: float, k: int, delta: float) -> Decimal:
    """sqrt(2 k ln(1/delta)) eps + k eps (e^eps - 1), to 50 digits."""
    getcontext().prec = 50
    e, d = Decimal(eps), Decimal(delta)
    return (2 * k * (1 / d).ln()).sqrt() * e + k * e * (e.exp() - 1)


def test_sequential_sums_and_parallel_takes_the_max() -> None:
    gs = [single(0.5), single(1.0), Guarantee(epsilon=0.25, delta=1e-7)]
    s = sequential(gs)
    assert s.epsilon >= 1.75 and s.epsilon == pytest.approx(1.75)
    assert s.delta >= 1e-7 and s.bound == "basic" and s.reports == 3
    p = parallel(gs)
    assert (p.epsilon, p.delta, p.bound) == (1.0, 1e-7, "parallel")
    with pytest.raises(ValueError):
        sequential([])
    with pytest.raises(ValueError):
        parallel([])


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("k", [2, 10, 365, 10_000])
@pytest.mark.parametrize("delta", [1e-9, 1e-6, 1e-3])
def test_advanced_is_the_formula_rounded_up(eps: float, k: int, delta: float) -> None:
    value = advanced_epsilon(eps, k, delta)
    exact = exact_advanced(eps, k, delta)
    assert Decimal(value) >= exact
    assert value == pytest.approx(float(exact), rel=1e-10)


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("k", [1, 2, 3, 10, 100, 365, 10_000])
def test_compose_takes_the_smaller_bound_and_says_which(eps: float, k: int) -> None:
    g = compose(eps, k, delta_prime=1e-6)
    basic = k * eps
    advanced = advanced_epsilon(eps, k, 1e-6) if k > 1 else math.inf
    assert g.epsilon == pytest.approx(min(basic, advanced))
    assert g.epsilon <= basic * (1 + 1e-15)  # never worse than basic
    expected = "single" if k == 1 else ("advanced" if advanced < basic else "basic")
    assert g.bound == expected
    assert g.delta == (1e-6 if expected == "advanced" else 0.0)
    assert g.reports == k


def test_advanced_loses_for_few_reports_and_wins_for_many() -> None:
    assert compose(0.1, 3).bound == "basic"
    assert compose(0.1, 365).bound == "advanced"
    assert compose(0.1, 365).epsilon < 14 < 36.5
    assert compose(1.0, 365).bound == "basic"  # e^eps - 1 term dominates


def test_every_guarantee_carries_its_unit() -> None:
    assert single(1.0).unit == DEFAULT_UNIT == "per device, per metric, per epoch"
    assert "365 epochs" in compose(0.1, 365).unit
    life = lifetime(4.0)
    assert life.bound == "lifetime" and "distinct value" in life.unit
    assert "any number of reports" in life.text()
    assert "per device, per metric, per epoch" in single(0.5).text()


def test_adversary_accuracy_beside_epsilon() -> None:
    assert adversary_accuracy is epsilon_module.adversary_accuracy
    assert single(math.log(3)).adversary_accuracy == pytest.approx(0.75)
    assert Guarantee(epsilon=0.0).adversary_accuracy == 0.5
    assert "75.0%" in single(math.log(3)).text()


def test_year_budget_for_the_demo() -> None:
    y = year_budget(0.1, reports=365, delta_prime=1e-6, epsilon_inf=4.0)
    assert y.basic.epsilon == pytest.approx(36.5)
    assert y.advanced.epsilon == pytest.approx(float(exact_advanced(0.1, 365, 1e-6)))
    assert y.chosen is y.advanced and y.chosen.bound == "advanced"
    assert y.lifetime is not None and y.lifetime.epsilon == 4.0
    text = y.text()
    assert "basic" in text and "advanced" in text and "taken: advanced" in text
    assert "distinct value" in text
    y1 = year_budget(1.0)
    assert y1.chosen.bound == "basic" and y1.lifetime is None
    assert "daily" in y1.chosen.unit


def test_guarantees_are_frozen_and_validated() -> None:
    g = single(1.0)
    with pytest.raises(FrozenInstanceError):
        g.epsilon = 2.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="epsilon"):
        Guarantee(epsilon=-1.0)
    with pytest.raises(ValueError, match="delta"):
        Guarantee(epsilon=1.0, delta=1.0)
    with pytest.raises(ValueError, match="k must"):
        compose(1.0, 0)
    with pytest.raises(ValueError, match="delta_prime"):
        advanced_epsilon(1.0, 3, 0.0)
    with pytest.raises(ValueError, match="epsilon"):
        single(float("inf"))


def test_effective_bound_of_a_memoised_metric() -> None:
    # One value all year: the reports are post-processing of one memoised response.
    y = year_budget(1.0, epsilon_inf=4.0)
    assert y.chosen.epsilon == pytest.approx(365.0)
    assert y.effective.epsilon == 4.0 and y.effective.bound == "lifetime"
    # Many distinct values: eps_inf per value, until composition is the better bound.
    assert year_budget(1.0, epsilon_inf=4.0, distinct_values=10).effective.epsilon == 40.0
    many = year_budget(0.1, epsilon_inf=4.0, distinct_values=100)
    assert many.effective is many.chosen and many.effective.bound == "advanced"
    plain = year_budget(1.0)
    assert plain.effective is plain.chosen
    with pytest.raises(ValueError, match="distinct_values"):
        year_budget(1.0, epsilon_inf=4.0, distinct_values=0)


def test_mechanism_guarantees_state_both_units() -> None:
    from ldp_core import longitudinal, mechanism

    one = mechanism_guarantees(mechanism("oue", epsilon=1.0, domain_size=8))
    assert [(g.bound, g.unit) for g in one] == [("single", DEFAULT_UNIT)]
    two = mechanism_guarantees(longitudinal("oue", epsilon=1.0, epsilon_inf=4.0, domain_size=8))
    assert [g.bound for g in two] == ["single", "lifetime"]
    assert two[0].epsilon <= 1.0 and two[1].epsilon == 4.0
    assert "distinct value" in two[1].unit
