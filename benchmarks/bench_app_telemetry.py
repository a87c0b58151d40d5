"""What FastAPI's native OpenTelemetry hook costs a request of the aggregator (in process).

FastAPI 0.165 asks the three global OpenTelemetry providers on every request
whether any is configured (none is: we export nothing through it).  Two copies
of the aggregator app are called directly as ASGI apps (no server, no Redis
touched: ``GET /healthz`` and ``GET /missing``, a 404 problem): the app as
built (``telemetry=TELEMETRY_OFF``, as the collector) and the same app with
FastAPI's default telemetry settings.  Blocks of
``--requests`` requests alternate between the two; this process's CPU time per
request, median over ``--rounds`` blocks.

Run: ``nice .venv/bin/python benchmarks/bench_app_telemetry.py [--rounds 9]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from fastapi.telemetry._asgi import NativeTelemetry

from aggregator.app import create_app
from aggregator.settings import Settings
from benchmarks._table import header, table

__all__ = ["measure", "section"]

DEFAULT_TELEMETRY: dict[str, Any] = {"tracing": True, "metrics": True, "logs": True}


def _app(default_telemetry: bool) -> Any:
    app = create_app(Settings(env="dev", redis_url="redis://127.0.0.1:1/0"))
    if default_telemetry:  # what FastAPI() does without telemetry=
        config: Any = {**app._telemetry, **DEFAULT_TELEMETRY}
        app._telemetry = config
        app._native_telemetry = NativeTelemetry(config)
    return app


async def _block(app: Any, path: str, n: int) -> float:
    """CPU microseconds per request of ``n`` GETs of ``path``."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": [(b"host", b"bench")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    start = time.process_time()
    for _ in range(n):
        await app(dict(scope), receive, send)
    return (time.process_time() - start) / n * 1e6


def measure(rounds: int, requests: int) -> list[list[Any]]:
    apps = {"off (as built)": _app(False), "FastAPI default": _app(True)}

    async def run() -> dict[tuple[str, str], list[float]]:
        found: dict[tuple[str, str], list[float]] = {}
        for path in ("/healthz", "/missing"):
            for app in apps.values():
                await _block(app, path, 200)  # warm-up
            for _ in range(rounds):
                for name, app in apps.items():
                    found.setdefault((path, name), []).append(await _block(app, path, requests))
        return found

    found = asyncio.run(run())
    rows = []
    for path in ("/healthz", "/missing"):
        off = statistics.median(found[(path, "off (as built)")])
        for name in apps:
            cpu = statistics.median(found[(path, name)])
            rows.append([path, name, f"{cpu:.1f}", f"{cpu / off:.3f}"])
    return rows


def section(rounds: int = 9, requests: int = 2000) -> str:
    rows = measure(rounds, requests)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return header(f"Aggregator: FastAPI's OpenTelemetry hook, CPU per request ({rounds} blocks "
                  f"of {requests:,}, median; load average {load} at the end)") + table(
        ["request", "telemetry", "CPU us/request", "vs off"], rows)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    print(section(args.rounds, args.requests))
