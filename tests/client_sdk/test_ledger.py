"""The device's budget ledger over time and across processes (issue 12, items 2 and 4).

One unit of privacy (device, metric name, epoch) buys one report, whatever
the number of ``Client`` objects, forked children or separate processes that
share the state folder; a wall clock stepped back buys nothing; an opt-out
does not reset the lifetime ledger; every state file is private.
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import stat
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client, Fleet
from tests.support.sdk_children import record_once
from tests.support.sdk_fixtures import BROWSERS, specs, spool_rows

KEY = "ingest-key-for-tests"
DAY = 86400.0
T0 = 1_800_000_000.0


class Clock:
    """A settable wall clock (the Client's clock seam)."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def offline(state: Path, **kw: Any) -> Client:
    """A client with no sender thread whose collector URL is a dead port."""
    kw.setdefault("metrics", specs())
    kw.setdefault("background", False)
    return Client("http://127.0.0.1:9", api_key=KEY, state_dir=state, **kw)


# -- one unit, one report ------------------------------------------------------------------

#: (metric, values the racers record, options): the per-epoch unit of a one-level metric,
#: and the lifetime ledger of a memoised one (a generous per-epoch budget, so that only
#: the lifetime budget of one eps_inf = 4 can refuse: one distinct value in all).
RACES = {
    "epoch": ("browser", [BROWSERS[i % 3] for i in range(4)], {}, "over_budget"),
    "lifetime": ("theme", list(BROWSERS), {"budgets": {"theme": 100.0},
                                          "lifetime_budgets": {"theme": 4.0}},
                 "over_lifetime_budget"),
}


def _collect(results: Any, n: int, losers: list[int] | None = None) -> Counter[str]:
    """Statuses of n children; the indices of those refused are appended to ``losers``."""
    got = [results.get(timeout=120) for _ in range(n)]
    assert sorted(i for i, _ in got) == list(range(n))
    if losers is not None:
        losers.extend(i for i, status in got if status != "queued")
    return Counter(status for _, status in got)


def _fork_body(number: int, client: Client, metric: str, value: object, barrier: Any,
               results: Any) -> None:
    barrier.wait(60)
    results.put((number, client.record(metric, value).status))


@pytest.mark.parametrize("race", sorted(RACES))
def test_two_clients_on_one_state_dir_spend_a_unit_once(tmp_path: Path, race: str) -> None:
    metric, values, options, refusal = RACES[race]
    clock = Clock()
    first, second = offline(tmp_path, clock=clock, **options), offline(tmp_path, clock=clock,
                                                                         **options)
    try:
        assert first.record(metric, values[0]).ok
        assert second.record(metric, values[1]).status == refusal
        assert first.record(metric, values[2]).status == refusal
        assert len(spool_rows(tmp_path)) == 1
    finally:
        first.close(0)
        second.close(0)


@pytest.mark.parametrize("race", sorted(RACES))
def test_forked_children_spend_a_unit_once(tmp_path: Path, race: str) -> None:
    """The Client is made before the fork; every child inherits it and records at once."""
    metric, values, options, refusal = RACES[race]
    client = offline(tmp_path, clock=Clock(), **options)
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(len(values)), ctx.Queue()
    children = [ctx.Process(target=_fork_body, args=(i, client, metric, v, barrier, results))
                for i, v in enumerate(values)]
    try:
        for child in children:
            child.start()
        losers: list[int] = []
        statuses = _collect(results, len(values), losers)
        for child in children:
            child.join(60)
            assert child.exitcode == 0
        assert statuses == {"queued": 1, refusal: len(values) - 1}
        # The parent too, with a value that lost (the winner's value is memoised:
        # reporting it again costs no lifetime budget).
        assert client.record(metric, values[losers[0]]).status == refusal
        assert len(spool_rows(tmp_path)) == 1
    finally:
        client.close(0)


@pytest.mark.parametrize("race", sorted(RACES))
def test_separate_processes_spend_a_unit_once(tmp_path: Path, race: str) -> None:
    """Spawned processes (no shared memory at all), each with its own Client."""
    metric, values, options, refusal = RACES[race]
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(len(values)), ctx.Queue()
    children = [ctx.Process(target=record_once, args=(i, str(tmp_path), T0, metric, v, options,
                                                      barrier, results))
                for i, v in enumerate(values)]
    for child in children:
        child.start()
    statuses = _collect(results, len(values))
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    assert statuses == {"queued": 1, refusal: len(values) - 1}
    assert len(spool_rows(tmp_path)) == 1


# -- epochs only move forward ----------------------------------------------------------------


def test_a_clock_stepped_back_buys_no_report(tmp_path: Path) -> None:
    clock = Clock()
    c = offline(tmp_path, clock=clock)
    try:
        first = c.record("browser", BROWSERS[0])
        assert first.ok
        statuses = []
        for _ in range(10):  # the user (or NTP) sets the clock back a day, ten times
            clock.t -= DAY
            result = c.record("browser", BROWSERS[1])
            statuses.append((result.status, result.epoch))
        assert statuses == [("over_budget", first.epoch)] * 10
    finally:
        c.close(0)
    again = offline(tmp_path, clock=clock)  # the high-water mark is on disk
    try:
        assert again.record("browser", BROWSERS[2]).status == "over_budget"
        clock.t = T0 + DAY  # the real next day
        assert again.record("browser", BROWSERS[2]).ok
        assert [(u.epoch, u.reports) for u in again.privacy_report().units] == [
            (int(T0 // DAY), 1), (int(T0 // DAY) + 1, 1)]
    finally:
        again.close(0)
    assert len(spool_rows(tmp_path)) == 2


# -- opt-out keeps the lifetime ledger -------------------------------------------------------


def test_opt_out_then_opt_in_keeps_the_lifetime_charges(tmp_path: Path) -> None:
    """After opt-in the secret is new, so a value draws a new permanent response: it is
    charged again, and the lifetime budget (one eps_inf = 4) refuses it."""
    clock = Clock()
    c = offline(tmp_path, clock=clock, lifetime_budgets={"theme": 4.0})
    try:
        assert c.record("theme", BROWSERS[0]).ok
        c.opt_out()
        c.opt_in()
        clock.t += DAY
        assert c.record("theme", BROWSERS[0]).status == "over_lifetime_budget"
        (life,) = c.privacy_report().lifetime
        assert (life.metric, life.memoised_values, life.spent) == ("theme", 1, 4.0)
    finally:
        c.close(0)
    again = offline(tmp_path, clock=clock, lifetime_budgets={"theme": 4.0})
    try:
        again.opt_out()
        again.opt_in()
        clock.t += DAY
        assert again.record("theme", BROWSERS[1]).status == "over_lifetime_budget"
    finally:
        again.close(0)


# -- state files -----------------------------------------------------------------------------


@pytest.fixture()
def loose_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _modes(folder: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in folder.iterdir()}


def test_every_state_file_is_private(tmp_path: Path, loose_umask: None) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)  # an existing folder, readable by everyone
    os.chmod(state, 0o755)  # noqa: S103 (the loose folder under test)
    c = offline(state, clock=Clock())
    try:
        assert c.record("browser", BROWSERS[0]).ok
        assert c.record("theme", BROWSERS[1]).ok
        modes = _modes(state)
        assert {"device_secret", "metrics.json", "spool.sqlite3", "spool.sqlite3-wal",
                "spool.sqlite3-shm"} <= set(modes)
        assert modes == dict.fromkeys(modes, 0o600)
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
        c.opt_out()
        assert _modes(state) == dict.fromkeys(_modes(state), 0o600)
        assert "opted_out" in _modes(state)
    finally:
        c.close(0)
    for path in state.iterdir():  # as an older SDK (or a careless backup) left them
        os.chmod(path, 0o644)
    os.chmod(state, 0o755)  # noqa: S103 (the loose folder under test)
    again = offline(state, clock=Clock())
    try:
        again.opt_in()
        modes = _modes(state)
        assert modes == dict.fromkeys(modes, 0o600) and "spool.sqlite3" in modes
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    finally:
        again.close(0)


def test_fleet_state_files_are_private(tmp_path: Path, loose_umask: None) -> None:
    state = tmp_path / "fleet"
    fleet = Fleet("http://127.0.0.1:9", api_key=KEY, state_dir=state, metrics=specs(),
                  background=False)
    try:
        assert fleet.device().record("browser", BROWSERS[0]).ok
        fleet.flush(0)
        modes = _modes(state)
        assert "fleet-spool.sqlite3" in modes and modes == dict.fromkeys(modes, 0o600)
    finally:
        fleet.close(0)


def test_the_lifetime_ledger_holds_no_value(tmp_path: Path) -> None:
    """What the lifetime ledger keeps after opt-out: HMAC keys under a deleted secret."""
    c = offline(tmp_path, clock=Clock())
    try:
        assert c.record("theme", BROWSERS[2]).ok
        c.opt_out()
    finally:
        c.close(0)
    conn = sqlite3.connect(tmp_path / "spool.sqlite3")
    try:
        rows = conn.execute("SELECT * FROM lifetime").fetchall()
    finally:
        conn.close()
    assert len(rows) == 1
    assert all(BROWSERS[2] not in str(x) and str(x) != "2" for x in rows[0])


# -- a state folder written by the previous SDK (schema 1) ------------------------------------

SCHEMA_1 = """
CREATE TABLE spool (seq INTEGER PRIMARY KEY AUTOINCREMENT, report_id TEXT NOT NULL,
    metric TEXT NOT NULL, version INTEGER NOT NULL, epoch INTEGER NOT NULL,
    token TEXT NOT NULL, payload TEXT NOT NULL, charge REAL NOT NULL, size INTEGER NOT NULL,
    lease_until REAL NOT NULL DEFAULT 0, lease_pid INTEGER NOT NULL DEFAULT 0);
CREATE TABLE ledger (metric TEXT NOT NULL, version INTEGER NOT NULL, epoch INTEGER NOT NULL,
    spent REAL NOT NULL, reports INTEGER NOT NULL, PRIMARY KEY (metric, version, epoch))
    WITHOUT ROWID;
CREATE TABLE lifetime (metric TEXT NOT NULL, version INTEGER NOT NULL,
    value_key TEXT NOT NULL, epsilon_inf REAL NOT NULL,
    PRIMARY KEY (metric, version, value_key)) WITHOUT ROWID;
CREATE TRIGGER charge_ledger AFTER INSERT ON spool WHEN new.charge > 0
BEGIN
    INSERT INTO ledger (metric, version, epoch, spent, reports)
    VALUES (new.metric, new.version, new.epoch, new.charge, 1)
    ON CONFLICT (metric, version, epoch)
    DO UPDATE SET spent = spent + excluded.spent, reports = reports + 1;
END;
PRAGMA user_version = 1;
"""


def test_a_schema_1_ledger_is_migrated_to_the_name(tmp_path: Path) -> None:
    epoch = int(T0 // DAY)
    conn = sqlite3.connect(tmp_path / "spool.sqlite3")
    conn.executescript(SCHEMA_1)
    conn.executemany("INSERT INTO ledger VALUES (?, ?, ?, ?, ?)", [
        ("browser", 1, epoch, 1.0, 1), ("browser", 2, epoch, 1.0, 1)])
    conn.execute("INSERT INTO lifetime VALUES ('theme', 1, 'ab12', 4.0)")
    conn.commit()
    conn.close()
    c = offline(tmp_path, clock=Clock(), lifetime_budgets={"theme": 4.0})
    try:
        assert c.record("browser", BROWSERS[0]).status == "over_budget"
        assert c.record("theme", BROWSERS[0]).status == "over_lifetime_budget"
        report = c.privacy_report()
        assert [(u.metric, u.epoch, u.reports, u.spent) for u in report.units] == [
            ("browser", epoch, 2, 2.0)]
        assert [(x.metric, x.memoised_values, x.spent) for x in report.lifetime] == [
            ("theme", 1, 4.0)]
        assert c.record("page", "p1").ok  # the trigger is gone: one charge, not two
        assert [u.spent for u in c.privacy_report().units if u.metric == "page"] == [2.0]
    finally:
        c.close(0)
