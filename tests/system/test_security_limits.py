"""Body limits over real HTTP: 413s without the collector's memory growing past a bound.

test_collector_api.py proves the status codes in-process.  Here the collector
is a uvicorn subprocess and the test reads its VmRSS and VmHWM (peak RSS) from
/proc/<pid>/status before and after a barrage of hostile bodies sent over raw
sockets: declared-huge bodies, endless chunked bodies, gzip bombs (512 MiB of
zeros in ~0.5 MB) to both POST endpoints, and JSON that inflates into a
million objects.  Every one must be refused (413, or 400 for a body within the
limits that is not a batch), the peak RSS may grow by at most PEAK_BOUND over
the warmed-up peak (the limits are 1 MiB raw and 4 MiB inflated for batches,
16 MiB for specs; parsing that is what costs), the RSS after by at most
LEAK_BOUND from one identical round of the barrage to the next (a leak), and
the service must still answer.  The aggregator's one body-reading route, the
dashboard's sign-in form (POST /login), must refuse bodies over 4 KiB the same
way (it used to read any body whole before checking its size).
"""

from __future__ import annotations

import gzip
import select
import socket
import time
import zlib
from pathlib import Path

import httpx
import orjson

from ldp_core.wire import encode_batch
from ldp_server.redis_server import RedisServer
from tests.support.reports import SPECS, envelope, today
from tests.support.servers import (
    ADMIN_KEY,
    ANALYST_KEY,
    INGEST_KEY,
    ServiceProcess,
    auth,
    start_uvicorn,
)

MIB = 1 << 20
PEAK_BOUND = 64 * MIB
LEAK_BOUND = 16 * MIB


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process in bytes, from /proc/<pid>/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0]) * 1024
    return out


def gzip_bomb(inflated: int) -> bytes:
    """``inflated`` bytes of zeros, gzip-compressed without ever holding them."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MIB)
    parts = [z.compress(zeros) for _ in range(inflated // MIB)]
    parts.append(z.flush())
    return b"".join(parts)


def raw_request(port: int, head: str, body_chunks: list[bytes], key: str) -> int:
    """Send a request over a raw socket, feeding the body only while the server has not
    answered (or closed); return the status code of its answer."""
    body = memoryview(b"".join(body_chunks))
    sent = 0
    answer = b""
    deadline = time.monotonic() + 30
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall((head + f"Authorization: Bearer {key}\r\nHost: x\r\nOrigin: http://x\r\n\r\n")
                     .encode())
        while b"\r\n" not in answer and time.monotonic() < deadline:
            want_write = [sock] if sent < len(body) else []
            readable, writable, _ = select.select([sock], want_write, [], 1.0)
            if readable:
                try:
                    more = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not more:
                    break
                answer += more
            elif writable:
                try:
                    sent += sock.send(body[sent:sent + 65536])
                except (BrokenPipeError, ConnectionResetError):
                    sent = len(body)
    assert answer.startswith(b"HTTP/1.1 "), answer[:100]
    return int(answer.split(b" ", 2)[1])


def _barrage(client: httpx.Client, port: int, bomb: bytes, rounds: int) -> list[int]:
    """Hostile bodies to both POST endpoints; their statuses."""
    statuses = []
    for _ in range(rounds):
        for path, key in (("/v1/reports", INGEST_KEY), ("/v1/metrics", ADMIN_KEY)):
            # Declared far too large: refused from the headers.
            statuses.append(raw_request(
                port, f"POST {path} HTTP/1.1\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {1 << 30}\r\n", [b"{" * 65536] * 4, key))
            # Chunked with no length, 64 MiB on offer: refused once past the limit.
            chunk = b"%x\r\n" % (256 * 1024) + b"[" * (256 * 1024) + b"\r\n"
            statuses.append(raw_request(
                port, f"POST {path} HTTP/1.1\r\nContent-Type: application/json\r\n"
                      "Transfer-Encoding: chunked\r\n", [chunk] * 256, key))
            # The gzip bomb.
            r = client.post(path, content=bomb, headers={
                **auth(key), "Content-Encoding": "gzip", "Content-Type": "application/json"})
            statuses.append(r.status_code)
    # Within the limits but half a million JSON values: parsed, then refused as not a batch.
    flood = b'{"metric": [' + b",".join([b"0"] * 500_000) + b"]}"
    assert len(flood) < MIB
    r = client.post("/v1/reports", content=flood, headers=auth(INGEST_KEY))
    assert r.status_code == 400 and r.json()["code"] == "batch_shape"
    return statuses


def test_hostile_bodies_are_413_and_memory_stays_bounded(
    collector_service: ServiceProcess,
) -> None:
    url, port, pid = collector_service.url, collector_service.port, collector_service.pid
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.post("/v1/metrics", json=SPECS["browser"],
                           headers=auth(ADMIN_KEY)).status_code == 201
        # Warm up with the largest legitimate batch, gzip and plain, a few times.
        for i in range(3):
            envs = [envelope("browser", 1, today(), j % 4) for j in range(1000)]
            body = orjson.dumps(encode_batch(envs))
            r = client.post("/v1/reports", content=gzip.compress(body) if i % 2 else body,
                            headers={**auth(INGEST_KEY), "Content-Encoding":
                                     "gzip" if i % 2 else "identity"})
            assert r.json()["accepted"] == 1000
        before = memory(pid)
        bomb = gzip_bomb(512 * MIB)
        assert len(bomb) < MIB  # under the raw limit: only inflation can refuse it
        statuses: list[int] = []
        rss_after_round = []
        for _ in range(2):  # two identical rounds: a leak shows as growth from one to the next
            statuses += _barrage(client, port, bomb, rounds=5)
            rss_after_round.append(memory(pid)["VmRSS"])
        after = memory(pid)
        assert client.get("/healthz").status_code == 200
        envs = [envelope("browser", 1, today(), 2) for _ in range(10)]
        assert client.post("/v1/reports", json=encode_batch(envs),
                           headers=auth(INGEST_KEY)).json()["accepted"] == 10
    peak_growth = after["VmHWM"] - before["VmHWM"]
    leak = rss_after_round[1] - rss_after_round[0]
    print(f"\nbody limits: {len(statuses)} hostile bodies, statuses {sorted(set(statuses))}, "
          f"RSS {before['VmRSS'] / MIB:.1f} -> {rss_after_round[0] / MIB:.1f} -> "
          f"{rss_after_round[1] / MIB:.1f} MiB, "
          f"peak {before['VmHWM'] / MIB:.1f} -> {after['VmHWM'] / MIB:.1f} MiB")
    assert statuses == [413] * len(statuses)
    assert peak_growth < PEAK_BOUND, peak_growth / MIB
    assert leak < LEAK_BOUND, leak / MIB


def test_aggregator_login_body_is_bounded(redis_server: RedisServer, tmp_path: Path) -> None:
    """POST /login (the dashboard's sign-in form) reads at most 4 KiB of body."""
    service = start_uvicorn(
        "aggregator.app:create_app",
        {"LDP_ENV": "dev", "LDP_REDIS_URL": redis_server.url, "LDP_ANALYST_KEYS": ANALYST_KEY},
        log_dir=tmp_path / "aggregator")
    try:
        with httpx.Client(base_url=service.url, timeout=30) as client:
            r = client.post("/login", content=f"key={ANALYST_KEY}".encode(),
                             headers={"Content-Type": "application/x-www-form-urlencoded",
                                      "Origin": service.url})
            assert r.status_code == 303
            before = memory(service.pid)
            statuses = []
            for _ in range(5):
                statuses.append(raw_request(
                    service.port, "POST /login HTTP/1.1\r\nContent-Type: "
                    f"application/x-www-form-urlencoded\r\nContent-Length: {1 << 30}\r\n",
                    [b"key=" + b"a" * 65536] * 64, ANALYST_KEY))
                chunk = b"%x\r\n" % (256 * 1024) + b"a" * (256 * 1024) + b"\r\n"
                statuses.append(raw_request(
                    service.port, "POST /login HTTP/1.1\r\nContent-Type: "
                    "application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n",
                    [chunk] * 256, ANALYST_KEY))
            after = memory(service.pid)
            assert client.get("/healthz").status_code == 200
    finally:
        service.stop()
    print(f"\naggregator /login: statuses {sorted(set(statuses))}, "
          f"peak {before['VmHWM'] / MIB:.1f} -> {after['VmHWM'] / MIB:.1f} MiB")
    assert statuses == [413] * len(statuses)
    assert after["VmHWM"] - before["VmHWM"] < 16 * MIB
