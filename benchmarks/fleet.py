"""A simulated fleet for the capacity check: devices x metrics, one batch per device-epoch.

Each simulated device sends its reports of one epoch, one per metric, in one
gzip batch (``Content-Encoding: gzip``, level 6, as the SDK sends them), each
report randomised with ``ldp_core`` (seeded: this is test traffic) and carrying
a valid token, one per device and epoch (shared by its reports of every
metric, as the SDK attaches it).  Tokens are minted before the clock starts, in bulk, in a
process pool, with the issuer's key object (``collector.token_crypto.TokenKey``)
and the token layout of ``ldp_core.tokens``: the private key signs the token
input directly (OpenSSL RSASSA-PSS, 0.8 ms at 2048 bits) instead of running
the blind protocol (5.6 ms of Python per signature): the collector cannot tell
the two apart (``tests/support/tokens.py`` does the same).

The generator runs in its own process and streams: a batch is built just
before it is sent (10^7 reports never sit in memory), over ``--connections``
keep-alive loopback connections, and it prints one JSON line: requests,
reports, accepted, duplicates, rejected, errors, bytes_sent, bytes_received,
seconds, cpu_seconds (its own).

    python benchmarks/fleet.py --url http://127.0.0.1:8000 --key K --prefix sim.m \\
        --metrics 100 --epoch 20423 --devices 1000 --tokens /tmp/tokens.txt
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import re
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ldp_core import mechanism
from ldp_core.tokens import b64url, token_input, unit_digest

__all__ = ["Unit", "device_batches", "metric_names", "mint_tokens", "run"]

Unit = tuple[str, int]  # (period, epoch): a token covers a device's reports of an epoch
DOMAIN = 64  # GRR over 64 values: one counter per report
_COUNTS = re.compile(rb'"(accepted|duplicates|rejected)":\s*(\d+)')
_KEY: Any = None


def metric_names(prefix: str, metrics: int) -> list[str]:
    """``prefix`` + 3-digit index: sim.m000, sim.m001, ..."""
    return [f"{prefix}{i:03d}" for i in range(metrics)]


def _load_key(pem: bytes) -> None:
    global _KEY
    from collector.token_crypto import TokenKey

    _KEY = TokenKey.from_pem(pem, min_bits=1024)


def _mint_chunk(units: Sequence[Unit]) -> list[str]:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    pss = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)
    key_id = _KEY.public.key_id
    digests: dict[Unit, bytes] = {}
    out = []
    for unit in units:
        if unit not in digests:
            digests[unit] = unit_digest(*unit)
        nonce = os.urandom(32)
        sig = _KEY.private.sign(token_input(nonce, digests[unit], key_id), pss, hashes.SHA384())
        out.append(b64url(nonce + sig))
    return out


def mint_tokens(pem: bytes, units: Sequence[Unit], processes: int = 2,
                chunk: int = 2000) -> list[str]:
    """One fresh token per unit, in order, signed by ``processes`` worker processes."""
    chunks = [units[i:i + chunk] for i in range(0, len(units), chunk)]
    with ProcessPoolExecutor(processes, initializer=_load_key, initargs=(pem,)) as pool:
        return [t for part in pool.map(_mint_chunk, chunks) for t in part]


def device_batches(host: str, key: str, names: Sequence[str], version: int, epoch: int,
                   devices: int, tokens: Sequence[str], seed: int,
                   batch: int = 0) -> Iterator[tuple[bytes, int]]:
    """(framed request, reports): every device's one report per metric, gzip JSON.

    ``batch`` = 0: one request per device holding its reports of every metric (an
    SDK's flush).  ``batch`` > 0: requests of ``batch`` devices' reports of one
    metric (a relay that regroups reports by metric), metric after metric.
    ``tokens[d]`` is device d's token, on all its reports of the epoch.
    """
    m = mechanism("grr", epsilon=1.0, domain_size=DOMAIN)
    rng = random.Random(seed)
    k = len(names)

    if batch:
        rows = (((d, j) for d in range(lo, min(devices, lo + batch)))
                for j in range(k) for lo in range(0, devices, batch))
    else:
        rows = (((d, j) for j in range(k)) for d in range(devices))
    for group in rows:
        pairs = list(group)
        n = len(pairs)
        ids = os.urandom(16 * n).hex()
        body = orjson.dumps({
            "metric": [names[j] for _, j in pairs], "version": [version] * n,
            "epoch": [epoch] * n,
            "report_id": [ids[32 * i:32 * i + 32] for i in range(n)],
            "token": [tokens[d] for d, _ in pairs],
            "payload": [m.encode(m.randomize(rng.randrange(DOMAIN), rng=rng)) for _ in pairs],
        })
        body = gzip.compress(body, compresslevel=6, mtime=0)
        head = (f"POST /v1/reports HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                f"Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")
        yield head.encode() + body, n


async def _connection(host: str, port: int, batches: Iterator[tuple[bytes, int]],
                      stats: dict[str, int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for request, size in batches:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            stats["requests"] += 1
            stats["reports"] += size
            stats["bytes_sent"] += len(request)
            stats["bytes_received"] += len(head) + len(body)
            if not head.startswith(b"HTTP/1.1 200"):
                stats["errors"] += 1
                if stats["errors"] <= 3:
                    print(head[:200], body[:300], file=sys.stderr)
                continue
            for name, value in _COUNTS.findall(body[:200]):
                stats[name.decode()] += int(value)
    finally:
        writer.close()


async def run(url: str, batches: Iterator[tuple[bytes, int]], connections: int) -> dict[str, Any]:
    """Send every batch over ``connections`` keep-alive connections; counts and timings."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("the fleet talks to loopback only")
    stats = dict.fromkeys(("requests", "reports", "accepted", "duplicates", "rejected",
                           "errors", "bytes_sent", "bytes_received"), 0)
    cpu, start = time.process_time(), time.perf_counter()
    await asyncio.gather(*(_connection(host, port, batches, stats) for _ in range(connections)))
    out: dict[str, Any] = dict(stats)
    out["seconds"] = time.perf_counter() - start
    out["cpu_seconds"] = time.process_time() - cpu
    return out


def main(argv: list[str] | None = None) -> None:
    """Command line: stream the fleet's batches, print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--prefix", default="sim.m")
    ap.add_argument("--metrics", type=int, required=True)
    ap.add_argument("--version", type=int, default=1)
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--devices", type=int, required=True)
    ap.add_argument("--tokens", required=True, help="file: one token per device, per line")
    ap.add_argument("--batch", type=int, default=0,
                    help="0: one request per device; N: N devices' reports of one metric")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    tokens = Path(args.tokens).read_text().split()
    names = metric_names(args.prefix, args.metrics)
    host = urlsplit(args.url).netloc
    batches = device_batches(host, args.key, names, args.version, args.epoch, args.devices,
                             tokens, args.seed, args.batch)
    print(json.dumps(asyncio.run(run(args.url, batches, args.connections))))


if __name__ == "__main__":
    main()
