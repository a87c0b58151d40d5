"""Two servers measured in alternating short rounds (ABBA ABBA ...) from one generator.

On a shared machine the speed available to a server drifts by a factor of
two or three within a minute (other work starts and stops); two servers
measured one after the other then compare the machine's moods, not the
servers.  Here one generator process (``benchmarks/loadgen.py``'s request
builder and client) drives the collector (A) and the minimal endpoint (B) in
rounds of ``round_seconds``, A B B A A B ..., and sums each side's requests and
seconds over its rounds: a drift slower than a round weighs on both sides
alike, and a linear one cancels in each ABBA quartet.

The collector gets single-report requests with signed tokens (``per_token``
consecutive reports share one, as a device's reports of ``metrics`` metrics
do); the minimal endpoint gets the same JSON with unsigned tokens of the same
length (it checks none).  Requests are built before the first round.

    python benchmarks/interleave.py --collector URL --minimal URL --redis URL \\
        --metric bench.ingest --epoch 20423 --key K [--rounds 6] [--round-seconds 0.5]

prints one JSON object: {"collector": {...}, "minimal": {...}}, each with
loadgen's fields (requests, reports, accepted, errors, seconds, reports_per_s,
requests_per_s, p50_ms, p99_ms, exhausted) summed over its rounds, the Redis
CPU cores and EVALSHA microseconds per report it caused, and ``rounds``: the
requests/s of each of its rounds; with ``--pids``, ``server_cpu_ms`` and
``redis_cpu_ms``: the CPU milliseconds per request of that side's server
processes (workers included) and of Redis; ``requests_per_call``: requests per
ingest script call (EVALSHA; above 1 when the collector's group commit
shares calls); ``one_worker_rounds``: the rounds in which one worker used at
least ``ONE_WORKER`` of its side's worker CPU.

Each round opens its connections at once, and a worker that wakes to a burst
of connections may accept all of them (uvloop drains the backlog), which
leaves that round one core's server.  Such rounds strike either side at
random, and more connections make them rarer: in ``bench_ingest.py --single``
runs of 2026-12-03 (rounds of 0.25 s) 1-7 rounds of 12 per side at 8
connections, 0-6 at 32, 0-1 at 64.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.loadgen import Result, build_requests, run

__all__ = ["ONE_WORKER", "alternate", "busiest_share", "order", "redis_sample",
           "tree_cpu_seconds", "workers_cpu"]

SIDES = ("collector", "minimal")
#: A round "on one worker": its busiest worker used at least this share of the
#: side's worker CPU.
ONE_WORKER = 0.9


def order(rounds: int) -> list[int]:
    """The sides (0 = A, 1 = B) in the order they run: ABBA repeated.

    >>> "".join("AB"[i] for i in order(3))
    'ABBAAB'
    """
    return [side for r in range(rounds) for side in ((0, 1) if r % 2 == 0 else (1, 0))]


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its descendants so far (Linux /proc;
    0.0 for a process that is gone).

    >>> tree_cpu_seconds(os.getpid()) > 0
    True
    """
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    todo = [pid]
    while todo:
        current = todo.pop()
        proc = Path(f"/proc/{current}")
        try:
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in (proc / "task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def workers_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each child process tree of ``pid`` (a uvicorn supervisor's
    workers, and any helper it keeps); ``{pid: seconds}`` of the process itself when
    it has no children (a single-worker server)."""
    children: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            children += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return {}
    return {c: tree_cpu_seconds(c) for c in children or [pid]}


def busiest_share(before: dict[int, float], after: dict[int, float]) -> float:
    """The busiest process' share of the CPU the processes used between two readings
    (``workers_cpu``); 0.0 when none used any.

    >>> busiest_share({1: 1.0, 2: 1.0}, {1: 1.5, 2: 1.25})
    0.6666666666666666
    >>> busiest_share({1: 1.0}, {1: 1.0})
    0.0
    """
    used = [after[p] - before.get(p, 0.0) for p in after]
    total = sum(used)
    return max(used) / total if total > 0 else 0.0


def redis_sample(url: str) -> tuple[float, float, int]:
    """(CPU seconds Redis has used, microseconds it spent in EVALSHA, EVALSHA calls),
    its own accounting."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        cpu = client.info("cpu")
        stats = client.info("commandstats").get("cmdstat_evalsha", {})
    finally:
        client.close()
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), float(stats.get("usec", 0)),
            int(stats.get("calls", 0)))


async def alternate(
    urls: tuple[str, str],
    requests: tuple[list[tuple[bytes, int]], ...],
    redis_url: str,
    connections: int,
    rounds: int,
    round_seconds: float,
    pids: tuple[int, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run ``rounds`` ABBA rounds (after one unmeasured warm-up round per side) and
    sum each side's results; see the module docstring.  With ``pids`` (each server's
    process, its workers below it) each side also gets its servers' CPU per request."""
    cursor = [0, 0]
    for side in (0, 1):
        warm = await run(urls[side], requests[side], connections, min(0.2, round_seconds))
        cursor[side] = warm.requests
    parts: list[list[Result]] = [[], []]
    cpu = [0.0, 0.0]
    script = [0.0, 0.0]
    calls = [0, 0]
    server = [0.0, 0.0]
    one_worker = [0, 0]
    for side in order(rounds):
        before = redis_sample(redis_url)
        server_before = tree_cpu_seconds(pids[side]) if pids else 0.0
        split_before = workers_cpu(pids[side]) if pids else {}
        result = await run(urls[side], requests[side][cursor[side] :], connections, round_seconds)
        server[side] += (tree_cpu_seconds(pids[side]) if pids else 0.0) - server_before
        if pids:
            one_worker[side] += busiest_share(split_before, workers_cpu(pids[side])) >= ONE_WORKER
        after = redis_sample(redis_url)
        cursor[side] += result.requests
        parts[side].append(result)
        cpu[side] += after[0] - before[0]
        script[side] += after[1] - before[1]
        calls[side] += after[2] - before[2]
    out: dict[str, dict[str, Any]] = {}
    for side, name in enumerate(SIDES):
        rs = parts[side]
        total = Result(
            sum(r.requests for r in rs),
            sum(r.reports for r in rs),
            sum(r.accepted for r in rs),
            sum(r.errors for r in rs),
            sum(r.seconds for r in rs),
            [x for r in rs for x in r.latencies],
            any(r.exhausted for r in rs),
        )
        summary = total.as_json()
        summary["redis_cores"] = cpu[side] / total.seconds
        summary["script_us"] = script[side] / total.reports if total.reports else 0.0
        summary["rounds"] = [r.requests / r.seconds for r in rs]
        # Group commit: how many requests shared one ingest script call (0: none made).
        summary["requests_per_call"] = total.requests / calls[side] if calls[side] else 0.0
        if pids:
            summary["server_cpu_ms"] = 1e3 * server[side] / max(1, total.requests)
            summary["redis_cpu_ms"] = 1e3 * cpu[side] / max(1, total.requests)
            summary["one_worker_rounds"] = one_worker[side]
        out[name] = summary
    return out


def main(argv: list[str] | None = None) -> None:
    """Command line: build both sides' requests, alternate, print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--collector", required=True)
    ap.add_argument("--minimal", required=True)
    ap.add_argument("--redis", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--metric", required=True)
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--domain-size", type=int, default=64)
    ap.add_argument("--metrics", type=int, default=1)
    ap.add_argument("--per-token", type=int, default=1)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--round-seconds", type=float, default=0.5)
    ap.add_argument(
        "--rate",
        type=int,
        default=4000,
        help="requests built per second of a side's rounds (the most it can use)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--pids",
        type=int,
        nargs=2,
        default=None,
        help="the collector's and the minimal endpoint's server process ids",
    )
    args = ap.parse_args(argv)
    for url in (args.collector, args.minimal):
        if urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
            raise SystemExit("interleave talks to loopback only")
    count = int(args.rate * (args.rounds * args.round_seconds + 0.2)) + 10
    built = tuple(
        build_requests(
            urlsplit(url).netloc,
            args.key,
            args.metric,
            1,
            args.epoch,
            "grr",
            args.domain_size,
            1.0,
            1,
            count,
            False,
            args.seed + side,
            fake_tokens=side == 1,
            metrics=args.metrics if side == 0 else 1,
            per_token=args.per_token if side == 0 else 1,
        )
        for side, url in enumerate((args.collector, args.minimal))
    )
    result = asyncio.run(
        alternate(
            (args.collector, args.minimal),
            built,
            args.redis,
            args.connections,
            args.rounds,
            args.round_seconds,
            tuple(args.pids) if args.pids else None,
        )
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
