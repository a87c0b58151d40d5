"""Operator settings of the collector, from the environment (prefix ``LDP_``).

>>> s = Settings(env="dev", redis_url="redis://127.0.0.1:6379/0",
...              ingest_keys="k-ingest-0123456789abcdefgh")
>>> s.shards, s.retention_days, s.max_body_bytes
(4, 31, 1048576)
>>> sorted(s.keys_by_role())
['admin', 'analyst', 'ingest']

Outside dev mode (``LDP_ENV=prod``) unsafe values refuse to start: no admin
key, no ingest key, a key shorter than 24 characters, or no Redis configured.

Environment variables: ``LDP_REDIS_URL`` or ``LDP_REDIS_CLUSTER_NODES``
(host:port,...), ``LDP_ADMIN_KEYS``, ``LDP_INGEST_KEYS``, ``LDP_ANALYST_KEYS``
(comma-separated), ``LDP_DATA_DIR``, ``LDP_ENV``; tuning: ``LDP_SHARDS``,
``LDP_RETENTION_DAYS``, ``LDP_CLOCK_SKEW_EPOCHS``, ``LDP_RATE_LIMIT_PER_SECOND``
(requests per key; 0 disables), ``LDP_RATE_LIMIT_BURST``, ``LDP_MAX_BODY_BYTES``,
``LDP_MAX_INFLATED_BYTES``, ``LDP_SERVER_SECRET`` (hex; else one is created and
kept in Redis), ``LDP_LOG_LEVEL``, ``LDP_CORS_ORIGINS`` (comma-separated origins
that browsers may call from; empty, the default, sends no CORS header at all).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["DEFAULT_REDIS_URL", "MIN_KEY_LENGTH", "Role", "Settings", "split_keys"]

Role = Literal["ingest", "admin", "analyst"]
MIN_KEY_LENGTH = 24
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def split_keys(raw: str) -> tuple[str, ...]:
    """'a, b,,c' -> ('a', 'b', 'c')."""
    return tuple(k.strip() for k in raw.split(",") if k.strip())


class Settings(BaseSettings):
    """Everything an operator can set; see the module docstring."""

    model_config = SettingsConfigDict(
        env_prefix="LDP_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    env: Literal["dev", "prod"] = "dev"
    redis_url: str | None = None
    redis_cluster_nodes: str | None = None
    admin_keys: SecretStr = SecretStr("")
    ingest_keys: SecretStr = SecretStr("")
    analyst_keys: SecretStr = SecretStr("")
    data_dir: str | None = None
    shards: int = Field(default=4, ge=1, le=256)
    retention_days: int = Field(default=31, ge=1, le=3660)
    clock_skew_epochs: int = Field(default=1, ge=0, le=24)
    rate_limit_per_second: float = Field(default=1000.0, ge=0)
    rate_limit_burst: int = Field(default=2000, ge=1)
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    max_inflated_bytes: int = Field(default=4 << 20, ge=1024)
    max_spec_bytes: int = Field(default=16 << 20, ge=1024)
    server_secret: SecretStr | None = None
    redis_timeout_seconds: float = Field(default=2.0, gt=0)
    log_level: str = "INFO"
    cors_origins: str = ""

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Settings:
        if self.redis_url and self.redis_cluster_nodes:
            raise ValueError("set LDP_REDIS_URL or LDP_REDIS_CLUSTER_NODES, not both")
        if self.server_secret is not None:
            try:
                secret = bytes.fromhex(self.server_secret.get_secret_value())
            except ValueError:
                raise ValueError("LDP_SERVER_SECRET must be hex") from None
            if len(secret) < 16:
                raise ValueError("LDP_SERVER_SECRET must hold at least 16 bytes")
        if self.env != "prod":
            return self
        problems = []
        by_role = self.keys_by_role()
        if not by_role["admin"]:
            problems.append("LDP_ADMIN_KEYS is empty")
        if not by_role["ingest"]:
            problems.append("LDP_INGEST_KEYS is empty")
        for role, keys in by_role.items():
            if any(len(k) < MIN_KEY_LENGTH for k in keys):
                problems.append(f"an {role} key is shorter than {MIN_KEY_LENGTH} characters")
        if not (self.redis_url or self.redis_cluster_nodes):
            problems.append("no LDP_REDIS_URL or LDP_REDIS_CLUSTER_NODES")
        if "*" in self.cors_origin_list():
            problems.append("LDP_CORS_ORIGINS is '*'")
        if problems:
            raise ValueError("LDP_ENV=prod refuses unsafe settings: " + "; ".join(problems))
        return self

    def keys_by_role(self) -> dict[Role, tuple[str, ...]]:
        """The clear keys of each role (hashed at once by ``auth.KeyRing``)."""
        return {
            "ingest": split_keys(self.ingest_keys.get_secret_value()),
            "admin": split_keys(self.admin_keys.get_secret_value()),
            "analyst": split_keys(self.analyst_keys.get_secret_value()),
        }

    def cors_origin_list(self) -> list[str]:
        """LDP_CORS_ORIGINS as a list ("*" is refused in prod)."""
        return list(split_keys(self.cors_origins))

    def secret_bytes(self) -> bytes | None:
        """LDP_SERVER_SECRET as bytes, if set."""
        if self.server_secret is None:
            return None
        return bytes.fromhex(self.server_secret.get_secret_value())

    @property
    def redis_target(self) -> str:
        """Where Redis is, for logs: the URL without its password, or the cluster nodes."""
        if self.redis_cluster_nodes:
            return "cluster:" + self.redis_cluster_nodes
        url = self.redis_url or DEFAULT_REDIS_URL
        scheme, sep, rest = url.partition("://")
        return scheme + sep + rest.rpartition("@")[2]

    def cluster_nodes(self) -> list[tuple[str, int]]:
        """LDP_REDIS_CLUSTER_NODES as (host, port) pairs."""
        out = []
        for item in split_keys(self.redis_cluster_nodes or ""):
            host, _, port = item.rpartition(":")
            out.append((host or "127.0.0.1", int(port)))
        return out
