"""What the install proof of work costs: solve and verify times of ``ldp_core.pow``.

For each parameter set, ``--solves`` solves (default 30) of fixed challenges
(``SHA-256("bench-pow-<i>")``, one fixed install digest, so a rerun does the
same guesses), each timed in CPU seconds of its thread (``time.thread_time``:
what a fake install costs an attacker, and less sensitive than wall time to
other load on the machine) and in wall seconds; then ``--verifies`` verifies
of the found solutions (the server's cost per registration), median CPU ms.

A solve is a geometric number of scrypt evaluations with mean 2^bits, so its
time varies as much as its mean (p95 = 3.0 x mean): the ``expected`` column,
2^bits x the measured CPU time of one evaluation, is the precise figure; the
30-solve mean carries a relative standard error of about 1/sqrt(30) = 18 %.

Run: ``.venv/bin/python benchmarks/bench_pow.py [--solves 30] [--verifies 200]``
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _smoke
from benchmarks._table import header, table
from ldp_core.pow import DEFAULT_PARAMS, PowParams, pow_hash, solve, verify

CANDIDATES = (
    PowParams(n=1024, r=8, p=1, bits=9),
    DEFAULT_PARAMS,
    PowParams(n=4096, r=8, p=1, bits=7),
    PowParams(n=16384, r=8, p=1, bits=5),
)
DIGEST = hashlib.sha256(b"bench-pow-install").digest()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(params: PowParams, solves: int, verifies: int) -> list[object]:
    challenges = [hashlib.sha256(f"bench-pow-{i}".encode()).digest() for i in range(solves)]
    cpu: list[float] = []
    wall: list[float] = []
    nonces: list[int] = []
    for challenge in challenges:
        c0, w0 = time.thread_time(), time.perf_counter()
        nonce = solve(challenge, DIGEST, params)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
        assert nonce is not None
        nonces.append(nonce)
    evaluations = sum(n + 1 for n in nonces)
    per_eval = sum(cpu) / evaluations
    checks: list[float] = []
    for i in range(verifies):
        challenge, nonce = challenges[i % solves], nonces[i % solves]
        c0 = time.thread_time()
        assert verify(challenge, DIGEST, nonce, params)
        checks.append(time.thread_time() - c0)
    pow_hash(challenges[0], DIGEST, 0, params)
    return [
        f"N={params.n} r={params.r} p={params.p} bits={params.bits}"
        + (" (default)" if params == DEFAULT_PARAMS else ""),
        f"{params.memory_bytes / 2**20:g} MiB",
        f"{statistics.mean(cpu):.2f}", f"{percentile(cpu, 0.5):.2f}",
        f"{percentile(cpu, 0.95):.2f}", f"{statistics.mean(wall):.2f}",
        f"{per_eval * 1e3:.2f}", f"{params.expected_evaluations * per_eval:.2f}",
        f"{statistics.median(checks) * 1e3:.2f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--solves", type=int, default=30)
    parser.add_argument("--verifies", type=int, default=200)
    parser.add_argument("--default-only", action="store_true", help="only the default params")
    args = parser.parse_args()
    _smoke.announce("bench_pow")
    args.solves, args.verifies = _smoke.size((args.solves, args.verifies), (2, 2))
    # A smoke run solves at the default only: N=1024 bits=9 is 512 evaluations a solve.
    candidates = (DEFAULT_PARAMS,) if args.default_only else _smoke.size(CANDIDATES,
                                                                         (DEFAULT_PARAMS,))
    rows = [measure(p, args.solves, args.verifies) for p in candidates]
    print(header(f"Install proof of work: {args.solves} solves, {args.verifies} verifies, "
                 "one core"))
    print(table(["params", "memory", "solve CPU s mean", "p50", "p95", "wall s mean",
                 "ms / eval", "expected s (2^bits x eval)", "verify CPU ms (median)"], rows))


if __name__ == "__main__":
    main()
