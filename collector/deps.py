"""Typed dependencies of the collector's routes: settings, store, runtime, role checks.

The Redis client and the store are owned by the app's lifespan and kept on
``app.state``; routes receive them through these dependencies.  Every
dependency is ``async`` (FastAPI would run a plain function in a thread).

A role check takes one token of the client's rate limit (per client address,
kept in Redis: ``collector.store.limits``; the takes of concurrent requests go
out in one call), then reads the bearer key and finds
its role in the key ring, in this order (the first failure answers):

    429 rate_limited  this client's bucket is empty (Retry-After); a flood,
                      valid or not, empties only its sender's bucket
    401 missing_key   no ``Authorization: Bearer <key>``
    401 invalid_key   not one of the collector's keys
    403 wrong_role    a key of another role

>>> IngestKey, AdminKey, ReaderKey    # doctest: +ELLIPSIS
(typing.Annotated[NoneType, Depends(...)], ...)
"""

from __future__ import annotations

import ipaddress
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from collector.logs import log_event
from collector.settings import Settings
from collector.store import Store
from collector.telemetry import Telemetry
from ldp_server.keys import KeyRing, bearer_key
from ldp_server.problems import Problem
from ldp_server.settings import Role

__all__ = [
    "AdminKey",
    "IngestKey",
    "ReaderKey",
    "RedisHealth",
    "Runtime",
    "RuntimeDep",
    "SettingsDep",
    "StoreDep",
    "client_address",
    "get_runtime",
    "get_settings",
    "get_store",
    "network_of",
    "requires",
]


@dataclass
class RedisHealth:
    """Whether Redis was last seen down: transitions are logged, not every refusal."""

    log: logging.Logger
    down: bool = False

    def mark_up(self) -> None:
        if self.down:
            self.down = False
            log_event(self.log, "redis_recovered")

    def mark_down(self, error: BaseException) -> None:
        if not self.down:
            self.down = True
            log_event(self.log, "redis_unavailable", logging.WARNING, error=type(error).__name__)


@dataclass(frozen=True)
class Runtime:
    """What a collector process holds besides the store: built once by ``create_app``.

    ``clock`` (unix seconds) decides the current epoch; tests replace it.
    """

    settings: Settings
    keys: KeyRing
    telemetry: Telemetry
    log: logging.Logger
    clock: Callable[[], float]
    redis: RedisHealth = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "redis", RedisHealth(self.log))


async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def get_settings(request: Request) -> Settings:
    return (await get_runtime(request)).settings


async def get_store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Store, Depends(get_store)]


def client_address(request: Request) -> str:
    """The address a client's rate limits are counted under: the peer's, or the one
    X-Forwarded-For names when the peer is in ``LDP_TRUSTED_PROXIES``
    (``ldp_server.serve_asgi``); never stored as such (``collector.store.limits``)."""
    client = request.client
    return client.host if client else "unknown"


def network_of(address: str) -> str:
    """The network a new install is counted under: /24 of IPv4, /48 of IPv6.

    >>> network_of("192.0.2.77"), network_of("2001:db8:1:2::5"), network_of("unknown")
    ('192.0.2.0/24', '2001:db8:1::/48', 'unknown')
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    return str(ipaddress.ip_network(f"{ip}/{24 if ip.version == 4 else 48}", strict=False))


def requires(*roles: Role) -> Callable[[Request], Awaitable[None]]:
    """A dependency that lets a request through only with a key of one of ``roles``."""

    async def check(request: Request) -> None:
        state = request.app.state
        runtime: Runtime = state.runtime
        settings = runtime.settings
        store: Store = state.store
        wait = await store.take(client_address(request), settings.rate_limit_per_second,
                                settings.rate_limit_burst)
        if wait > 0:
            raise Problem(429, "rate_limited", "too many requests from this client",
                          headers={"Retry-After": str(max(1, math.ceil(wait)))})
        key = bearer_key(request.headers.get("authorization"))
        if key is None:
            raise Problem(401, "missing_key", "send the API key as 'Authorization: Bearer <key>'",
                          headers={"WWW-Authenticate": "Bearer"})
        role = runtime.keys.role_of(key)
        if role is None:
            raise Problem(401, "invalid_key", "the API key is not valid",
                          headers={"WWW-Authenticate": "Bearer"})
        if role not in roles:
            raise Problem(403, "wrong_role", f"this needs an {' or '.join(roles)} key, "
                          f"not an {role} key")

    return check


IngestKey = Annotated[None, Depends(requires("ingest"))]
AdminKey = Annotated[None, Depends(requires("admin"))]
ReaderKey = Annotated[None, Depends(requires("ingest", "admin"))]
