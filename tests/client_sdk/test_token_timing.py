"""Unlinkable in time: a report batch never follows its install's token request closely.

Real collector (uvicorn, real Redis) behind a loopback ``RecordingProxy`` that
notes each request on arrival, as the operator of the issuer and the collector
(one process) sees them.  Devices report once per simulated day at a random
moment and are online at a few other random moments (``flush``); one simulated
clock drives them all, so a day has real hours between its requests.  The
collector accepts the simulated past epochs (``LDP_ACCEPTANCE_HOURS``).

From an install's second epoch on, no report batch may arrive within
``token_delay`` of any ``POST /v1/tokens`` that carried its install key, and
only first epochs may have their token fetched in the flush that sends them
(before: every other epoch, 240 of 480 device-epochs at 60 devices x 8 days).
Measure it without pytest::

    .venv/bin/python -m tests.client_sdk.test_token_timing 60 8
"""

from __future__ import annotations

import gzip
import json
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from client_sdk import Client, ConfigError, DeliveryConfig, UrllibTransport
from ldp_server.redis_server import RedisServer
from tests.client_sdk.test_e2e import register
from tests.support.recording_proxy import Arrival, RecordingProxy
from tests.support.sdk_fixtures import BROWSERS, specs
from tests.support.servers import INGEST_KEY, ServiceProcess, start_collector

DAY = 86400.0
DELAY = 600.0     # token_delay: 10 simulated minutes
AHEAD = 2
TICKS = 6         # online moments per device and day besides the one that records
COLLECTOR_ENV = {"LDP_ACCEPTANCE_HOURS": str(24 * 30)}


class SimClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class Measured:
    """What the proxy saw, per device-epoch (a device sends one report a day)."""

    device_epochs: int = 0
    same_flush: int = 0          # its token was fetched in the flush that sent it
    first_epochs_at_once: int = 0
    gaps: list[float] = field(default_factory=list)   # batch - latest token request, later epochs
    short_stock: list[str] = field(default_factory=list)


def _stocked(state: Path) -> set[int]:
    conn = sqlite3.connect(state / "spool.sqlite3")
    try:
        return {e for (e,) in conn.execute(
            "SELECT epoch FROM stock WHERE period = 'day' AND token IS NOT NULL")}
    finally:
        conn.close()


def simulate(proxy: RecordingProxy, clock: SimClock, root: Path, devices: int, epochs: int,
             seed: int = 7) -> Measured:
    """``devices`` installs report daily for ``epochs`` days; the proxy's view, measured."""
    schedule = random.Random(seed)  # the test's schedule only; the SDK draws from the OS
    first_day = int(time.time() // DAY) - epochs - 1
    clock.t = first_day * DAY
    config = DeliveryConfig(interval=0.05, backoff_base=0.05, backoff_max=0.3,
                            request_timeout=10.0, token_ahead=AHEAD, token_delay=DELAY)
    clients = [Client(proxy.url, api_key=INGEST_KEY, state_dir=root / f"d{i}",
                      metrics=specs(), transport=UrllibTransport(use_env_proxies=False),
                      delivery=config, background=False, clock=clock)
               for i in range(devices)]
    measured = Measured()
    recorded_in: dict[tuple[int, int], int] = {}   # (device, epoch) -> action that recorded
    try:
        for day in range(epochs):
            start = (first_day + day) * DAY
            events = [(start + schedule.uniform(0.01, 0.99) * DAY, i, kind)
                      for i in range(devices) for kind in ["record"] + ["tick"] * TICKS]
            for at, i, kind in sorted(events):
                clock.t = at
                proxy.actor, proxy.action = i, proxy.action + 1
                asked = sum(a.path == "/v1/tokens" for a in proxy.arrivals)
                if kind == "record":
                    assert clients[i].record("browser", schedule.choice(BROWSERS)).ok
                    recorded_in[(i, first_day + day)] = proxy.action
                clients[i].flush(3.0 if kind == "record" else 0.5)
                if sum(a.path == "/v1/tokens" for a in proxy.arrivals) > asked:
                    current = first_day + day
                    want = set(range(current + 1, current + 1 + AHEAD))
                    if not want <= _stocked(root / f"d{i}"):
                        measured.short_stock.append(f"device {i} day {day}")
        clock.t += 3 * DELAY   # the last held reports may go now: none is ever lost
        for c in clients:
            assert c.flush(5.0), c.counters()
    finally:
        for c in clients:
            c.close(0)
    _measure(proxy.arrivals, recorded_in, measured)
    return measured


def _measure(arrivals: list[Arrival], recorded_in: dict[tuple[int, int], int],
             measured: Measured) -> None:
    asked: dict[str, list[tuple[Arrival, set[int]]]] = {}
    install_of: dict[int, str] = {}
    first_epoch = {i: min(e for (d, e) in recorded_in if d == i) for i, _ in recorded_in}
    for a in arrivals:
        if a.path == "/v1/tokens":
            units = {u["epoch"] for u in json.loads(a.body)["units"] if u["period"] == "day"}
            asked.setdefault(a.install, []).append((a, units))
            install_of[a.actor] = a.install
        elif a.path == "/v1/reports":
            install = install_of[a.actor]
            before = [(t, u) for t, u in asked[install] if arrivals.index(t) < arrivals.index(a)]
            for epoch in json.loads(gzip.decompress(a.body))["epoch"]:
                measured.device_epochs += 1
                served = [t for t, units in before if epoch in units][-1]
                measured.same_flush += served.action == a.action
                if epoch == first_epoch[a.actor]:
                    measured.first_epochs_at_once += recorded_in[(a.actor, epoch)] == a.action
                else:
                    measured.gaps.append(a.at - before[-1][0].at)


@pytest.fixture(scope="module")
def collector(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()
    with start_collector(redis_server.url, log_dir=tmp_path_factory.mktemp("logs"),
                         extra_env=COLLECTOR_ENV) as svc:
        register(svc.url, specs())
        yield svc


def test_from_the_second_epoch_no_report_follows_its_token_request_within_the_delay(
    collector: ServiceProcess, tmp_path: Path
) -> None:
    devices, epochs = 12, 8
    clock = SimClock(time.time())
    with RecordingProxy(collector.port, clock) as proxy:
        m = simulate(proxy, clock, tmp_path, devices, epochs)
    assert m.device_epochs == devices * epochs              # every report delivered once
    assert m.first_epochs_at_once == devices                # first-run delivery as before
    assert m.same_flush == devices, m.same_flush            # only first epochs (before: ~half)
    assert len(m.gaps) == devices * (epochs - 1)
    assert min(m.gaps) >= DELAY, sorted(m.gaps)[:5]
    assert m.short_stock == []                              # every request stocks k ahead


def _topup(state: Path) -> tuple[float, float]:
    """(due, hold) of the device's one top-up row."""
    conn = sqlite3.connect(state / "spool.sqlite3")
    try:
        ((due, hold),) = conn.execute("SELECT due, hold FROM topup").fetchall()
        return float(due), float(hold)
    finally:
        conn.close()


def test_the_top_up_moment_and_the_hold_survive_a_restart(
    collector: ServiceProcess, tmp_path: Path
) -> None:
    """The top-up moment is drawn once per epoch and kept (a restart does not make it
    "now"); reports recorded right after a top-up wait out the hold, across a restart,
    and then go: held, never dropped."""
    day0 = int(time.time() // DAY) - 3
    clock = SimClock(day0 * DAY + 0.5 * DAY)
    config = DeliveryConfig(interval=0.05, backoff_base=0.05, backoff_max=0.3,
                            token_delay=DELAY)

    def client() -> Client:
        return Client(proxy.url, api_key=INGEST_KEY, state_dir=tmp_path, metrics=specs(),
                      transport=UrllibTransport(use_env_proxies=False), delivery=config,
                      background=False, clock=clock)

    def paths(since: int) -> list[str]:   # the issuer's key is asked once per process
        return [a.path for a in proxy.arrivals[since:] if a.path != "/v1/tokens/key"]

    with RecordingProxy(collector.port, clock) as proxy:
        c = client()
        assert c.record("browser", BROWSERS[0]).ok
        assert c.flush(5)                                     # the first epoch: at once
        assert paths(0) == ["/v1/tokens",                      # 403 install_unregistered:
                            "/v1/installs/challenge", "/v1/installs",  # registered once,
                            "/v1/tokens", "/v1/reports"]               # asked again, sent
        due, _ = _topup(tmp_path)
        assert (day0 + 1) * DAY <= due < (day0 + 2) * DAY     # drawn within the next epoch
        c.close(0)
        c = client()                                          # a restart: the same moment
        assert _topup(tmp_path)[0] == due
        clock.t = due - 1                                     # the next day, before it
        seen = len(proxy.arrivals)
        assert c.record("browser", BROWSERS[1]).ok
        assert c.flush(5) and paths(seen) == ["/v1/reports"]  # from stock, no request
        clock.t = due + 1
        seen = len(proxy.arrivals)
        assert c.flush(5) and paths(seen) == ["/v1/tokens"]   # the top-up, nothing sent
        asked = proxy.arrivals[-1]
        assert {u["epoch"] for u in json.loads(asked.body)["units"]} == {day0 + 3}
        assert _stocked(tmp_path) >= {day0 + 2, day0 + 3}
        _, hold = _topup(tmp_path)
        assert asked.at + DELAY <= hold < asked.at + 2 * DELAY
        clock.t = due + 2
        assert c.record("dark_mode", True).ok                 # right after the top-up
        assert not c.flush(0.3)                               # held
        c.close(0)
        c = client()
        clock.t = hold - 1
        assert not c.flush(0.3)                               # still held after a restart
        clock.t = hold + 1
        seen = len(proxy.arrivals)
        assert c.flush(5) and paths(seen) == ["/v1/reports"]
        assert proxy.arrivals[-1].at - asked.at >= DELAY
        assert c.counters().sent == 1 and not c.counters().dropped
        c.close(0)


def test_the_background_sender_tops_up_at_the_drawn_moment_without_a_send(
    collector: ServiceProcess, tmp_path: Path
) -> None:
    """With a sender thread, the top-up happens when its moment comes, with no report
    waiting and no flush: nothing but the clock sets it off."""
    day0 = int(time.time() // DAY) - 3
    clock = SimClock(day0 * DAY + 0.5 * DAY)
    with RecordingProxy(collector.port, clock) as proxy:
        c = Client(proxy.url, api_key=INGEST_KEY, state_dir=tmp_path, metrics=specs(),
                   transport=UrllibTransport(use_env_proxies=False), clock=clock,
                   delivery=DeliveryConfig(interval=0.05, token_delay=DELAY))
        try:
            assert c.record("browser", BROWSERS[0]).ok
            assert c.flush(5)
            asked = sum(a.path == "/v1/tokens" for a in proxy.arrivals)
            due, _ = _topup(tmp_path)
            clock.t = due + 1
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and sum(
                    a.path == "/v1/tokens" for a in proxy.arrivals) == asked:
                time.sleep(0.05)
            top_up = proxy.arrivals[-1]
            assert top_up.path == "/v1/tokens" and top_up.at == due + 1
            assert {u["epoch"] for u in json.loads(top_up.body)["units"]} == {day0 + 3}
            assert [a.path for a in proxy.arrivals].count("/v1/reports") == 1
        finally:
            c.close(0)


@pytest.mark.parametrize(("field", "value"), [("token_ahead", 1), ("token_ahead", True),
                                               ("token_delay", -1.0)])
def test_token_settings_are_checked_naming_the_bad_value(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"{field} .*got {value!r}"):
        DeliveryConfig(**{field: value})  # type: ignore[arg-type]


def main(devices: int, epochs: int) -> None:
    """Print the share of device-epochs fetched in the flush that sent them."""
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer.start(Path(tmp) / "redis")
        try:
            with start_collector(server.url, log_dir=Path(tmp),
                                 extra_env=COLLECTOR_ENV) as svc:
                register(svc.url, specs())
                clock = SimClock(time.time())
                with RecordingProxy(svc.port, clock) as proxy:
                    m = simulate(proxy, clock, Path(tmp), devices, epochs)
        finally:
            server.stop()
    print(f"device-epochs {m.device_epochs}; token fetched in the flush that sent it:"
          f" {m.same_flush}/{m.device_epochs}; first epochs sent at once"
          f" {m.first_epochs_at_once}/{devices}; later epochs: smallest gap after the"
          f" install's token request {min(m.gaps):.0f} s, under {DELAY:.0f} s:"
          f" {sum(g < DELAY for g in m.gaps)}/{len(m.gaps)}; requests short of k ahead"
          f" {len(m.short_stock)}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
