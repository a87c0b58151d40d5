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
...     for part in str(exc).split("; "):
...         print(part)
Demo refused: LDP_ENV=prod refuses unsafe settings: an analyst key is shorter than 24 characters
no LDP_REDIS_URL or LDP_REDIS_CLUSTER_NODES
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ldp_server.redis_client import RedisClient, make_client

__all__ = [
    "DEFAULT_REDIS_URL",
    "MIN_KEY_LENGTH",
    "Role",
    "ServerSettings",
    "SettingsError",
    "load",
    "load_or_exit",
    "split_keys",
]

Role = Literal["ingest", "admin", "analyst"]
MIN_KEY_LENGTH = 24
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

_S = TypeVar("_S", bound="ServerSettings")


def split_keys(raw: str) -> tuple[str, ...]:
    """'a, b,,c' -> ('a', 'b', 'c')."""
    return tuple(k.strip() for k in raw.split(",") if k.strip())


class SettingsError(ValueError):
    """Settings refused; the message is one line and holds no value of a setting."""


class ServerSettings(BaseSettings):
    """What both services read from the environment; see the module docstring."""

    model_config = SettingsConfigDict(
        env_prefix="LDP_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    env: Literal["dev", "prod"] = "dev"
    redis_url: str | None = None
    redis_cluster_nodes: str | None = None
    data_dir: str | None = None
    redis_timeout_seconds: float = Field(default=2.0, gt=0)
    cors_origins: str = ""

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> ServerSettings:
        if self.redis_url and self.redis_cluster_nodes:
            raise ValueError("set LDP_REDIS_URL or LDP_REDIS_CLUSTER_NODES, not both")
        self.check()
        if self.env != "prod":
            return self
        problems = self.unsafe()
        for role, keys in self.keys_by_role().items():
            if any(len(k) < MIN_KEY_LENGTH for k in keys):
                problems.append(f"an {role} key is shorter than {MIN_KEY_LENGTH} characters")
        if not (self.redis_url or self.redis_cluster_nodes):
            problems.append("no LDP_REDIS_URL or LDP_REDIS_CLUSTER_NODES")
        if "*" in self.cors_origin_list():
            problems.append("LDP_CORS_ORIGINS is '*'")
        if problems:
            raise ValueError("LDP_ENV=prod refuses unsafe settings: " + "; ".join(problems))
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

    # -- shared ---------------------------------------------------------------------------

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
