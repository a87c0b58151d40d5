"""The Redis client of both services, and what "Redis is down" looks like.

``make_client`` builds a redis.asyncio client (one node) or a RedisCluster
client; neither connects until the first command, so a service starts while
Redis is down and recovers without a restart.  ``install_store_handlers``
answers every Redis failure with the one 503 of the vocabulary
(``store_unavailable``, Retry-After) and anything else with 500 ``internal``.

>>> client = make_client("redis://127.0.0.1:6379/0")
>>> type(client).__name__
'Redis'
>>> raised_in_redis_client(ValueError("not from redis-py"))
False
>>> try:
...     {}["missing"]
... except KeyError as exc:
...     raised_at(exc).rpartition(":")[2]     # the line of the failed lookup
'2'
>>> raised_at(KeyError("never raised"))
'-'
"""

from __future__ import annotations

import asyncio
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import redis.asyncio
import redis.exceptions
from fastapi import FastAPI, Request
from redis.asyncio.cluster import ClusterNode, RedisCluster
from starlette.responses import Response

from ldp_server.problems import Problem, problem_response, store_unavailable

__all__ = [
    "CLIENT_BUGS",
    "REDIS_ERRORS",
    "RedisClient",
    "WatchedConnection",
    "install_store_handlers",
    "make_client",
    "raised_at",
    "raised_in_redis_client",
]

RedisClient: TypeAlias = "redis.asyncio.Redis | RedisCluster"

#: Exceptions that mean "Redis is not reachable now" (503 store_unavailable).
REDIS_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.RedisError,
    redis.exceptions.RedisClusterException,
    OSError,
    TimeoutError,
)

#: Exceptions that redis-py has been seen to raise from inside itself while Redis is
#: going away or coming back (e.g. an AttributeError on a connection whose writer is
#: gone, on a Redis Cluster while a master restarts); 503 when (and only when)
#: raised in redis-py, else 500.
CLIENT_BUGS: tuple[type[Exception], ...] = (
    AttributeError, TypeError, IndexError, KeyError, RuntimeError,
)
_REDIS_PACKAGE = str(Path(redis.__file__).resolve().parent)


class WatchedConnection(redis.asyncio.Connection):
    """redis-py's connection, its commands bounded by one watchdog instead of a timer each.

    With ``socket_timeout`` set, redis-py (8.x) bounds each read with
    ``asyncio.timeout`` and each write with ``asyncio.wait_for`` (on Python
    3.11 a Task of its own): two timers, a Task and an extra turn of the event
    loop per command, 35-70 % of a command's client CPU
    (``benchmarks/bench_redis_timeout.py``, docs/performance.md).  Here redis-py
    runs without it, and each connection notes when it started to wait (a write,
    or a reply); one watchdog task per event loop looks every ``bound / 2``
    seconds and aborts the transport of a connection that has waited longer
    than ``bound`` (the ``socket_timeout`` asked for).  The pending command then
    fails as on a dropped connection (``redis.exceptions.ConnectionError``: 503
    ``store_unavailable``), after between ``bound`` and ``1.5 x bound``.  The TCP
    connect keeps redis-py's ``socket_connect_timeout``.  A URL that picks its own
    connection class (``rediss://``, ``unix://``) keeps redis-py's timeouts.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bound: float | None = self.socket_timeout
        self.socket_timeout = None  # redis-py: no timer of its own per command
        self.waiting_since: float | None = None
        self.waiting_loop: asyncio.AbstractEventLoop | None = None
        if self.bound:
            _LIVE.add(self)

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.bound:
            await super().send_packed_command(command, check_health)
            return
        # Connect and health-check first: their own reads are watched one by one.
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        if check_health:
            await self.check_health()  # type: ignore[no-untyped-call]
        self.waiting_since = time.monotonic()  # until the reply is read
        self.waiting_loop = _watch(self.bound)
        await super().send_packed_command(command, False)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.bound and self.waiting_since is None:  # a read without a write of ours
            self.waiting_since = time.monotonic()
            self.waiting_loop = _watch(self.bound)
        try:
            return await super().read_response(*args, **kwargs)
        finally:
            self.waiting_since = None

    def abort(self) -> None:
        """Drop the socket: the command waiting on it fails (ConnectionError)."""
        writer = self._writer
        if writer is not None:
            writer.transport.abort()


#: Connections with a bound; the watchdog of the loop that last needed one, and its period.
_LIVE: weakref.WeakSet[WatchedConnection] = weakref.WeakSet()
_WATCHDOG: list[tuple[asyncio.Task[None], float]] = []


def _watch(bound: float) -> asyncio.AbstractEventLoop:
    """The running loop, its watchdog started unless one runs often enough for ``bound``."""
    loop = asyncio.get_running_loop()
    if _WATCHDOG:
        task, period = _WATCHDOG[0]
        if period <= bound / 2 and task.get_loop() is loop and not task.done():
            return loop
    task = loop.create_task(_watchdog(loop, bound / 2), name="redis-watchdog")
    _WATCHDOG[:] = [(task, bound / 2)]
    return loop


async def _watchdog(loop: asyncio.AbstractEventLoop, period: float) -> None:
    """Abort this loop's connections that have waited past their bound; stop when none
    has waited for two periods (the next command starts it again)."""
    idle = 0
    while idle < 2:
        await asyncio.sleep(period)
        now = time.monotonic()
        idle += 1
        try:
            conns = list(_LIVE)
        except RuntimeError:  # another thread's loop added one meanwhile: next period
            idle = 0
            continue
        for conn in conns:
            since = conn.waiting_since
            if since is None or conn.bound is None or conn.waiting_loop is not loop:
                continue
            idle = 0
            if now - since > conn.bound:
                conn.abort()


def make_client(
    redis_url: str | None = None,
    cluster_nodes: Sequence[tuple[str, int]] | None = None,
    timeout: float = 2.0,
) -> RedisClient:
    """A redis.asyncio client for a URL, or a RedisCluster client for (host, port) nodes."""
    if cluster_nodes:
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in cluster_nodes],
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
    if not redis_url:
        raise ValueError("give a redis URL or cluster nodes")
    return redis.asyncio.Redis.from_url(
        redis_url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=5,
        connection_class=WatchedConnection,
    )


def raised_in_redis_client(exc: BaseException) -> bool:
    """True if the innermost frame of the exception's traceback is redis-py code."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and str(Path(frames[-1].filename).resolve()).startswith(_REDIS_PACKAGE)


def raised_at(exc: BaseException) -> str:
    """Where the exception was raised, ``file.py:line`` of its innermost frame: what an
    operator needs beside its type to find a 500's cause (code, never a value)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "-"


def install_store_handlers(
    app: FastAPI,
    on_down: Callable[[Request, Exception], None],
    on_unexpected: Callable[[Request, Exception], None],
) -> None:
    """503 store_unavailable for Redis failures, 500 internal for anything else.

    ``on_down`` and ``on_unexpected`` observe (log, count) before the answer;
    they get the exception, never a response body to fill.
    """

    async def down(request: Request, exc: Exception) -> Response:
        on_down(request, exc)
        return problem_response(store_unavailable())

    async def unexpected(request: Request, exc: Exception) -> Response:
        on_unexpected(request, exc)
        return problem_response(Problem(500, "internal", "internal error"))

    async def client_bug(request: Request, exc: Exception) -> Response:
        if raised_in_redis_client(exc):
            return await down(request, exc)
        return await unexpected(request, exc)

    for error in REDIS_ERRORS:
        app.add_exception_handler(error, down)
    for error in CLIENT_BUGS:
        app.add_exception_handler(error, client_bug)
    app.add_exception_handler(Exception, unexpected)
