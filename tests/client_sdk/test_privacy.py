"""SDK privacy on the device: budget ledger, memoisation, secret, opt-out, no true value kept."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import os
import random
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client, DeliveryConfig
from client_sdk._device import memo_context, payload_text
from ldp_core.epsilon import adversary_accuracy
from ldp_core.metric import MetricSpec
from ldp_core.tokens import b64url
from tests.support.sdk_fixtures import BROWSERS, specs, spool_rows
from tests.support.sdk_http import ScriptedCollector

KEY = "ingest-key-for-tests"
DAY = 86400.0


class Clock:
    """A settable wall clock for epochs (the device path uses time.time)."""

    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture()
def server() -> Iterator[ScriptedCollector]:
    with ScriptedCollector(specs()) as srv:
        yield srv


def offline(state: Path, **kw: Any) -> Client:
    """A client that sends nothing unless flushed (its collector URL is a dead port)."""
    kw.setdefault("metrics", specs())
    kw.setdefault("background", False)
    return Client("http://127.0.0.1:9", api_key=KEY, state_dir=state, **kw)


def test_second_record_in_an_epoch_is_refused_and_counted(tmp_path: Path) -> None:
    clock = Clock()
    c = offline(tmp_path, clock=clock)
    try:
        assert c.record("browser", BROWSERS[0]).status == "queued"
        refused = c.record("browser", BROWSERS[1])
        assert (refused.status, refused.ok) == ("over_budget", False)
        assert c.counters().refused_budget == 1
        assert len(spool_rows(tmp_path)) == 1  # not sent, not queued
        clock.t += DAY  # the next epoch: a new unit
        assert c.record("browser", BROWSERS[1]).ok
        report = c.privacy_report()
        assert "per device, per metric, per day" in str(report)
        assert report.to_json()["units"][0]["metric"] == "browser"
        assert [(u.epoch, u.reports, u.spent) for u in report.units] == [
            (int(clock.t // DAY) - 1, 1, 1.0),
            (int(clock.t // DAY), 1, 1.0),
        ]
        unit = report.units[0]
        assert unit.unit == "per device, per metric, per day" and unit.budget == 1.0
        assert unit.adversary_accuracy == pytest.approx(adversary_accuracy(1.0))
    finally:
        c.close(0)


def test_ledger_survives_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    c = offline(tmp_path, clock=clock)
    assert c.record("page", "p7").ok
    c.close(0)
    again = offline(tmp_path, clock=clock)
    try:
        assert again.record("page", "p8").status == "over_budget"
        assert [u.spent for u in again.privacy_report().units] == [2.0]
    finally:
        again.close(0)


def test_larger_budget_per_unit_allows_more_reports(tmp_path: Path) -> None:
    c = offline(tmp_path, budgets={"browser": 2.0}, clock=Clock())
    try:
        assert [c.record("browser", BROWSERS[0]).status for _ in range(3)] == [
            "queued",
            "queued",
            "over_budget",
        ]
    finally:
        c.close(0)


def test_device_secret_is_private_and_tokens_follow_the_contract(tmp_path: Path) -> None:
    state = tmp_path / "state"
    clock = Clock()
    c = offline(state, clock=clock)
    try:
        assert c.record("browser", BROWSERS[2]).ok
    finally:
        c.close(0)
    secret_path = state / "device_secret"
    assert stat.S_IMODE(os.stat(secret_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    secret = secret_path.read_bytes()
    assert len(secret) == 32
    (row,) = spool_rows(state)
    epoch = int(clock.t // DAY)
    assert row[4] == epoch
    # Offline: the report waits for a blind-signed token (none yet); the install key
    # that will ask the issuer for it is derived from the secret, never sent with it.
    assert row[5] == ""
    assert row[-2] == b64url(hmac.new(secret, b"ldp-install-key-v1", hashlib.sha256).digest())
    assert row[-1] == "day"                  # the token's unit: this epoch of one day
    again = offline(state, clock=clock)  # the same secret after a restart
    again.close(0)
    assert secret_path.read_bytes() == secret
    other = tmp_path / "other"
    offline(other).close(0)
    assert (other / "device_secret").read_bytes() != secret


#: A memoised OUE over 512 values: two independent permanent responses of one value
#: are equal with probability (1/2) (1 - 2q(1-q))^511 = 5e-9 (q = 1/(1+e^4) = 0.01799).
WIDE = {"name": "wide", "kind": "categorical", "domain": [f"w{i}" for i in range(512)],
        "epsilon": 1.0, "mechanism": "oue", "longitudinal": {"epsilon_inf": 4.0}}


def test_memoised_responses_survive_restarts(tmp_path: Path) -> None:
    """A value's permanent response is the same after a restart (a function of the
    persisted secret and the memo context, never stored).

    Every record draws its instantaneous step from ``Random(seed)``.  OUE's IRR keeps
    bit i iff its own word is < keep, so with equal seeds two reports are equal iff
    the two permanent bit vectors are.  Three reports made before the restart (seeds
    1-3) are kept; three made after it, in later epochs, with the same seeds must be
    equal to them.  A redrawn permanent response (a new secret, a context that moved)
    passes with probability < 5e-9 (see WIDE), the false-pass rate of this test.
    """
    clock, rng = Clock(), random.Random()
    spec = MetricSpec.from_json(WIDE)

    def three_reports() -> list[str]:
        c = offline(tmp_path, clock=clock, rng=rng, metrics=[WIDE])
        try:
            out = []
            for seed in (1, 2, 3):
                rng.seed(seed)
                assert c.record("wide", "w300").ok
                clock.t += DAY
            out = [row[6] for row in spool_rows(tmp_path)[-3:]]
            (life,) = c.privacy_report().lifetime
            assert (life.memoised_values, life.spent) == (1, 4.0)  # one draw, charged once
            return out
        finally:
            c.close(0)

    before = three_reports()
    secret = (tmp_path / "device_secret").read_bytes()
    m = spec.build()
    assert before == [  # and they are the documented derivation: memo_context, not version
        payload_text(m.encode(m.randomize_memoised(  # type: ignore[attr-defined]
            300, secret, memo_context(spec), rng=random.Random(seed)))) for seed in (1, 2, 3)]
    assert three_reports() == before  # after a restart: the same permanent response
    assert len(set(before)) == 3  # the instantaneous step did vary


def test_lifetime_budget_refuses_a_new_memoised_value(tmp_path: Path) -> None:
    clock = Clock()
    c = offline(tmp_path, clock=clock, lifetime_budgets={"theme": 4.0})
    try:
        assert c.record("theme", BROWSERS[0]).ok
        clock.t += DAY
        assert c.record("theme", BROWSERS[1]).status == "over_lifetime_budget"
        assert c.record("theme", BROWSERS[0]).ok  # an old value costs nothing new
    finally:
        c.close(0)


def test_sample_rate_is_applied_before_randomising(tmp_path: Path) -> None:
    c = offline(tmp_path, sample_rate={"browser": 0.0, "page": 1.0})
    try:
        assert c.record("browser", BROWSERS[0]).status == "sampled_out"
        assert c.record("page", "p1").ok
        assert c.privacy_report().units[0].metric == "page"  # no epsilon for sampled_out
        assert c.counters().refused == {"sampled_out": 1}
    finally:
        c.close(0)


def test_sample_rate_keeps_the_right_share(tmp_path: Path) -> None:
    # n = 4000 draws at rate 0.25: sd = sqrt(n p (1-p)) = 27.4; 5.3 sd -> FPR < 1e-7.
    from client_sdk._record import Sampler

    sampler = Sampler(0.25)
    rng = random.Random(7)
    kept = sum(sampler.keep("x", rng) for _ in range(4000))
    assert abs(kept - 1000) <= 5.3 * 27.4


def test_enabled_false_collects_nothing(tmp_path: Path, server: ScriptedCollector) -> None:
    state = tmp_path / "never"
    c = Client(server.url, api_key=KEY, state_dir=state, enabled=False)
    assert c.record("browser", BROWSERS[0]).status == "disabled"
    assert c.flush(1) and c.close(1)
    assert not state.exists()
    assert server.requests == []


def test_opt_out_purges_queue_spool_and_secret_and_stops(
    tmp_path: Path, server: ScriptedCollector
) -> None:
    clock = Clock()  # one epoch for both Clients: the "page" unit must still be spent
    c = Client(
        server.url,
        api_key=KEY,
        state_dir=tmp_path,
        metrics=specs(),
        background=False,
        delivery=DeliveryConfig(durability="batch"),
        clock=clock,
    )
    try:
        assert c.record("theme", BROWSERS[0]).ok  # memoised: memo ledger row
        assert c.record("browser", BROWSERS[1]).ok
        c.flush(0)  # spooled (deadline passed)
        assert c.record("page", "p1").ok  # still in memory
        c.opt_out()
        assert c.opted_out
        assert spool_rows(tmp_path) == []
        assert not (tmp_path / "device_secret").exists()
        import sqlite3

        conn = sqlite3.connect(tmp_path / "spool.sqlite3")  # kept: HMACs, no value
        assert conn.execute("SELECT COUNT(*) FROM lifetime").fetchone() == (1,)
        conn.close()
        assert c.counters().dropped == {"opt_out": 3}
        assert c.record("dark_mode", True).status == "opted_out"
        assert c.flush(1)
        assert server.posts() == []
        assert c.privacy_report().units  # what was spent stays told
    finally:
        c.close(0)
    again = Client(server.url, api_key=KEY, state_dir=tmp_path, background=False, clock=clock)
    try:
        assert again.opted_out and again.record("page", "p1").status == "opted_out"
        again.opt_in()
        assert again.record("dark_mode", False).ok
        # The epsilon ledger outlives an opt-out: this epoch's "page" unit stays spent.
        assert again.record("page", "p1").status == "over_budget"
        assert (tmp_path / "device_secret").exists()
    finally:
        again.close(0)


def test_no_true_value_in_spool_memo_state_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing the device keeps or logs carries a true value.

    True values: browser = BROWSERS[0] (GRR, index 0 on the wire), theme = BROWSERS[1]
    (memoised OUE, index 1), session_minutes = 12.3456789 (one-bit mean); n = 40 epochs.

    1. No state file (but the spec cache, which lists the domain) and no log line holds
       a label or the number's text.
    2. Every spooled payload decodes as a report of its metric's mechanism, and a one-bit
       mean payload is exactly 0 or 1: a spooled number, label or bare index fails.
    3. The true index is not what is spooled: a GRR(eps=1, d=3) report equals the true
       index with probability e/(e+2) = 0.576, so all 40 with probability 2.6e-10; a
       memoised OUE report equals the one-hot true vector with probability at most
       k^3 = 0.405 per epoch (k = the IRR keep, 0.7397), all 40: < 1e-15.  A device
       that spooled its true values fails both; false alarms < 3e-10 in all.
    """
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    c = offline(tmp_path, clock=clock, delivery=DeliveryConfig(backoff_base=0.01))
    minutes = 12.3456789
    n = 40
    try:
        for _ in range(n):
            assert c.record("browser", BROWSERS[0]).ok
            assert c.record("theme", BROWSERS[1]).ok
            assert c.record("session_minutes", minutes).ok
            clock.t += DAY
        c.flush(0.3)  # fails: log lines are written
    finally:
        c.close(0.1)
    leaks = [BROWSERS[0], BROWSERS[1], repr(minutes), "12.3456", "12.346", "1.2345"]
    for path in tmp_path.iterdir():
        if path.name == "metrics.json":  # the spec lists the domain itself
            continue
        data = path.read_bytes()
        for leak in leaks:
            assert leak.encode() not in data, (path.name, leak)
    assert caplog.records, "the failed delivery should have logged something"
    for leak in leaks:
        assert leak not in caplog.text
    rows = spool_rows(tmp_path)
    by_metric: dict[str, list[Any]] = {}
    mechanisms = {s["name"]: MetricSpec.from_json(s).build() for s in specs()}
    for row in rows:
        metric, payload = row[2], row[6]
        by_metric.setdefault(metric, []).append(
            mechanisms[metric].decode(json.loads(payload)))
    assert {k: len(v) for k, v in by_metric.items()} == {
        "browser": n, "theme": n, "session_minutes": n}
    assert {r[6] for r in rows if r[2] == "session_minutes"} <= {"0", "1"}
    assert by_metric["browser"].count(0) < n
    assert by_metric["theme"].count((1,)) < n


def test_grr_reports_are_randomised_on_the_device(tmp_path: Path) -> None:
    """A device path with the OS CSPRNG flips GRR outputs: 200 devices, same true value.

    GRR eps=1, d=3: P[report = true] = e/(e+2) = 0.576.  Of 200 reports the count
    of the true index is Bin(200, 0.576): mean 115.2, sd 6.99.  All 200 equal would
    be a failure of randomisation; the bound 115.2 + 6 sd = 157 has FPR < 1e-9.
    """
    from client_sdk import Fleet

    fleet = Fleet("http://127.0.0.1:9", api_key=KEY, metrics=specs(), background=False)
    for _ in range(200):
        assert fleet.device().record("browser", BROWSERS[0]).ok
    fleet.flush(0)  # spools the memory queue, sends nothing
    rows = fleet._pipeline.store.query("SELECT payload FROM spool")  # waiting for tokens
    assert len(rows) == 200
    truthful = sum(r[0] == "0" for r in rows)
    assert 115.2 - 6 * 6.99 <= truthful <= 115.2 + 6 * 6.99
    fleet.close(0)


def test_close_is_idempotent_and_record_after_close_is_refused(tmp_path: Path) -> None:
    c = offline(tmp_path)
    assert c.record("browser", BROWSERS[0]).ok
    assert c.close(0) is False                      # one report stays spooled for later
    assert c.close(0) is False                      # idempotent: the same answer
    assert c.record("browser", BROWSERS[0]).status == "closed"
    assert c.flush(0) is False
    assert len(spool_rows(tmp_path)) == 1


FLAG = {"name": "flag", "kind": "boolean", "epsilon": 0.5, "mechanism": "binary_rr",
        "longitudinal": {"epsilon_inf": 4.0}}


def test_sdk_uses_the_memoised_path_with_the_device_secret(tmp_path: Path) -> None:
    """The report equals randomize_memoised(index, secret, memo_context(spec)) drawn
    with the same instantaneous randomness: the SDK wires memoisation as specified."""
    clock = Clock()
    c = offline(tmp_path, clock=clock, rng=random.Random(42))
    try:
        assert c.record("theme", BROWSERS[2]).ok
    finally:
        c.close(0)
    spec = MetricSpec.from_json(next(s for s in specs() if s["name"] == "theme"))
    m = spec.build()
    secret = (tmp_path / "device_secret").read_bytes()
    expected = m.randomize_memoised(  # type: ignore[attr-defined]
        2, secret, memo_context(spec), rng=random.Random(42))
    (row,) = spool_rows(tmp_path)
    assert row[6] == f'"{m.encode(expected)}"'


def test_memoised_reports_never_average_to_the_true_value() -> None:
    """A device whose permanent bit B' is wrong reports the wrong answer forever.

    flag: binary RR, eps_inf = 4: P[B' = 0 | true 1] = 1/(1+e^4) ~ 0.018; we search
    device secrets for one with B' = 0 (up to 3000 tries: P[none] < 1e-23).  Its
    reports keep B' with probability k = keep/2**32, so over n = 600 epochs the
    share of 1s is Bin(n, 1-k)/n with k = 0.627 (eps_1 = 0.5): mean 0.373,
    sd = sqrt(k(1-k)/n) = 0.0197.  A one-level mechanism would average to > 1/2.
    |share - (1-k)| <= 6 sd has FPR < 2e-9; share < 0.5 is 6.4 sd away (FPR < 1e-9).
    """
    from client_sdk import Fleet
    from tests.support.sdk_fixtures import CaptureTransport

    spec = MetricSpec.from_json(FLAG)
    m = spec.build()
    for _ in range(3000):
        secret = os.urandom(32)
        if m.permanent_response(1, secret, memo_context(spec)) == 0:  # type: ignore[attr-defined]
            break
    else:
        raise AssertionError("no device with a flipped permanent bit in 3000 tries")
    clock, transport = Clock(), CaptureTransport()
    fleet = Fleet("http://127.0.0.1:9", api_key=KEY, metrics=[FLAG], transport=transport,
                  background=False, clock=clock)
    device = fleet.device(secret)
    n = 600
    for _ in range(n):
        assert device.record("flag", True).ok
        clock.t += DAY
    assert fleet.flush(10)
    share = sum(transport.payloads()) / n
    k = m.keep / 2**32  # type: ignore[attr-defined]
    sd = math.sqrt(k * (1 - k) / n)
    assert abs(share - (1 - k)) <= 6 * sd
    assert share < 0.5                                   # the noise did not average away
    (life,) = device.privacy_report().lifetime
    assert (life.memoised_values, life.spent) == (1, 4.0)
    fleet.close(0)


DWELL = {"name": "dwell", "kind": "numeric", "lo": 0.0, "hi": 60.0, "epsilon": 1.0,
         "mechanism": "piecewise", "longitudinal": {"epsilon_inf": 4.0}}


def test_a_drifting_memoised_number_is_charged_per_grid_point(tmp_path: Path) -> None:
    """The memoised Piecewise mean rounds with the device's offset before memoising:
    five values inside one grid step (60/256) reach at most two grid points, and the
    lifetime ledger charges eps_inf per point, exactly the points the device's
    permanent responses come from.  Charged per distinct value (the key before),
    the third value would pass the lifetime budget of 8 = two charges."""
    clock = Clock()
    c = offline(tmp_path, clock=clock, metrics=[DWELL], lifetime_budgets={"dwell": 8.0})
    values = [10.0, 10.05, 10.1, 10.15, 10.2]
    try:
        for v in values:
            assert c.record("dwell", v).ok, v
            clock.t += DAY
        (life,) = c.privacy_report().lifetime
    finally:
        c.close(0)
    spec = MetricSpec.from_json(DWELL)
    m = spec.build()
    secret = (tmp_path / "device_secret").read_bytes()
    points = {m.memo_key(v, secret, memo_context(spec)) for v in values}  # type: ignore[attr-defined]
    assert 1 <= len(points) <= 2
    assert (life.memoised_values, life.spent) == (len(points), 4.0 * len(points))
