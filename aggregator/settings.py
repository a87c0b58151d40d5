"""Operator settings of the aggregator, from the environment (prefix ``LDP_``).

>>> s = Settings(env="dev", redis_url="redis://127.0.0.1:6379/0",
...              analyst_keys="k-analyst-0123456789abcdefgh")
>>> s.keys()
('k-analyst-0123456789abcdefgh',)
>>> "k-analyst" in repr(s)
False

The aggregator reads Redis and never writes it.  Environment variables:
``LDP_REDIS_URL`` or ``LDP_REDIS_CLUSTER_NODES`` (host:port,...),
``LDP_ANALYST_KEYS`` (comma-separated; ``Authorization: Bearer <key>``),
``LDP_ENV`` (dev | prod), ``LDP_DATA_DIR`` (unused here, accepted),
``LDP_REDIS_TIMEOUT_SECONDS``, ``LDP_MAX_EPOCHS`` (largest window in epochs),
``LDP_MAX_READ_COUNTERS`` (stored counters one request reads, over its epochs),
``LDP_SERIES_PAGE_EPOCHS`` (most points per series page),
``LDP_CORS_ORIGINS`` (comma-separated origins whose pages may call the API with
an analyst key; empty, the default, sends no CORS header at all).  The shared
fields and checks are ``ldp_server.settings.ServerSettings``'.

With ``LDP_ENV=prod`` unsafe values refuse to start: no analyst key, a key
shorter than 24 characters, no Redis configured, or ``LDP_CORS_ORIGINS=*``.
In dev a missing Redis setting means ``redis://127.0.0.1:6379/0``, and with no
analyst key every request is refused (401): there is no open mode.
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from aggregator.paging import ReadBound
from ldp_server.settings import Role, ServerSettings, split_keys

__all__ = ["Settings"]


class Settings(ServerSettings):
    """Everything an operator can set; see the module docstring."""

    analyst_keys: SecretStr = SecretStr("")
    """Comma-separated analyst keys (Authorization: Bearer, dashboard sign-in)."""
    #: Not served here: read only to refuse an analyst key that is also one of these.
    admin_keys: SecretStr = SecretStr("")
    """Read by the aggregator only to refuse an analyst key that is also an admin key."""
    ingest_keys: SecretStr = SecretStr("")
    """Read by the aggregator only to refuse an analyst key that is also an ingest key."""
    max_epochs: int = Field(default=10_000, ge=1, le=1_000_000)
    """Largest window of a query, in epochs."""
    max_read_counters: int = Field(default=1 << 20, ge=1024, le=1 << 30)
    """Stored counters one request reads, summed over its epochs; more: window_too_costly."""
    series_page_epochs: int = Field(default=1000, ge=1, le=100_000)
    """Most epochs per page of a series (series=epoch&limit=&cursor=, next link)."""

    @property
    def read_bound(self) -> ReadBound:
        """What one request may read (``aggregator.paging``)."""
        return ReadBound(self.max_read_counters, self.series_page_epochs)

    def unsafe(self) -> list[str]:
        return [] if self.keys() else ["LDP_ANALYST_KEYS is empty"]

    def keys_by_role(self) -> dict[Role, tuple[str, ...]]:
        return {"analyst": self.keys()}

    def all_keys_by_role(self) -> dict[Role, tuple[str, ...]]:
        """The analyst keys and, when the environment holds them, the collector's."""
        return {
            "analyst": self.keys(),
            "admin": split_keys(self.admin_keys.get_secret_value()),
            "ingest": split_keys(self.ingest_keys.get_secret_value()),
        }

    def keys(self) -> tuple[str, ...]:
        """The analyst keys in clear (hashed at once by ``ldp_server.keys.KeyRing``)."""
        return split_keys(self.analyst_keys.get_secret_value())

    @property
    def secure_cookies(self) -> bool:
        """Dashboard cookies carry ``Secure`` in prod (served behind TLS)."""
        return self.env == "prod"
