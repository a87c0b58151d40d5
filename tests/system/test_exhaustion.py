"""No resource exhaustion from outside: the attacks of issue 34 item 5, scripted on loopback.

Each test runs a real stack (redis-server, the collector through
``ldp_server.serve_asgi``; ``ldp up``'s ``Stack`` for the connection flood) and
plays what a client holding only the app bundle can do:

- thousands of half-sent requests: the collector keeps answering /healthz
  over fresh connections and ``ldp up``'s supervisor does not restart it;
- X-Forwarded-For from loopback: the limiter still counts the real address;
- one token request for 256 units, and a rate limit counted per signature;
- Sybil installs: a network registers only so many an hour, and near Redis's
  maxmemory /readyz turns 503 and new installs are refused before writes fail.
"""

from __future__ import annotations

import base64
import resource
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from ldp_cli.keys import load_or_create_keys
from ldp_cli.stack import Stack
from ldp_server.redis_server import RedisServer
from tests.support import tokens as issuer
from tests.support.installs import register
from tests.support.servers import INGEST_KEY, auth, flushed_collector, start_collector

HOUR = 3600

#: Half-open connections of the flood: more than the default cap (2048) and than
#: the 1024 file limit the stack is started with.
FLOOD = 3000
#: /healthz requests timed during the flood, each over a fresh connection.
PROBES = 200


def _raise_own_file_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"the test needs {need} file descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def _healthz_seconds(port: int, timeout: float = 2.0) -> float:
    """One GET /healthz over a new connection: its seconds, or inf if it failed."""
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            head = b""
            while b"\r\n" not in head and time.monotonic() - start < timeout:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return float("inf")
    return time.monotonic() - start if head.startswith(b"HTTP/1.1 200") else float("inf")


def _closed_by_peer(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


@pytest.fixture()
def stack_with_1024_files(tmp_path: Path) -> Iterator[Stack]:
    """``ldp up``'s stack whose processes start with a soft file limit of 1024 (a
    common default), the test process's own limit raised for the flood."""
    _raise_own_file_limit(FLOOD + 512)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    keys, _ = load_or_create_keys(tmp_path / "data")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        stack = Stack.start(tmp_path / "data", keys)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        yield stack
    finally:
        stack.stop()


def test_half_open_flood_neither_starves_nor_restarts_the_collector(
    stack_with_1024_files: Stack,
) -> None:
    stack = stack_with_1024_files
    collector = next(s for s in stack.services if s.name == "collector")
    pid, port = collector.pid, collector.port
    flood: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while len(flood) < FLOOD and time.monotonic() < deadline:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1.0)
            except OSError:  # the backlog is full: today's collector stopped accepting
                continue
            s.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: t\r\nContent-Le")  # never ends
            flood.append(s)
        flooded_at = time.monotonic()
        # PROBES fresh-connection /healthz requests while the flood holds its
        # connections (the header deadline, 10 s, has not passed), with three
        # of the supervisor's probes (it restarts after three misses) among them.
        seconds: list[float] = []
        restarts: list[tuple[str, str]] = []
        for i in range(PROBES):
            seconds.append(_healthz_seconds(port))
            if i % (PROBES // 3) == 0:
                restarts += stack.supervise(probe=True)
        assert time.monotonic() - flooded_at < 10, "the probes outlasted the header deadline"
        seconds.sort()
        p99 = seconds[int(0.99 * PROBES) - 1]  # the 198th of 200
        assert p99 < 0.1, f"/healthz p99 {p99 * 1000:.0f} ms under {len(flood)} half-open"
        assert restarts == []
        now = next(s for s in stack.services if s.name == "collector")
        assert collector.alive() and now.pid == pid
        # The header deadline (10 s) closes every half-sent request.
        wait_until = flooded_at + 10 + 5
        while time.monotonic() < wait_until and \
                not all(_closed_by_peer(s) for s in flood[-50:]):
            time.sleep(0.25)
        open_left = sum(not _closed_by_peer(s) for s in flood)
        assert open_left == 0, f"{open_left} of {len(flood)} half-sent requests still open"
    finally:
        for s in flood:
            s.close()


def _limited(service_url: str, n: int, *, forwarded: bool) -> list[int]:
    statuses = []
    with httpx.Client(base_url=service_url, timeout=10) as client:
        for i in range(n):
            headers = {**auth(INGEST_KEY)}
            if forwarded:
                headers["X-Forwarded-For"] = f"198.51.100.{i + 1}"
            statuses.append(client.get("/v1/tokens/key", headers=headers).status_code)
    return statuses


def test_x_forwarded_for_is_believed_only_from_a_configured_proxy(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    slow = {"LDP_RATE_LIMIT_PER_SECOND": "0.001", "LDP_RATE_LIMIT_BURST": "3"}
    with flushed_collector(redis_server, log_dir=tmp_path, extra_env=slow) as svc:
        # A loopback client naming a new address each time still has one bucket.
        assert _limited(svc.url, 5, forwarded=True) == [200, 200, 200, 429, 429]
    proxied = {**slow, "LDP_TRUSTED_PROXIES": "127.0.0.1/32"}
    with flushed_collector(redis_server, log_dir=tmp_path, extra_env=proxied) as svc:
        # Behind a configured proxy, each forwarded client has its own bucket.
        assert _limited(svc.url, 5, forwarded=True) == [200] * 5
        assert _limited(svc.url, 4, forwarded=False) == [200, 200, 200, 429]


def _install_key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def _registered(url: str) -> str:
    """A fresh install key, registered from the host (loopback: not limited in dev)."""
    key = _install_key()
    register(url, auth(INGEST_KEY), key)
    return key


def _blinded() -> str:
    public = issuer.test_key().public
    value = secrets.randbelow(public.n)
    return base64.urlsafe_b64encode(value.to_bytes(public.modulus_bytes, "big")) \
        .rstrip(b"=").decode()


def _ask(url: str, install: str, units: list[dict[str, Any]], forwarded: str | None = None
         ) -> httpx.Response:
    headers = {**auth(INGEST_KEY), "LDP-Install-Key": install}
    if forwarded:
        headers["X-Forwarded-For"] = forwarded
    return httpx.post(f"{url}/v1/tokens", json={"units": units}, timeout=30, headers=headers)


def _codes(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [r.get("code", r["status"]) for r in answer.json()["results"]]


def test_one_token_request_gets_at_most_the_ahead_window_signed(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    hour = int(time.time() // HOUR)
    same = {"period": "hour", "epoch": hour, "blinded": _blinded()}
    with flushed_collector(redis_server, log_dir=tmp_path) as svc:
        codes = _codes(_ask(svc.url, _registered(svc.url), [same] * 256))
    # 48 hours ahead: 49 hour epochs and 3 day epochs (the current ones included).
    assert codes == ["issued"] * 52 + ["unit_limit"] * 204


def test_each_signature_takes_a_token_of_the_clients_rate_limit(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    hour = int(time.time() // HOUR)
    units = [{"period": "hour", "epoch": hour + i, "blinded": _blinded()} for i in range(30)]
    slow = {"LDP_RATE_LIMIT_PER_SECOND": "0.001", "LDP_RATE_LIMIT_BURST": "20"}
    with flushed_collector(redis_server, log_dir=tmp_path, extra_env=slow) as svc:
        install = _registered(svc.url)  # two requests: the challenge and the proof
        codes = _codes(_ask(svc.url, install, units))
        # 18 tokens: the request took one (its first signature), 17 signatures more.
        assert codes == ["issued"] * 18 + ["rate_limited"] * 12
        assert _ask(svc.url, install, units[:1]).status_code == 429


def test_a_network_registers_only_so_many_installs_an_hour(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Clients behind a proxy (LDP_TRUSTED_PROXIES) in 203.0.113.0/24: five new
    installs an hour, whatever address of the /24 each sends from."""
    unit = {"period": "day", "epoch": int(time.time() // 86400), "blinded": _blinded()}
    env = {"LDP_INSTALLS_PER_PREFIX_PER_HOUR": "5", "LDP_TRUSTED_PROXIES": "127.0.0.1"}
    with flushed_collector(redis_server, log_dir=tmp_path, extra_env=env) as svc:
        first = _registered(svc.url)
        statuses = [_ask(svc.url, k, [unit], f"203.0.113.{i + 1}").status_code
                    for i, k in enumerate([first, *(_registered(svc.url) for _ in range(7))])]
        assert statuses == [200] * 5 + [429] * 3
        refused = _ask(svc.url, _registered(svc.url), [unit], "203.0.113.200")
        assert refused.json()["code"] == "rate_limited" and "Retry-After" in refused.headers
        # Another network, a known install, and the host itself are served.
        assert _ask(svc.url, _registered(svc.url), [unit], "198.51.100.1").status_code == 200
        again = {"period": "hour", "epoch": int(time.time() // HOUR), "blinded": _blinded()}
        assert _codes(_ask(svc.url, first, [again], "203.0.113.9")) == ["issued"]
        assert _ask(svc.url, _registered(svc.url), [unit]).status_code == 200


def test_readiness_fails_and_new_installs_stop_before_redis_refuses_writes(
    tmp_path: Path,
) -> None:
    server = RedisServer.start(tmp_path / "redis", guarded=True, maxmemory="16mb")
    try:
        with start_collector(server.url, log_dir=tmp_path) as svc:
            day = int(time.time() // 86400)
            known = _registered(svc.url)
            assert _codes(_ask(svc.url, known, [
                {"period": "day", "epoch": day, "blinded": _blinded()}])) == ["issued"]
            assert httpx.get(f"{svc.url}/readyz").status_code == 200
            # Fill Redis to 93-99 % of maxmemory (what Sybil installs do, faster).
            with redis.Redis.from_url(server.url) as client:
                for i in range(4000):
                    info = client.info("memory")
                    if info["used_memory"] > 0.93 * info["maxmemory"]:
                        break
                    client.set(f"filler:{i}", b"x" * 4096)
                info = client.info("memory")
                assert 0.93 < info["used_memory"] / info["maxmemory"] < 1
                client.set("filler:still-writable", b"x")  # Redis takes writes yet
            deadline = time.monotonic() + 5  # the collector reads INFO once a second
            ready = httpx.get(f"{svc.url}/readyz")
            while ready.status_code == 200 and time.monotonic() < deadline:
                time.sleep(0.2)
                ready = httpx.get(f"{svc.url}/readyz")
            assert ready.status_code == 503, ready.text
            assert ready.json()["code"] == "store_memory_low"
            assert int(ready.headers["Retry-After"]) > 0
            assert httpx.get(f"{svc.url}/healthz").status_code == 200
            fresh = _ask(svc.url, _registered(svc.url),
                         [{"period": "day", "epoch": day, "blinded": _blinded()}])
            assert fresh.status_code == 503 and fresh.json()["code"] == "store_memory_low"
            # A known install still gets its next units.
            assert _codes(_ask(svc.url, known, [
                {"period": "day", "epoch": day + 1, "blinded": _blinded()}])) == ["issued"]
    finally:
        server.stop()
