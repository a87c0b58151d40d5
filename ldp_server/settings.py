"""The settings base of both services: environment (prefix ``LDP_``), no secret echoed.

A service's ``Settings`` derives from ``ServerSettings``, declares its own
fields (keys as ``SecretStr``) and lists its unsafe values in ``unsafe()``.
The base adds what both share: where Redis is, ``LDP_ENV``, CORS, and the
checks that every service makes under ``LDP_ENV=prod`` (Redis configured,
keys at least ``MIN_KEY_LENGTH`` long, no ``*`` origin).  Inputs are never
echoed in a validation error (``hide_input_in_errors``), secret fields print
as ``**********``, and ``load`` turns a refusal into one line naming the
variables, never their values.

>>> class Demo(ServerSettings):
...     def keys_by_role(self):
...         return {"analyst": ("short-secret",)}
>>> Demo().redis_target
'redis://127.0.0.1:6379/0'
>>> try:
...     load(Demo, env="prod")
... except SettingsError as exc:
...     for part in str(exc).split(": ", 2)[2].split("; "):
...         print(part)
an analyst key is shorter than 24 characters (LDP_ANALYST_KEYS)
no LDP_REDIS_URL or LDP_REDIS_CLUSTER_NODES
"""

from __future__ import annotations

import ipaddress
import string
from collections.abc import Mapping
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ldp_server.redis_client import RedisClient, make_client

__all__ = [
    "DEFAULT_REDIS_URL",
    "MIN_KEY_LENGTH",
    "ListenSettings",
    "Role",
    "ServerSettings",
    "SettingsError",
    "check_cluster_nodes",
    "check_redis_url",
    "key_list_problems",
    "load",
    "load_or_exit",
    "split_keys",
]

Role = Literal["ingest", "admin", "analyst"]
MIN_KEY_LENGTH = 24
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

_S = TypeVar("_S", bound="ListenSettings")


def split_keys(raw: str) -> tuple[str, ...]:
    """'a, b,,c' -> ('a', 'b', 'c')."""
    return tuple(k.strip() for k in raw.split(",") if k.strip())


_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "-._~+/=")
_VARIABLE: dict[str, str] = {
    "admin": "LDP_ADMIN_KEYS", "ingest": "LDP_INGEST_KEYS", "analyst": "LDP_ANALYST_KEYS",
}


def check_redis_url(url: str) -> None:
    """Refuse a Redis URL that is not redis://, rediss:// or unix:// (value never echoed).

    >>> check_redis_url("redis://:pw@10.0.0.5:6380/2")
    >>> check_redis_url("http://:hunter2@h/0")
    Traceback (most recent call last):
    ValueError: LDP_REDIS_URL must be redis://[:password@]host[:port][/db], rediss://... or unix://...
    """
    bad = ValueError("LDP_REDIS_URL must be redis://[:password@]host[:port][/db], "
                     "rediss://... or unix://...")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is no number
        del port
    except ValueError:
        raise bad from None
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise bad
    if parts.scheme == "unix" and not parts.path.startswith("/"):
        raise bad
    if parts.scheme != "unix":
        if not parts.hostname:
            raise bad
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise bad


def check_cluster_nodes(raw: str) -> None:
    """Refuse LDP_REDIS_CLUSTER_NODES unless every item is host:port.

    >>> check_cluster_nodes("10.0.0.1:7000,:7001")
    >>> check_cluster_nodes("10.0.0.1")
    Traceback (most recent call last):
    ValueError: LDP_REDIS_CLUSTER_NODES must be host:port,host:port,...
    """
    for item in split_keys(raw):
        _, sep, port = item.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("LDP_REDIS_CLUSTER_NODES must be host:port,host:port,...")


def key_list_problems(keys: Mapping[Role, tuple[str, ...]]) -> list[str]:
    """A key with a character a bearer token cannot carry, or one key in two roles.

    Refused in every mode; the messages name the variables, never a key.

    >>> for line in key_list_problems({"admin": ("a" * 24,), "ingest": ("a" * 24, "b c")}):
    ...     print(line)
    one key is listed in two roles: LDP_ADMIN_KEYS and LDP_INGEST_KEYS
    a key in LDP_INGEST_KEYS holds a character outside A-Z a-z 0-9 - . _ ~ + / =
    """
    problems: list[str] = []
    seen: dict[str, Role] = {}
    for role, listed in keys.items():
        for key in listed:
            if not set(key) <= _KEY_CHARS:
                problems.append(f"a key in {_VARIABLE[role]} holds a character outside "
                                "A-Z a-z 0-9 - . _ ~ + / =")
            other = seen.setdefault(key, role)
            if other != role:
                pair = sorted((_VARIABLE[other], _VARIABLE[role]))
                problems.append(f"one key is listed in two roles: {pair[0]} and {pair[1]}")
    return problems


class SettingsError(ValueError):
    """Settings refused; the message is one line and holds no value of a setting."""


class ListenSettings(BaseSettings):
    """How a service's HTTP server treats connections (``ldp_server.guard``), read by the
    launcher before the app exists; every service's settings include them.

    >>> ListenSettings(trusted_proxies="10.0.0.0/8, 127.0.0.1").trusted_proxy_list()
    ('10.0.0.0/8', '127.0.0.1')
    >>> ListenSettings().trusted_proxy_list()
    ()
    """

    model_config = SettingsConfigDict(
        env_prefix="LDP_", frozen=True, extra="ignore", hide_input_in_errors=True,
        use_attribute_docstrings=True,
    )

    trusted_proxies: str = ""
    """Comma-separated addresses or CIDRs of reverse proxies whose X-Forwarded-For is
    believed (the client address then comes from it); empty: that header is ignored."""
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    """Seconds a connection may take to send a request's headers (from connecting, or
    from the previous response); then it is closed."""
    body_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    """Seconds a request may take to send its body after its headers; then it is closed."""
    max_connections: int = Field(default=2048, ge=16, le=1_000_000)
    """Open connections per worker (bounded by its file limit too); one more closes the
    connection that has waited longest for its headers, else the new one."""

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, value: str) -> str:
        for item in split_keys(value):
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an address or CIDR") from None
        return value

    def trusted_proxy_list(self) -> tuple[str, ...]:
        """LDP_TRUSTED_PROXIES as a tuple (empty: X-Forwarded-For is ignored)."""
        return split_keys(self.trusted_proxies)


class ServerSettings(ListenSettings):
    """What both services read from the environment; see the module docstring."""

    env: Literal["dev", "prod"] = "dev"
    """dev or prod: prod refuses unsafe settings at start."""
    redis_url: str | None = None
    """redis://[:password@]host[:port][/db], rediss://... or unix:///path (dev default redis://127.0.0.1:6379/0)."""
    redis_cluster_nodes: str | None = None
    """host:port,host:port,... of a Redis Cluster, instead of LDP_REDIS_URL."""
    data_dir: str | None = None
    """Data folder of `ldp up` (keys, embedded Redis, logs); accepted and unused by the services."""
    redis_timeout_seconds: float = Field(default=2.0, gt=0)
    """Seconds a Redis call may wait (a write, or its reply) before the request answers
    503; a watchdog looks every half of it, so a stuck call fails after 1 to 1.5 times
    this (docs/performance.md)."""
    cors_origins: str = ""
    """Comma-separated origins whose pages may call the API; empty sends no CORS header."""
    metrics_key: SecretStr | None = None
    """Bearer key of GET /metrics; unset: open in dev, not served in prod."""

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> ServerSettings:
        if self.redis_url and self.redis_cluster_nodes:
            raise ValueError("set LDP_REDIS_URL or LDP_REDIS_CLUSTER_NODES, not both")
        if self.redis_url:
            check_redis_url(self.redis_url)
        if self.redis_cluster_nodes:
            check_cluster_nodes(self.redis_cluster_nodes)
        self.check()
        refused = key_list_problems(self.all_keys_by_role())
        metrics_key = self.metrics_key_value()
        if metrics_key is not None:
            if not set(metrics_key) <= _KEY_CHARS:
                refused.append("LDP_METRICS_KEY holds a character outside "
                               "A-Z a-z 0-9 - . _ ~ + / =")
            if any(metrics_key in keys for keys in self.all_keys_by_role().values()):
                refused.append("LDP_METRICS_KEY is also an API key")
        if self.env != "prod":
            if refused:
                raise ValueError("; ".join(refused))
            return self
        problems = self.unsafe()
        for role, keys in self.keys_by_role().items():
            if any(len(k) < MIN_KEY_LENGTH for k in keys):
                problems.append(f"an {role} key is shorter than {MIN_KEY_LENGTH} characters "
                                f"({_VARIABLE[role]})")
        if not (self.redis_url or self.redis_cluster_nodes):
            problems.append("no LDP_REDIS_URL or LDP_REDIS_CLUSTER_NODES")
        if metrics_key is not None and len(metrics_key) < MIN_KEY_LENGTH:
            problems.append(f"LDP_METRICS_KEY is shorter than {MIN_KEY_LENGTH} characters")
        if "*" in self.cors_origin_list():
            problems.append("LDP_CORS_ORIGINS is '*'")
        if problems:
            refused.append("LDP_ENV=prod refuses unsafe settings: " + "; ".join(problems))
        if refused:
            raise ValueError("; ".join(refused))
        return self

    # -- hooks of a service -------------------------------------------------------------

    def check(self) -> None:
        """Raise ValueError for a value refused in every mode (default: none)."""

    def unsafe(self) -> list[str]:
        """What ``LDP_ENV=prod`` refuses besides the shared checks (default: nothing)."""
        return []

    def keys_by_role(self) -> dict[Role, tuple[str, ...]]:
        """The clear keys of each role (hashed at once by ``ldp_server.keys.KeyRing``)."""
        return {}

    def all_keys_by_role(self) -> dict[Role, tuple[str, ...]]:
        """Every key the environment names, for the one-key-two-roles check (default:
        ``keys_by_role``; a service may add keys it does not serve but can see)."""
        return self.keys_by_role()

    # -- shared ---------------------------------------------------------------------------

    def metrics_key_value(self) -> str | None:
        """LDP_METRICS_KEY in clear, or None when unset or empty."""
        value = self.metrics_key.get_secret_value() if self.metrics_key else ""
        return value or None

    def cors_origin_list(self) -> list[str]:
        """LDP_CORS_ORIGINS as a list ("*" is refused in prod)."""
        return list(split_keys(self.cors_origins))

    def cluster_nodes(self) -> list[tuple[str, int]]:
        """LDP_REDIS_CLUSTER_NODES as (host, port) pairs."""
        out = []
        for item in split_keys(self.redis_cluster_nodes or ""):
            host, _, port = item.rpartition(":")
            out.append((host or "127.0.0.1", int(port)))
        return out

    @property
    def redis_target(self) -> str:
        """Where Redis is, for logs: the URL without its password, or the cluster nodes."""
        if self.redis_cluster_nodes:
            return "cluster:" + self.redis_cluster_nodes
        url = self.redis_url or DEFAULT_REDIS_URL
        scheme, sep, rest = url.partition("://")
        return scheme + sep + rest.rpartition("@")[2]

    def redis_client(self) -> RedisClient:
        """A new client for the configured Redis (dev default: ``DEFAULT_REDIS_URL``)."""
        nodes = self.cluster_nodes()
        return make_client(
            None if nodes else (self.redis_url or DEFAULT_REDIS_URL),
            nodes or None,
            self.redis_timeout_seconds,
        )


def load(cls: type[_S], **values: Any) -> _S:
    """``cls(**values)`` (and the environment), or SettingsError in one line.

    The line names the settings class and each refusal (which name variables,
    never values): what a service prints when it refuses to start.
    """
    try:
        return cls(**values)
    except ValidationError as exc:
        reasons = []
        for error in exc.errors():
            message = str(error.get("msg", "invalid"))
            message = message.removeprefix("Value error, ")
            where = ".".join(str(p) for p in error.get("loc", ()))
            reasons.append(f"LDP_{where.upper()}: {message}" if where else message)
        raise SettingsError(f"{cls.__name__} refused: " + "; ".join(reasons)) from None


def load_or_exit(cls: type[_S], service: str) -> _S:
    """``load(cls)`` from the environment, or exit with one line on stderr (status 1).

    What a service's ASGI factory calls: ``uvicorn --factory`` then stops with
    ``<service>: <Settings> refused: ...`` instead of a traceback.
    """
    try:
        return load(cls)
    except SettingsError as exc:
        raise SystemExit(f"{service}: {exc}") from None
