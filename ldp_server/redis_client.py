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
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeAlias

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
    "install_store_handlers",
    "make_client",
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
    )


def raised_in_redis_client(exc: BaseException) -> bool:
    """True if the innermost frame of the exception's traceback is redis-py code."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and str(Path(frames[-1].filename).resolve()).startswith(_REDIS_PACKAGE)


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
