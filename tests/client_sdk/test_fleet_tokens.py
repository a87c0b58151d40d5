"""A Fleet asks for its devices' tokens concurrently, bounded, each device its own.

Real collector (uvicorn on a free loopback port), real Redis, the SDK's own
``UrllibTransport``; the transport is wrapped only to watch (and, in one test,
to lose one request as a network failure would): every answer is the real
collector's.  The concurrency is shown without timing: the first ``bound``
token requests wait at a barrier until ``bound`` of them are in flight (a fleet
that asks one at a time never gets there and the barrier breaks after 30 s).
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import redis

import client_sdk._tokens
from client_sdk import ConfigError, Fleet, Response, UrllibTransport
from ldp_core.tokens import unb64url
from ldp_server.redis_server import RedisServer
from tests.client_sdk.test_e2e import register
from tests.support.sdk_children import FixedClock
from tests.support.sdk_fixtures import BROWSERS, specs
from tests.support.servers import INGEST_KEY, ServiceProcess, start_collector
from tests.support.tokens import test_key as issuer_key

PIN = issuer_key().public.key_id.hex()
DEVICES = 120


class Watch:
    """The real transport, watched: token requests in flight, what each one asked."""

    def __init__(self, bound: int, *, lose: int | None = None) -> None:
        self.inner = UrllibTransport(use_env_proxies=False)
        self.lock = threading.Lock()
        self.in_flight = self.most = 0
        self.gate = threading.Barrier(bound)
        self.bound = bound
        self.waited = 0
        self.broken = False
        self.lose = lose  # the n-th token request (1-based) fails as a lost connection
        self.asked: list[tuple[str, list[str]]] = []   # (install key, blinded messages)
        self.paths: Counter[str] = Counter()
        self.order: list[str] = []  # the paths in the order they were asked
        self.report_tokens: list[tuple[str, str]] = []  # (metric, token) of every report

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout: float) -> Response:
        path = url.split("/v1/", 1)[1]
        with self.lock:
            self.paths[path] += 1
            self.order.append(path)
        if path == "reports" and body is not None:
            columns = json.loads(gzip.decompress(body))
            with self.lock:
                self.report_tokens += list(zip(columns["metric"], columns["token"], strict=True))
        if path != "tokens":
            return self.inner.send(method, url, headers, body, timeout)
        assert body is not None
        blinded = [u["blinded"] for u in json.loads(body)["units"]]
        with self.lock:
            self.asked.append((headers["LDP-Install-Key"], blinded))
            number = len(self.asked)
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            wait = self.waited < self.bound
            self.waited += wait
        try:
            if wait:
                try:
                    self.gate.wait(timeout=30)
                except threading.BrokenBarrierError:
                    self.broken = True
            if number == self.lose:
                raise ConnectionResetError("lost on purpose")
            return self.inner.send(method, url, headers, body, timeout)
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.fixture(scope="module")
def collector(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()
    with start_collector(redis_server.url, log_dir=tmp_path_factory.mktemp("logs")) as svc:
        register(svc.url, specs())
        yield svc


def _fleet(url: str, watch: Watch, **kw: Any) -> Fleet:
    """The counts below are of one epoch's tokens: the devices' clock is stopped at the
    test's start, so that a midnight UTC during the test cannot give a device two."""
    return Fleet(url, api_key=INGEST_KEY, transport=watch, metrics=specs(), background=False,
                 clock=FixedClock(time.time()), **kw)


def _record_all(fleet: Fleet, devices: int) -> None:
    for i in range(devices):
        device = fleet.device()
        assert device.record("browser", BROWSERS[i % 3]).ok
        assert device.record("dark_mode", i % 2 == 0).ok


def _subjects(redis_url: str) -> int:
    with redis.Redis.from_url(redis_url) as r:
        return sum(1 for _ in r.scan_iter(match="ldp:{i:*}", count=1000))  # not "}:r"


def _registered(redis_url: str) -> int:
    with redis.Redis.from_url(redis_url) as r:
        return sum(1 for _ in r.scan_iter(match="ldp:{i:*}:r", count=1000))


def test_tokens_fetched_concurrently_bounded_one_per_device(
    collector: ServiceProcess, redis_server: RedisServer
) -> None:
    bound = 4
    watch = Watch(bound)
    subjects_before = _subjects(redis_server.url)
    registered_before = _registered(redis_server.url)
    fleet = _fleet(collector.url, watch, token_concurrency=bound, issuer_keys=[PIN])
    try:
        _record_all(fleet, DEVICES)
        assert fleet.flush(60)
        counters = fleet.counters()
    finally:
        fleet.close(1)
    # Concurrent (the barrier of `bound` requests was reached) and bounded.
    assert not watch.broken
    assert watch.most == bound
    # One token request per device, each with its own install key and blinded message;
    # the first `bound` (in flight at once) were asked to register first (403
    # install_unregistered) and asked again with the same message; every later device
    # registered before asking (client_sdk._register, Fleet).
    assert len(watch.asked) == DEVICES + bound
    # The first `bound` registered through POST /v1/installs; every later device sent its
    # proof with its token request (LDP-Install-Proof), solved against a challenge the
    # fleet shares: no request more than before registration was required.
    assert watch.paths["installs"] == bound and watch.paths["installs/challenge"] <= bound
    assert _registered(redis_server.url) - registered_before == DEVICES
    assert len({install for install, _ in watch.asked}) == DEVICES
    asked = {(install, b) for install, msgs in watch.asked for b in msgs}
    assert len(asked) == DEVICES == len({b for _, b in asked})
    # The issuer knows DEVICES new subjects (one per install), no more.
    assert _subjects(redis_server.url) - subjects_before == DEVICES
    # Every report delivered and counted once; each device's two reports carry its
    # own token (one token on one report of each metric), no token shared.
    assert (counters.sent, counters.duplicates, counters.dropped, counters.pending) == (
        2 * DEVICES, 0, {}, 0)
    per_token = Counter(token for _, token in watch.report_tokens)
    assert len(per_token) == DEVICES and set(per_token.values()) == {2}
    for metric in ("browser", "dark_mode"):
        tokens = [t for m, t in watch.report_tokens if m == metric]
        assert len(tokens) == len(set(tokens)) == DEVICES
    nonces = {unb64url(t)[:32] for t in per_token}
    assert len(nonces) == DEVICES


def test_one_request_lost_asks_again_same_blinded_nothing_lost(
    collector: ServiceProcess,
) -> None:
    watch = Watch(3, lose=5)
    fleet = _fleet(collector.url, watch, token_concurrency=3, issuer_keys=[PIN])
    try:
        _record_all(fleet, 40)
        assert fleet.flush(60)
        counters = fleet.counters()
    finally:
        fleet.close(1)
    assert not watch.broken and watch.most <= 3
    assert (counters.sent, counters.duplicates, counters.dropped) == (80, 0, {})
    assert counters.retries >= 1
    # The device whose request was lost asked again with the same blinded message
    # (stored before sending), and no device asked with two different ones.
    lost_install, lost_blinded = watch.asked[4]
    again = [b for i, b in watch.asked[5:] if i == lost_install]
    assert again and all(b == lost_blinded for b in again)
    by_install: dict[str, set[str]] = {}
    for install, msgs in watch.asked:
        by_install.setdefault(install, set()).update(msgs)
    assert len(by_install) == 40 and all(len(b) == 1 for b in by_install.values())


def test_reports_go_out_between_token_requests(
    collector: ServiceProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most ``MAX_REQUESTS`` token requests per sending round: the reports that
    hold tokens go out before the last device has its token (and nothing is lost)."""
    monkeypatch.setattr(client_sdk._tokens, "MAX_REQUESTS", 10)
    watch = Watch(2)
    fleet = _fleet(collector.url, watch, token_concurrency=2, issuer_keys=[PIN])
    try:
        _record_all(fleet, 60)
        assert fleet.flush(60)
        counters = fleet.counters()
    finally:
        fleet.close(1)
    assert (counters.sent, counters.duplicates, counters.dropped) == (120, 0, {})
    # + 2: the first two devices (in flight at once) were asked to register, then again.
    assert watch.paths["tokens"] == 60 + 2 and not watch.broken
    first_report = watch.order.index("reports")
    last_token = len(watch.order) - 1 - watch.order[::-1].index("tokens")
    assert first_report < last_token
    assert watch.order[:first_report].count("tokens") == 10 + 2


def test_a_wrong_pin_is_refused_by_the_fleet(collector: ServiceProcess) -> None:
    watch = Watch(1)
    fleet = _fleet(collector.url, watch, issuer_keys=["0" * 64])
    try:
        _record_all(fleet, 5)
        assert not fleet.flush(1.0)
        counters = fleet.counters()
    finally:
        fleet.close(0)
    assert counters.sent == 0 and counters.pending == 10 and counters.dropped == {}
    assert counters.config_errors["issuer_key_unpinned"] >= 1
    assert watch.paths["tokens"] == 0 and watch.paths["reports"] == 0


@pytest.mark.parametrize("bad", [0, 65, -1, 2.5, True, "4"])
def test_token_concurrency_is_checked(bad: object) -> None:
    with pytest.raises(ConfigError, match=f"token_concurrency .* got {bad!r}"):
        Fleet("http://127.0.0.1:9", api_key="k", background=False,
              token_concurrency=bad)  # type: ignore[arg-type]
