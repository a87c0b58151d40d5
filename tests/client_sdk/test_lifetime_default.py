"""A memoised metric name has a lifetime budget by default (issue 34, item 6).

Each spec version that changes the mechanism's parameters draws a new permanent
response for an unchanged value, charged epsilon_inf.  Without a cap, four versions
at eps_inf 1, 0.9, 0.8, 0.7 gave four fresh responses, and nothing stopped a fifth.
The default cap is ``PrivacyCaps.lifetime_multiple`` (4) x the epsilon_inf of the
name's *first* draw on this device, so no later version (one raising epsilon_inf
included) moves it; ``lifetime_budgets={"name": math.inf}`` lifts it, deliberately.
The same sequence is a shared vector (sdk-js/scripts/gen_vectors.py, "lifetime"),
which the TypeScript ledger must decide alike (sdk-js/test/lifetime.test.ts).
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client, ConfigError, Fleet, PrivacyCaps
from client_sdk._device import DeviceState, mechanism_fingerprint
from client_sdk._ledger import Ledger, MemoryLedger, SqliteLedger
from client_sdk._store import Store
from ldp_core.metric import MetricSpec

KEY = "ingest-key-for-tests"
DAY = 86400.0
PLAN = {"name": "plan", "kind": "categorical", "domain": ["free", "basic", "pro", "team"],
        "mechanism": "grr"}
#: (version, epsilon, epsilon_inf): each version changes the parameters, so each one
#: draws a new permanent response of an unchanged value.
VERSIONS = [(1, 0.5, 1.0), (2, 0.45, 0.9), (3, 0.4, 0.8), (4, 0.35, 0.7)]


def spec(version: int, eps: float, eps_inf: float) -> dict[str, Any]:
    return {**PLAN, "version": version, "epsilon": eps, "longitudinal": {"epsilon_inf": eps_inf}}


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def offline(state: Path, clock: Clock, body: dict[str, Any], **kw: Any) -> Client:
    return Client("http://127.0.0.1:9", api_key=KEY, state_dir=state, background=False,
                  clock=clock, metrics=[body], **kw)


def test_spec_versions_cannot_redraw_an_unchanged_value_without_bound(tmp_path: Path) -> None:
    clock = Clock()
    lifetimes = []
    for body in (spec(*v) for v in VERSIONS):
        c = offline(tmp_path, clock, body)
        try:
            assert c.record("plan", "pro").ok           # a fresh permanent response
            clock.t += DAY
            assert c.record("plan", "pro").ok           # the same one, memoised: no spend
            clock.t += DAY
            (life,) = c.privacy_report().lifetime
            lifetimes.append((life.memoised_values, round(life.spent, 12)))
        finally:
            c.close(0)
    assert lifetimes == [(1, 1.0), (2, 1.9), (3, 2.7), (4, 3.4)]
    c = offline(tmp_path, clock, spec(*VERSIONS[-1]))
    try:
        # A fifth fresh permanent response: 3.4 + 0.7 > 4 x 1.0, the first draw's eps_inf.
        assert c.record("plan", "team").status == "over_lifetime_budget"
        assert c.record("plan", "pro").ok               # the memoised one still reports
        (life,) = c.privacy_report().lifetime
        assert (life.memoised_values, life.budget, life.first_epsilon_inf) == (4, 4.0, 1.0)
        assert life.spent <= 4 * 1.0
        assert "of cap 4 " in str(c.privacy_report())
        assert c.counters().refused == {"over_lifetime_budget": 1}
    finally:
        c.close(0)
    clock.t += DAY
    # A version that raises eps_inf to the device's cap (8) does not raise the lifetime cap
    # (4 x 8 = 32 were it the current or the largest eps_inf): still refused.
    raised = spec(5, 1.0, 8.0)
    c = offline(tmp_path, clock, raised)
    try:
        assert c.record("plan", "pro").status == "over_lifetime_budget"
        assert c.privacy_report().lifetime[0].budget == 4.0
    finally:
        c.close(0)
    # The app lifts it for this name, deliberately: math.inf.
    c = offline(tmp_path, clock, raised, lifetime_budgets={"plan": math.inf})
    try:
        assert c.record("plan", "pro").ok
        (life,) = c.privacy_report().lifetime
        assert (life.memoised_values, life.budget) == (5, math.inf)
        assert math.isclose(life.spent, 11.4)
    finally:
        c.close(0)


def test_the_multiple_is_the_apps_and_an_explicit_budget_overrides_it(tmp_path: Path) -> None:
    clock = Clock()
    c = offline(tmp_path / "a", clock, spec(1, 0.5, 1.0), caps=PrivacyCaps(lifetime_multiple=2))
    try:
        assert [c.record("plan", v).status for v in ("free", "basic", "pro")] == [
            "queued", "over_budget", "over_budget"]   # one report per epoch
        for value, status in (("basic", "queued"), ("pro", "over_lifetime_budget")):
            clock.t += DAY
            assert c.record("plan", value).status == status
        assert c.privacy_report().lifetime[0].budget == 2.0
    finally:
        c.close(0)
    c = offline(tmp_path / "b", clock, spec(1, 0.5, 1.0), lifetime_budgets={"plan": 3})
    try:
        statuses = []
        for value in ("free", "basic", "pro", "team"):
            clock.t += DAY
            statuses.append(c.record("plan", value).status)
        assert statuses == ["queued"] * 3 + ["over_lifetime_budget"]
        assert c.privacy_report().lifetime[0].budget == 3.0
    finally:
        c.close(0)


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, True, "4"])
def test_a_lifetime_budget_must_be_a_positive_number(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigError, match="lifetime budget for 'plan'"):
        offline(tmp_path, Clock(), spec(1, 0.5, 1.0), lifetime_budgets={"plan": bad})
    with pytest.raises(ConfigError, match="lifetime budget for 'plan'"):
        Fleet("http://127.0.0.1:9", api_key=KEY, background=False,
              lifetime_budgets={"plan": bad})


@pytest.mark.parametrize("bad", [0.5, 0, math.inf, math.nan, True])
def test_a_lifetime_multiple_below_one_draw_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigError, match="lifetime_multiple"):
        PrivacyCaps(lifetime_multiple=bad)


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_both_ledgers_decide_alike(kind: str) -> None:
    """The device path (``DeviceState.prepare``) over a Client's ledger and a Fleet
    device's: the same sequence, the same answers, the same first draw."""
    ledger: Ledger = (SqliteLedger(Store(None, max_reports=100, max_bytes=10**6))
                      if kind == "sqlite" else MemoryLedger())
    device = DeviceState(bytes(range(32)), ledger)
    now, statuses = 1_800_000_000.0, []
    for body, value in [*((spec(*v), 2) for v in VERSIONS), (spec(4, 0.35, 0.7), 3),
                        (spec(5, 1.0, 8.0), 2), (spec(6, 0.3, 0.6), 2)]:
        s = MetricSpec.from_json(body)
        out = device.prepare(s, mechanism_fingerprint(s), value, now, budget=s.epsilon,
                             lifetime_budget=None, spool=None)
        statuses.append(out.status)
        now += DAY
    # 1 + 0.9 + 0.8 + 0.7 = 3.4; + 0.7 or + 8 is over 4; + 0.6 is exactly 4 (fits).
    assert statuses == ["queued"] * 4 + ["over_lifetime_budget"] * 2 + ["queued"]
    ((metric, n, spent, first),) = ledger.spend().lifetime
    assert (metric, n, first) == ("plan", 5, 1.0) and math.isclose(spent, 4.0)


def test_a_ledger_of_schema_5_takes_its_smallest_draw_as_the_first(tmp_path: Path) -> None:
    """Schema 5 did not record which draw came first: the smallest eps_inf stands in
    (a cap never larger than the first draw's would give)."""
    clock = Clock()
    offline(tmp_path, clock, spec(1, 0.5, 1.0)).close(0)
    conn = sqlite3.connect(tmp_path / "spool.sqlite3")
    conn.executescript("""
        DROP TABLE lifetime_first;
        INSERT INTO lifetime VALUES ('plan', 'aa', 2.0), ('plan', 'bb', 1.0);
        PRAGMA user_version = 5;""")
    conn.close()
    c = offline(tmp_path, clock, spec(1, 0.5, 1.0))
    try:
        assert c.record("plan", "pro").ok                              # 3 + 1 <= 4 x 1
        clock.t += DAY
        assert c.record("plan", "team").status == "over_lifetime_budget"  # 4 + 1 > 4
        (life,) = c.privacy_report().lifetime
        assert (life.memoised_values, life.spent, life.first_epsilon_inf) == (3, 4.0, 1.0)
    finally:
        c.close(0)
