"""A fast, bounded HTTP load generator for POST /v1/reports (loopback only).

It runs in its own process so that it is not the server being measured.
Every request is built BEFORE the clock starts: reports randomised with
ldp_core (seeded generator: this is test traffic), each with a fresh device
token and report id, encoded as the columnar batch and framed as raw HTTP/1.1
bytes.  Then ``--connections`` keep-alive connections (asyncio streams, no
HTTP library on the hot path) send them back to back until ``--duration``
seconds pass or the prepared requests run out, whichever is first.

    python benchmarks/loadgen.py --url http://127.0.0.1:8000 --key K \\
        --metric bench.grr --version 1 --epoch 20421 --mechanism grr --domain-size 64 \\
        --batch 100 --connections 4 --duration 3

prints one JSON object: requests, reports, accepted, errors, seconds,
reports_per_s, requests_per_s, p50_ms, p99_ms, exhausted.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ldp_core import mechanism
from ldp_core.tokens import b64url
from ldp_core.wire import BINARY_MEDIA, encode_binary
from tests.support.tokens import mint

__all__ = ["Result", "build_requests", "main", "run"]

_ACCEPTED = re.compile(rb'"accepted":\s*(\d+)')


@dataclass(frozen=True)
class Result:
    """What one load run measured."""

    requests: int
    reports: int
    accepted: int
    errors: int
    seconds: float
    latencies: list[float]
    exhausted: bool

    def as_json(self) -> dict[str, Any]:
        lat = sorted(self.latencies) or [float("nan")]
        return {
            "requests": self.requests,
            "reports": self.reports,
            "accepted": self.accepted,
            "errors": self.errors,
            "seconds": self.seconds,
            "reports_per_s": self.reports / self.seconds if self.seconds else 0.0,
            "requests_per_s": self.requests / self.seconds if self.seconds else 0.0,
            "p50_ms": 1e3 * statistics.median(lat),
            "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "exhausted": self.exhausted,
        }


def zipf_values(d: int, n: int, seed: int, s: float = 1.1) -> np.ndarray:
    """n values in [0, d) with P[v] proportional to (v + 1)^-s."""
    weights = np.arange(1, d + 1, dtype=np.float64) ** -s
    return np.random.default_rng(seed).choice(d, size=n, p=weights / weights.sum())


def build_requests(
    host: str,
    key: str,
    metric: str,
    version: int,
    epoch: int,
    mech_name: str,
    domain_size: int,
    epsilon: float,
    batch: int,
    count: int,
    use_gzip: bool,
    seed: int,
    path: str = "/v1/reports",
    binary: bool = False,
    fake_tokens: bool = False,
    metrics: int = 1,
    per_token: int = 1,
) -> list[tuple[bytes, int]]:
    """``count`` framed requests of ``batch`` distinct-device reports each (bytes, reports);
    ``binary``: the binary batch of ``ldp_core.wire`` instead of JSON; ``fake_tokens``:
    random text of a token's length instead of signed tokens (for the minimal
    endpoint, which checks none: it saves the minting); ``metrics`` > 1: report i goes
    to metric ``<metric>.<i mod metrics>`` (registered alike), as a device's batch
    spreads over its metrics; ``per_token`` (<= ``metrics``): how many consecutive
    reports (across requests when a batch is smaller), one device's, share one token."""
    if per_token > metrics:
        raise ValueError(f"per_token {per_token} must be <= metrics {metrics}")
    m = mechanism(mech_name, epsilon=epsilon, domain_size=domain_size)
    rng = random.Random(seed)
    total = batch * count
    values = zipf_values(domain_size, total, seed)
    payloads = [m.encode(m.randomize(int(v), rng=rng)) for v in values]
    # Valid tokens of the epoch (the benchmark metrics are daily), signed with the test
    # issuer key (0.1 ms each, in setup).  A token is one device's: it covers that
    # device's reports of every metric of the epoch, so ``per_token`` consecutive
    # reports (of as many different metrics) share one.
    names = [metric] if metrics == 1 else [f"{metric}.{k}" for k in range(metrics)]
    metric_of = [names[i % metrics] for i in range(total)]
    devices = -(-total // per_token)
    if fake_tokens:
        size = len(mint("day", epoch))
        distinct = [b64url(os.urandom(size * 3 // 4 + 1))[:size] for _ in range(devices)]
    else:
        distinct = [mint("day", epoch) for _ in range(devices)]
    tokens = [distinct[i // per_token] for i in range(total)]
    ids = os.urandom(16 * total).hex()
    out = []
    for r in range(count):
        lo = r * batch
        columns: dict[str, list[Any]] = {
            "metric": metric_of[lo: lo + batch],
            "version": [version] * batch,
            "epoch": [epoch] * batch,
            "report_id": [ids[32 * i: 32 * i + 32] for i in range(lo, lo + batch)],
            "token": tokens[lo: lo + batch],
            "payload": payloads[lo: lo + batch],
        }
        body = encode_binary(columns) if binary else orjson.dumps(columns)
        extra = ""
        if use_gzip:
            body = gzip.compress(body, compresslevel=6, mtime=0)
            extra = "Content-Encoding: gzip\r\n"
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: {BINARY_MEDIA if binary else 'application/json'}\r\n"
            f"{extra}Content-Length: {len(body)}\r\n\r\n"
        )
        out.append((head.encode() + body, batch))
    return out


async def _worker(
    host: str,
    port: int,
    queue: list[tuple[bytes, int]],
    cursor: list[int],
    deadline: float,
    stats: dict[str, Any],
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.perf_counter() < deadline:
            i = cursor[0]
            if i >= len(queue):
                stats["exhausted"] = True
                return
            cursor[0] = i + 1
            request, size = queue[i]
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            stats["latencies"].append(time.perf_counter() - start)
            stats["requests"] += 1
            stats["reports"] += size
            if not head.startswith(b"HTTP/1.1 200"):
                stats["errors"] += 1
                if stats["errors"] <= 3:
                    print(head[:200], body[:300], file=sys.stderr)
                continue
            match = _ACCEPTED.search(body)
            stats["accepted"] += int(match.group(1)) if match else 0
    finally:
        writer.close()


async def run(
    url: str, requests: list[tuple[bytes, int]], connections: int, duration: float,
    warmup: int = 0,
) -> Result:
    """Send ``requests`` over ``connections`` keep-alive connections for ``duration`` s."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("loadgen talks to loopback only")
    if warmup:
        warm: dict[str, Any] = {"latencies": [], "requests": 0, "reports": 0, "accepted": 0,
                                "errors": 0, "exhausted": False}
        await asyncio.gather(*(
            _worker(host, port, requests[:warmup], [0], time.perf_counter() + 30, warm)
            for _ in range(1)
        ))
        requests = requests[warmup:]
    stats: dict[str, Any] = {"latencies": [], "requests": 0, "reports": 0, "accepted": 0,
                             "errors": 0, "exhausted": False}
    cursor = [0]
    start = time.perf_counter()
    deadline = start + duration
    await asyncio.gather(*(
        _worker(host, port, requests, cursor, deadline, stats) for _ in range(connections)
    ))
    seconds = time.perf_counter() - start
    return Result(stats["requests"], stats["reports"], stats["accepted"], stats["errors"],
                  seconds, stats["latencies"], stats["exhausted"])


def main(argv: list[str] | None = None) -> None:
    """Command line: build the requests, run, print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--metric", required=True)
    ap.add_argument("--version", type=int, default=1)
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--mechanism", default="grr")
    ap.add_argument("--domain-size", type=int, default=64)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--max-reports", type=int, default=600_000)
    ap.add_argument("--max-requests", type=int, default=30_000)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--binary", action="store_true",
                    help="send the binary batch (application/vnd.ldp.batch)")
    ap.add_argument("--metrics", type=int, default=1,
                    help="spread each batch over METRICS metrics <metric>.<k>")
    ap.add_argument("--per-token", type=int, default=1,
                    help="consecutive reports (one device's, of distinct metrics) per token")
    ap.add_argument("--fake-tokens", action="store_true",
                    help="unsigned random tokens (for the minimal endpoint only)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    count = max(2, min(args.max_requests, args.max_reports // args.batch))
    warmup = min(20, count // 10)
    host = urlsplit(args.url).netloc
    requests = build_requests(host, args.key, args.metric, args.version, args.epoch,
                              args.mechanism, args.domain_size, args.epsilon, args.batch,
                              count + warmup, args.gzip, args.seed, binary=args.binary,
                              fake_tokens=args.fake_tokens, metrics=args.metrics,
                              per_token=args.per_token)
    result = asyncio.run(run(args.url, requests, args.connections, args.duration, warmup))
    print(json.dumps(result.as_json()))


if __name__ == "__main__":
    main()
