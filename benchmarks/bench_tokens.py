"""What report tokens cost the collector: RSA verifications per batch, one token per device-epoch.

A token is one per (device, epoch length, epoch) and a device attaches it to
its reports of every metric of that epoch (``collector.tokens``).  The
collector verifies each distinct token of a batch once, and keeps a bounded
cache of tokens it has verified.  This benchmark times the collector's own
``TokenService.verify`` (what ``POST /v1/reports`` runs in a worker thread),
in process, no HTTP, for batches of 1000 reports with a 2048-bit issuer key
(the production size; RFC 9578):

- ``1 metric per device``: 1000 devices, 1000 tokens (the floor: as before,
  one verification per report);
- ``M metrics per device``: 1000 / M devices, one token each for all its
  metrics (M = 5, 20, 100);
- the same batch again (a later flush of the same devices in the epoch): the
  cache answers;
- ``forged, transition``: random tokens for an epoch inside the version-1
  transition window (each tried as version 2, then version 1).

Each row is the median of ``--repeats`` batches, each timed in CPU seconds
of the process (``time.process_time``: all threads, so the worker thread's
RSA work counts; less sensitive to a loaded machine than wall time), in one
event loop with the worker thread already started, with a fresh verifier: a cold cache,
except the "again" row, whose batch went through once before.  Ratios are to
the first row, measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_tokens.py [--repeats 7]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from collector.store import ValidReport
from collector.token_crypto import TokenKey
from collector.tokens import TokenService, V1Cutoff
from ldp_core.metric import MetricSpec
from ldp_core.tokens import b64url, token_input, unit_digest

__all__ = ["main"]

BATCH = 1000
EPOCH = 20423
_PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)


def _specs(count: int) -> list[MetricSpec]:
    return [MetricSpec.from_json({"name": f"m{i}", "kind": "boolean", "epsilon": 1.0})
            for i in range(count)]


def _tokens(key: TokenKey, devices: int) -> list[str]:
    unit = unit_digest("day", EPOCH)
    out = []
    for _ in range(devices):
        nonce = secrets.token_bytes(32)
        msg = token_input(nonce, unit, key.public.key_id)
        out.append(b64url(nonce + key.private.sign(msg, _PSS, hashes.SHA384())))
    return out


def _batch(tokens: list[str], specs: list[MetricSpec]) -> list[ValidReport]:
    """Each device (token) reports each metric once, devices one after the other."""
    return [ValidReport(spec, EPOCH, os.urandom(16).hex(), token, (1,))
            for token in tokens for spec in specs][:BATCH]


async def _time(service: TokenService, reports: list[ValidReport]) -> tuple[float, int, int]:
    """(CPU seconds of the process, all threads; RSA verifications; reports with a
    valid token) of one ``verify``."""
    before = service.verifier.verifications
    started = time.process_time()
    good, _, _ = await service.verify(reports, list(range(len(reports))))
    return (time.process_time() - started, service.verifier.verifications - before, len(good))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    key = TokenKey.generate(2048)
    rows: list[tuple[str, float, int, int]] = []

    def run(label: str, make: list[list[ValidReport]], *, warm: bool = False,
            v1_until: float | None = None) -> None:
        async def batches() -> tuple[list[float], int, int]:
            times, verifs, valid = [], 0, 0
            await _time(TokenService.of(key), make[0][:10])   # the worker thread is up
            for reports in make:
                service = TokenService.of(key, cutoff=V1Cutoff.fixed(v1_until))
                if warm:
                    await _time(service, reports)              # fill the cache first
                seconds, verifs, valid = await _time(service, reports)
                times.append(seconds)
            return times, verifs, valid

        times, verifs, valid = asyncio.run(batches())
        rows.append((label, statistics.median(times), verifs, valid))

    for per_device in (1, 5, 20, 100):
        batches = [_batch(_tokens(key, BATCH // per_device), _specs(per_device))
                   for _ in range(args.repeats)]
        label = "1 metric per device" if per_device == 1 else f"{per_device} metrics per device"
        run(label, batches)
        if per_device == 20:
            run("20 metrics per device, again (cache)", batches, warm=True)
    size = 32 + key.public.modulus_bytes
    forged = [[ValidReport(spec, EPOCH, os.urandom(16).hex(), b64url(os.urandom(size)), (1,))
               for spec in _specs(1) * BATCH] for _ in range(args.repeats)]
    run("forged, v1 transition (v1, then v2 to name the code)", forged,
        v1_until=float((EPOCH + 1) * 86400))
    base = rows[0][1]
    print(f"batch of {BATCH} reports, 2048-bit key, median of {args.repeats}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| batch | RSA verifications | reports per verification | CPU ms per batch "
          "| CPU us per report | reports/s per core | CPU vs 1 metric per device |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, seconds, verifs, valid in rows:
        per = f"{valid / verifs:.0f}" if verifs and valid else ("-" if valid == 0 else "inf")
        print(f"| {label} | {verifs} | {per} | {seconds * 1e3:.2f} | "
              f"{seconds / BATCH * 1e6:.2f} | {BATCH / seconds:,.0f} | {seconds / base:.3f} |")


if __name__ == "__main__":
    main()
