"""What bounding each Redis command costs the client: redis-py's socket_timeout, ours, none.

A throwaway redis-server on loopback and one redis.asyncio client per variant,
on uvloop (as the services run):

    redis-py timeout   ``socket_timeout=2``, redis-py's own connection: each read
                       under ``asyncio.timeout``, each write under
                       ``asyncio.wait_for`` (a Task of its own on Python 3.11)
    ours               ``socket_timeout=2`` with
                       ``ldp_server.redis_client.WatchedConnection`` (what
                       ``make_client`` builds): writes under ``asyncio.timeout``
    no timeout         ``socket_timeout=None``: nothing bounds a command (the
                       floor; a frozen Redis would hang a request forever)

Workloads: ``single`` (one GET after another), ``pipe10`` (pipelines of 10 GETs),
``conc32`` (32 tasks each doing single GETs).  Per block of ``--commands``
commands: this process's CPU time (``time.process_time``; Redis runs in its own
process) and wall time, per command.  Variants alternate block by block (A B C A
B C ...) so that a drift of a shared machine weighs on all; the table gives the
median over ``--rounds`` blocks and the ratio to the "no timeout" floor.

Run: ``nice .venv/bin/python benchmarks/bench_redis_timeout.py [--rounds 7]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import redis.asyncio

from benchmarks._table import header, table
from ldp_server.redis_client import WatchedConnection
from ldp_server.redis_server import RedisServer

__all__ = ["VARIANTS", "measure", "section"]

VARIANTS: dict[str, dict[str, Any]] = {
    "redis-py timeout": {"socket_timeout": 2.0},
    "ours (watchdog)": {"socket_timeout": 2.0, "connection_class": WatchedConnection},
    "no timeout": {"socket_timeout": None},
}
WORKLOADS = ("single", "pipe10", "conc32")


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - the server extra installs it
        return asyncio.run(coro)
    return uvloop.run(coro)


async def _block(url: str, options: dict[str, Any], workload: str, n: int) -> tuple[float, float]:
    """(CPU us, wall us) per command of ``n`` commands, after a warm-up of 500."""
    client = redis.asyncio.Redis.from_url(
        url, socket_connect_timeout=2.0, health_check_interval=5, **options
    )
    await client.set("k", "v")

    async def single(count: int) -> None:
        for _ in range(count):
            await client.get("k")

    async def pipe10(count: int) -> None:
        for _ in range(count // 10):
            pipe = client.pipeline(transaction=False)
            for _ in range(10):
                pipe.get("k")
            await pipe.execute()

    async def conc32(count: int) -> None:
        await asyncio.gather(*(single(count // 32) for _ in range(32)))

    run: Callable[[int], Awaitable[None]] = {
        "single": single, "pipe10": pipe10, "conc32": conc32}[workload]
    try:
        await run(500)
        cpu, wall = time.process_time(), time.perf_counter()
        await run(n)
        return ((time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6)
    finally:
        await client.aclose()


def measure(rounds: int, commands: int) -> list[list[Any]]:
    """One row per (workload, variant): median CPU and wall us per command, ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer.start(Path(tmp) / "redis")
        try:
            found: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for workload in WORKLOADS:
                for _ in range(rounds):
                    for name, options in VARIANTS.items():
                        found.setdefault((workload, name), []).append(
                            _run(_block(server.url, options, workload, commands)))
        finally:
            server.stop()
    rows = []
    for workload in WORKLOADS:
        floor = statistics.median(c for c, _ in found[(workload, "no timeout")])
        for name in VARIANTS:
            cpu = statistics.median(c for c, _ in found[(workload, name)])
            wall = statistics.median(w for _, w in found[(workload, name)])
            rows.append([workload, name, f"{cpu:.1f}", f"{cpu / floor:.2f}", f"{wall:.1f}"])
    return rows


def section(rounds: int = 7, commands: int = 10_000) -> str:
    rows = measure(rounds, commands)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return header(
        f"Redis command timeouts: client CPU per command ({rounds} blocks of {commands:,} "
        f"commands, median; load average {load} at the end)"
    ) + table(["workload", "variant", "CPU us/command", "vs no timeout", "wall us/command"],
              rows)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--commands", type=int, default=10_000)
    args = ap.parse_args()
    print(section(args.rounds, args.commands))
