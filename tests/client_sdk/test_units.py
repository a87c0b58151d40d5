"""The unit of privacy is the metric name (issue 12, item 2).

A new version of a spec is the same question: it shares the per-epoch budget
and the lifetime ledger of its name, and keeps the permanent responses when
it keeps the mechanism and its parameters.  A spec that changes under an
existing (name, version) is refused, and so is one above the device's caps.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client, ConfigError, Fleet, PrivacyCaps
from client_sdk._device import memo_context
from ldp_core.metric import MetricSpec
from tests.support.sdk_fixtures import BROWSERS, CaptureTransport, specs, spool_rows
from tests.support.sdk_http import ScriptedCollector

KEY = "ingest-key-for-tests"
DAY = 86400.0
THEME = next(s for s in specs() if s["name"] == "theme")
BROWSER = next(s for s in specs() if s["name"] == "browser")


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def offline(state: Path, **kw: Any) -> Client:
    kw.setdefault("background", False)
    return Client("http://127.0.0.1:9", api_key=KEY, state_dir=state, **kw)


def version(spec: dict[str, Any], v: int, **changes: Any) -> dict[str, Any]:
    return {**spec, "version": v, **changes}


# -- the per-epoch budget and the lifetime ledger belong to the name ------------------------


def test_a_new_version_is_the_same_unit(tmp_path: Path) -> None:
    clock = Clock()
    c = offline(tmp_path, clock=clock, metrics=[version(BROWSER, 1)])
    try:
        assert c.record("browser", BROWSERS[0]).ok
    finally:
        c.close(0)
    # The admin edits min_reports: version 2, the same question, the same epoch.
    again = offline(tmp_path, clock=clock, metrics=[version(BROWSER, 2, min_reports=5)])
    try:
        assert [s.version for s in again.metrics()] == [2]
        assert again.record("browser", BROWSERS[1]).status == "over_budget"
        (unit,) = again.privacy_report().units
        assert (unit.metric, unit.reports, unit.spent) == ("browser", 1, 1.0)
    finally:
        again.close(0)
    assert len(spool_rows(tmp_path)) == 1


def _fleet_reports(spec: dict[str, Any], secrets: list[bytes]) -> list[Any]:
    transport = CaptureTransport()
    fleet = Fleet("http://127.0.0.1:9", api_key=KEY, metrics=[spec], transport=transport,
                  background=False, clock=Clock(), rng=random.Random(7))
    try:
        for secret in secrets:
            assert fleet.device(secret).record("flag", True).ok
        assert fleet.flush(10)
    finally:
        fleet.close(0)
    return transport.payloads()


def test_a_version_with_the_same_mechanism_keeps_the_permanent_responses() -> None:
    """1000 devices report under v1 and under v2 (only min_reports differs), with the
    same instantaneous randomness (rng seeded alike): the reports are equal iff every
    device kept its permanent bit B' (the instantaneous step is a symmetric flip decided
    by the same word).  Were B' redrawn per version, each device's two bits would agree
    with probability p^2 + (1-p)^2 = 0.9647 (p = e^4/(1+e^4), eps_inf = 4), all 1000
    with probability 0.9647^1000 < 3e-16."""
    flag = {"name": "flag", "kind": "boolean", "epsilon": 0.5, "mechanism": "binary_rr",
            "longitudinal": {"epsilon_inf": 4.0}}
    secrets = [random.Random(i).randbytes(32) for i in range(1000)]
    first = _fleet_reports(version(flag, 1), secrets)
    assert first == _fleet_reports(version(flag, 2, min_reports=3, unit="install"), secrets)
    v1, v2 = (MetricSpec.from_json(version(flag, v)) for v in (1, 2))
    v3 = MetricSpec.from_json(version(flag, 3, longitudinal={"epsilon_inf": 5.0}))
    assert memo_context(v1) == memo_context(v2) != memo_context(v3)
    assert "flag" in memo_context(v1) and "|1" not in memo_context(v1)


def test_changed_parameters_draw_a_new_response_only_within_the_lifetime_budget(
    tmp_path: Path,
) -> None:
    clock = Clock()

    def run(spec: dict[str, Any], **kw: Any) -> tuple[str, tuple[Any, ...]]:
        c = offline(tmp_path, clock=clock, metrics=[spec], **kw)
        try:
            status = c.record("theme", BROWSERS[0]).status
            return status, c.privacy_report().lifetime
        finally:
            clock.t += DAY
            c.close(0)

    budget = {"lifetime_budgets": {"theme": 8.0}}
    status, _ = run(version(THEME, 1), **budget)
    assert status == "queued"
    status, lifetime = run(version(THEME, 2, min_reports=1), **budget)  # same draw: free
    assert status == "queued"
    assert [(x.metric, x.memoised_values, x.spent) for x in lifetime] == [("theme", 1, 4.0)]
    changed = version(THEME, 3, longitudinal={"epsilon_inf": 6.0})
    status, lifetime = run(changed, **budget)  # a new channel: 4 + 6 > 8
    assert status == "over_lifetime_budget"
    assert [(x.memoised_values, x.spent) for x in lifetime] == [(1, 4.0)]
    status, lifetime = run(changed)  # the default, 4 x 4 (the first draw): 10 fits
    assert status == "queued"
    assert [(x.metric, x.memoised_values, x.spent) for x in lifetime] == [("theme", 2, 10.0)]


# -- a spec changed under its version ---------------------------------------------------------


@pytest.fixture()
def server() -> Iterator[ScriptedCollector]:
    with ScriptedCollector([version(THEME, 1)]) as srv:
        yield srv


def _warnings(caplog: pytest.LogCaptureFixture, word: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and word in r.getMessage()]


def test_a_spec_changed_under_its_version_is_refused(
    tmp_path: Path, server: ScriptedCollector, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="client_sdk")
    clock = Clock()
    c = Client(server.url, api_key=KEY, state_dir=tmp_path, background=False, clock=clock)
    try:
        assert c.refresh_metrics(5)
        assert c.record("theme", BROWSERS[0]).ok
        server.metrics = [version(THEME, 1, longitudinal={"epsilon_inf": 8.0})]
        c.refresh_metrics(5)
        clock.t += DAY
        assert [c.record("theme", BROWSERS[0]).status for _ in range(3)] == ["spec_conflict"] * 3
        assert c.counters().refused == {"spec_conflict": 3}
        assert len(_warnings(caplog, "theme")) == 1
        assert [s.epsilon_inf for s in c.metrics()] == [4.0]  # the cached spec stays
        assert '"epsilon_inf": 4.0' in (tmp_path / "metrics.json").read_text()
        server.metrics = [version(THEME, 2, longitudinal={"epsilon_inf": 8.0})]
        assert c.refresh_metrics(5)
        assert c.record("theme", BROWSERS[0]).ok  # a new version is welcome
    finally:
        c.close(0)
    assert len(spool_rows(tmp_path)) == 2


def test_the_ledger_remembers_each_version_even_without_the_spec_cache(tmp_path: Path) -> None:
    clock = Clock()
    c = offline(tmp_path, clock=clock, metrics=[version(BROWSER, 1)])
    try:
        assert c.record("browser", BROWSERS[0]).ok
    finally:
        c.close(0)
    (tmp_path / "metrics.json").unlink()
    clock.t += DAY
    changed = version(BROWSER, 1, epsilon=2.0)
    again = offline(tmp_path, clock=clock, metrics=[changed])
    try:
        assert again.record("browser", BROWSERS[0]).status == "spec_conflict"
    finally:
        again.close(0)
    assert len(spool_rows(tmp_path)) == 1


# -- the device's caps --------------------------------------------------------------------------

HOT = {"name": "hot", "kind": "boolean", "epsilon": 5.0, "mechanism": "binary_rr"}
HOT_LIFE = {"name": "hot_life", "kind": "boolean", "epsilon": 1.0, "mechanism": "binary_rr",
            "longitudinal": {"epsilon_inf": 9.0}}


def test_a_spec_over_the_caps_is_refused_without_an_exception(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="client_sdk")
    c = offline(tmp_path, metrics=[HOT, HOT_LIFE, BROWSER])
    try:
        statuses = [c.record(name, True).status for name in ("hot", "hot_life") * 3]
        assert statuses == ["spec_over_cap"] * 6
        assert c.counters().refused == {"spec_over_cap": 6}
        assert len(_warnings(caplog, "hot:")) == 1 and len(_warnings(caplog, "hot_life:")) == 1
        assert c.privacy_report().units == () and spool_rows(tmp_path) == []
        assert c.record("browser", BROWSERS[0]).ok  # other metrics are untouched
    finally:
        c.close(0)
    roomy = offline(tmp_path / "roomy", metrics=[HOT, HOT_LIFE],
                    caps=PrivacyCaps(epsilon=8.0, epsilon_inf=16.0))
    try:
        assert roomy.record("hot", True).ok and roomy.record("hot_life", False).ok
    finally:
        roomy.close(0)


def test_caps_are_checked() -> None:
    assert PrivacyCaps() == PrivacyCaps(epsilon=4.0, epsilon_inf=8.0)
    for bad in ({"epsilon": 0.0}, {"epsilon_inf": float("nan")}, {"epsilon": True}):
        with pytest.raises(ConfigError, match="epsilon"):
            PrivacyCaps(**bad)
