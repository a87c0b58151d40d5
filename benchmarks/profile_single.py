"""Where the CPU of a single-report POST /v1/reports goes (in process, no HTTP server).

Both ASGI apps run in this process on a real Redis: the collector
(``collector.app:create_app``, the test issuer key, 1024 bits) and the minimal
endpoint (``benchmarks.minimal_endpoint``).  Pre-built single-report requests
(``benchmarks/loadgen.py``'s builder: a fresh device token each) are handed
to each app as ASGI calls by 8 concurrent callers (``--callers``), in blocks of 160 requests;
the variants' blocks alternate (A B C ... A B C ...) so that a drift of a
shared machine weighs on all of them, and each block's CPU time of this
process (``time.process_time``: Redis runs in its own process) is divided by
its requests.  Variants of the collector remove one part at a time:

    collector        the whole request (the rate limiter off, as in every benchmark)
    limiter on       the whole request with the production rate limiter on (a take
                     per request; a rate no caller reaches, so none is refused)
    no token check   ``TokenService.check`` replaced by a pass-through
    no Redis write   ``Store.ingest`` replaced by "all accepted" (also removes
                     the request's only wait on Redis, so it saves a little more
                     than the call's own cost)
    route only       the route's ASGI app called directly: no middleware, no
                     exception wrappers, no routing (what the app stack costs)
    minimal          the minimal endpoint (FastAPI, pydantic, one pipelined HINCRBY)

Run: ``.venv/bin/python benchmarks/profile_single.py [--blocks 10] [--callers 8]``; the table is
also written to ``benchmarks/results/<UTC date>-<time>-profile-single.md``
(``--no-write``: not).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._services import ADMIN_KEY, INGEST_KEY, REPO_ROOT
from benchmarks._table import table
from benchmarks.bench_ingest import BENCH_SPEC, write_result
from benchmarks.loadgen import build_requests

__all__ = ["asgi_caller", "main", "profile"]

BLOCK = 160
CALLERS = 8

Call = Callable[[bytes], Awaitable[None]]


def asgi_caller(app: Any, direct: Any = None) -> Call:
    """A function that hands one framed HTTP request (bytes) to ``app`` as an ASGI call
    (``direct``: an ASGI callable to call instead, with ``scope["app"]`` = ``app``).

    >>> async def echo(scope, receive, send):
    ...     body = (await receive())["body"]
    ...     await send({"type": "http.response.start", "status": 200, "headers": []})
    ...     seen.append((scope["method"], scope["path"], dict(scope["headers"])[b"x-a"], body))
    >>> seen = []
    >>> asyncio.run(asgi_caller(echo)(b"POST /v1/reports HTTP/1.1\\r\\nX-A: 1\\r\\n\\r\\nhi"))
    >>> seen
    [('POST', '/v1/reports', b'1', b'hi')]
    """

    async def send(message: Any) -> None:
        pass

    async def call(framed: bytes) -> None:
        head, _, payload = framed.partition(b"\r\n\r\n")
        method, path, _ = head.split(b"\r\n", 1)[0].split(b" ")
        headers = [
            (k.strip().lower(), v.strip())
            for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])
        ]
        messages = [{"type": "http.request", "body": payload, "more_body": False}]

        async def receive() -> Any:
            return messages.pop() if messages else {"type": "http.disconnect"}

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method.decode(),
            "scheme": "http",
            "path": path.decode(),
            "raw_path": path,
            "root_path": "",
            "query_string": b"",
            "headers": headers,
            "client": ("127.0.0.1", 5555),
            "server": ("127.0.0.1", 80),
        }
        if direct is not None:
            scope["app"] = app
            await direct(scope, receive, send)
        else:
            await app(scope, receive, send)

    return call


@contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


async def profile(
    blocks: int, redis_url: str, callers: int = CALLERS
) -> list[tuple[str, str, str]]:
    """Rows (variant, median us of CPU per request, min) over ``blocks`` rounds of
    ``callers`` concurrent callers."""
    from benchmarks.minimal_endpoint import create_app as minimal_app
    from collector.app import create_app
    from collector.routers import reports
    from collector.settings import Settings
    from collector.store import Store, ValidReport
    from collector.tokens import TokenService
    from ldp_core.metric import MetricSpec
    from ldp_server.settings import load

    async def no_check(
        self: TokenService, reports: list[ValidReport], positions: list[int]
    ) -> tuple[list[ValidReport], list[int], dict[int, str]]:
        return [r._replace(token=r.token[:43]) for r in reports], list(positions), {}

    async def no_write(self: Store, reports: list[ValidReport]) -> list[str]:
        return ["accepted"] * len(reports)

    epoch = int(time.time() // 86400)
    count = BLOCK * (blocks + 1) * 6 + 400

    def requests(seed: int, fake_tokens: bool) -> Iterator[Any]:
        built = build_requests("127.0.0.1", INGEST_KEY, BENCH_SPEC["name"], 1, epoch, "grr",
                               len(BENCH_SPEC["domain"]), 1.0, 1, count, False, seed,
                               fake_tokens=fake_tokens)
        return iter([r for r, _ in built])

    real = requests(3, fake_tokens=False)
    fake = requests(4, fake_tokens=True)
    collector, minimal = create_app(), minimal_app()
    settings = load(Settings).model_copy(
        update={"rate_limit_per_second": 1e6, "rate_limit_burst": 10**6})
    limited = create_app(settings)
    async with (
        collector.router.lifespan_context(collector),
        limited.router.lifespan_context(limited),
        minimal.router.lifespan_context(minimal),
    ):
        await collector.state.store.create_metric(MetricSpec.from_json(BENCH_SPEC))
        whole = asgi_caller(collector)
        # (a checkout before the plain route has no ``reports.route``: no such row)
        route = getattr(reports, "route", None)
        variants: dict[
            str, tuple[Call, Iterator[bytes], Callable[[], AbstractContextManager[None]]]
        ] = {
            "collector": (whole, real, nullcontext),
            "limiter on": (asgi_caller(limited), real, nullcontext),
            "no token check": (whole, real, lambda: _patched(TokenService, "check", no_check)),
            "no Redis write": (whole, real, lambda: _patched(Store, "ingest", no_write)),
            "minimal": (asgi_caller(minimal), fake, nullcontext),
        }
        if route is not None:
            variants["route only"] = (asgi_caller(collector, route.app), real, nullcontext)

        async def block(name: str) -> float:
            call, requests, context = variants[name]

            async def caller() -> None:
                for _ in range(BLOCK // callers):
                    await call(next(requests))

            with context():
                start = time.process_time()
                await asyncio.gather(*(caller() for _ in range(callers)))
                return 1e6 * (time.process_time() - start) / (BLOCK // callers * callers)

        samples: dict[str, list[float]] = {name: [] for name in variants}
        for name in variants:  # warm-up, not counted
            await block(name)
        for _ in range(blocks):
            for name in variants:
                samples[name].append(await block(name))
    return [(name, f"{statistics.median(v):,.0f}", f"{min(v):,.0f}") for name, v in samples.items()]


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--callers", type=int, default=CALLERS,
                    help="concurrent callers (fewer: smaller groups)")
    ap.add_argument("--no-write", action="store_true",
                    help="print only; do not write benchmarks/results/")
    args = ap.parse_args()
    from ldp_server.redis_server import RedisServer

    with tempfile.TemporaryDirectory(prefix="ldp-prof-") as folder:
        server = RedisServer.start(Path(folder) / "redis")
        try:
            os.environ.update(
                {
                    "LDP_ENV": "dev",
                    "LDP_REDIS_URL": str(server.url),
                    "LDP_ADMIN_KEYS": ADMIN_KEY,
                    "LDP_INGEST_KEYS": INGEST_KEY,
                    "LDP_TOKEN_KEY_FILE": str(REPO_ROOT / "tests" / "support" / "token_key.pem"),
                    "LDP_RATE_LIMIT_PER_SECOND": "0",
                    "LDP_LOG_LEVEL": "WARNING",
                }
            )
            try:
                import uvloop

                run: Callable[[Any], Any] = uvloop.run
            except ImportError:
                run = asyncio.run
            load = os.getloadavg()[0]
            rows = run(profile(args.blocks, str(server.url), args.callers))
        finally:
            server.stop()
    text = (
        f"Single-report requests in process, {args.callers} concurrent callers, blocks of {BLOCK} "
        f"alternated, {args.blocks} blocks per variant; load average {load:.2f}\n\n"
        + table(("variant", "CPU us/request (median)", "min"), rows)
    )
    print(text)
    if not args.no_write:
        print(f"wrote {write_result(text, 'profile-single')}", file=sys.stderr)


if __name__ == "__main__":
    main()
