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

``--sign`` times the issuer instead: CPU ms per blind signature (2048 bits)
of ``TokenKey.blind_sign`` (GMP's constant-time ``powmod_sec`` with the CRT
and the RSAVP1 fault check), against the same RSASP1 with Python ``int``
``pow`` (the code before gmpy2: the reference) and with GMP's variable-time
``powmod``, interleaved round by round in one run.

Run: ``.venv/bin/python benchmarks/bench_tokens.py [--repeats 7] [--sign]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gmpy2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from benchmarks import _smoke
from collector.store import ValidReport
from collector.token_crypto import TokenKey
from collector.tokens import TokenService, V1Cutoff
from ldp_core import tokens
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


def _rsasp1(key: TokenKey, power: Callable[[Any, Any, Any], Any], convert: Callable[[int], Any]
            ) -> Callable[[bytes], bytes]:
    """``blind_sign``'s CRT and fault check with another ``power`` (the reference rows)."""
    nums = key.private.private_numbers()
    n, e = convert(nums.public_numbers.n), convert(nums.public_numbers.e)
    p, q, dp, dq, qi = (convert(x) for x in (nums.p, nums.q, nums.dmp1, nums.dmq1, nums.iqmp))

    def sign(blinded: bytes) -> bytes:
        m = convert(int.from_bytes(blinded, "big"))
        s1, s2 = power(m % p, dp, p), power(m % q, dq, q)
        s = s2 + q * ((s1 - s2) * qi % p)
        assert power(s, e, n) == m
        return int(s).to_bytes(len(blinded), "big")

    return sign


def sign_table(repeats: int, count: int = 100) -> None:
    """CPU ms per blind signature, median of ``repeats`` rounds of ``count`` each."""
    key = TokenKey.generate(2048)
    blinded = [tokens.prepare(key.public, "day", EPOCH).blinded for _ in range(count)]
    ways = {
        "Python int pow (the code before; reference)": _rsasp1(key, pow, int),
        "gmpy2.powmod (GMP, variable time)": _rsasp1(key, gmpy2.powmod, gmpy2.mpz),
        "gmpy2.powmod_sec (GMP, constant time): TokenKey.blind_sign": key.blind_sign,
    }
    expected = [key.blind_sign(b) for b in blinded]
    times: dict[str, list[float]] = {label: [] for label in ways}
    for _ in range(repeats):
        for label, sign in ways.items():
            started = time.process_time()
            out = [sign(b) for b in blinded]
            times[label].append((time.process_time() - started) / count)
            assert out == expected, label
    base = statistics.median(times[next(iter(ways))])
    print(f"blind signatures, 2048-bit key, median of {repeats} rounds of {count}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| RSASP1 (CRT + RSAVP1 check) | CPU ms per token | tokens/s per core "
          "| time vs reference |")
    print("|---|---:|---:|---:|")
    for label, rounds in times.items():
        ms = statistics.median(rounds) * 1e3
        print(f"| {label} | {ms:.2f} | {1e3 / ms:,.0f} | {ms / base / 1e3:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sign", action="store_true", help="time the issuer's blind signature")
    args = ap.parse_args()
    _smoke.announce("bench_tokens")
    args.repeats = _smoke.size(args.repeats, 1)
    if args.sign:
        sign_table(args.repeats, _smoke.size(100, 5))
        return
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
