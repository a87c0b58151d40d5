"""Operator settings of the aggregator, from the environment (prefix ``LDP_``).

>>> s = Settings(env="dev", redis_url="redis://127.0.0.1:6379/0",
...              analyst_keys="k-analyst-0123456789abcdefgh")
>>> s.keys()
('k-analyst-0123456789abcdefgh',)

The aggregator reads Redis and never writes it.  Environment variables:
``LDP_REDIS_URL`` or ``LDP_REDIS_CLUSTER_NODES`` (host:port,...),
``LDP_ANALYST_KEYS`` (comma-separated; ``Authorization: Bearer <key>``),
``LDP_ENV`` (dev | prod), ``LDP_DATA_DIR`` (unused here, accepted),
``LDP_REDIS_TIMEOUT_SECONDS``, ``LDP_MAX_EPOCHS`` (largest window in epochs),
``LDP_CORS_ORIGINS`` (comma-separated origins whose pages may call the API with
an analyst key; empty, the default, sends no CORS header at all).

With ``LDP_ENV=prod`` unsafe values refuse to start: no analyst key, a key
shorter than 24 characters, no Redis configured, or ``LDP_CORS_ORIGINS=*``.
In dev a missing Redis setting means ``redis://127.0.0.1:6379/0``, and with no
analyst key every request is refused (401): there is no open mode.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["DEV_REDIS_URL", "MIN_KEY_LENGTH", "Settings", "split_list"]

MIN_KEY_LENGTH = 24
DEV_REDIS_URL = "redis://127.0.0.1:6379/0"


def split_list(raw: str) -> tuple[str, ...]:
    """'a, b,,c' -> ('a', 'b', 'c')."""
    return tuple(k.strip() for k in raw.split(",") if k.strip())


class Settings(BaseSettings):
    """Everything an operator can set; see the module docstring."""

    model_config = SettingsConfigDict(env_prefix="LDP_", frozen=True, extra="ignore")

    env: Literal["dev", "prod"] = "dev"
    redis_url: str | None = None
    redis_cluster_nodes: str | None = None
    analyst_keys: str = ""
    data_dir: str | None = None
    redis_timeout_seconds: float = Field(default=2.0, gt=0)
    max_epochs: int = Field(default=10_000, ge=1, le=1_000_000)
    cors_origins: str = ""

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Settings:
        if self.redis_url and self.redis_cluster_nodes:
            raise ValueError("set LDP_REDIS_URL or LDP_REDIS_CLUSTER_NODES, not both")
        if self.env != "prod":
            return self
        problems = []
        if not self.keys():
            problems.append("LDP_ANALYST_KEYS is empty")
        if any(len(k) < MIN_KEY_LENGTH for k in self.keys()):
            problems.append(f"an analyst key is shorter than {MIN_KEY_LENGTH} characters")
        if not (self.redis_url or self.redis_cluster_nodes):
            problems.append("no LDP_REDIS_URL or LDP_REDIS_CLUSTER_NODES")
        if "*" in self.cors_origin_list():
            problems.append("LDP_CORS_ORIGINS is '*'")
        if problems:
            raise ValueError("LDP_ENV=prod refuses unsafe settings: " + "; ".join(problems))
        return self

    def keys(self) -> tuple[str, ...]:
        """The analyst keys in clear (hashed at once by ``auth.KeyRing``)."""
        return split_list(self.analyst_keys)

    def cors_origin_list(self) -> list[str]:
        """LDP_CORS_ORIGINS as a list ("*" is refused in prod)."""
        return list(split_list(self.cors_origins))

    def cluster_nodes(self) -> list[tuple[str, int]]:
        """LDP_REDIS_CLUSTER_NODES as (host, port) pairs."""
        out = []
        for item in split_list(self.redis_cluster_nodes or ""):
            host, _, port = item.rpartition(":")
            out.append((host or "127.0.0.1", int(port)))
        return out

    @property
    def secure_cookies(self) -> bool:
        """Dashboard cookies carry ``Secure`` in prod (served behind TLS)."""
        return self.env == "prod"
