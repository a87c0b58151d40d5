"""Operator settings of the collector, from the environment (prefix ``LDP_``).

>>> s = Settings(env="dev", redis_url="redis://127.0.0.1:6379/0",
...              ingest_keys="k-ingest-0123456789abcdefgh")
>>> s.shards, s.retention_days, s.max_body_bytes
(4, 31, 1048576)
>>> sorted(s.keys_by_role())
['admin', 'analyst', 'ingest']
>>> "k-ingest" in repr(s)
False

Outside dev mode (``LDP_ENV=prod``) unsafe values refuse to start: no admin
key, no ingest key, a key shorter than 24 characters, no Redis configured,
``LDP_CORS_ORIGINS=*``, no ``LDP_TOKEN_KEY_FILE``, or no ``LDP_SERVER_SECRET``
(in dev the digest key is created once and kept in Redis, so a Redis dump
would hold the key of its own digests; in prod it must come from the operator).

Environment variables: ``LDP_REDIS_URL`` or ``LDP_REDIS_CLUSTER_NODES``
(host:port,...), ``LDP_ADMIN_KEYS``, ``LDP_INGEST_KEYS``, ``LDP_ANALYST_KEYS``
(comma-separated), ``LDP_DATA_DIR``, ``LDP_ENV``; tuning: ``LDP_SHARDS``,
``LDP_RETENTION_DAYS`` (reports older are refused), ``LDP_TALLY_RETENTION_DAYS``
(counters expire that long after their epoch; 400), ``LDP_CLOCK_SKEW_EPOCHS``,
``LDP_RATE_LIMIT_PER_SECOND`` (requests per client address, shared by every
worker through Redis; 0 disables), ``LDP_RATE_LIMIT_BURST``, ``LDP_MAX_BODY_BYTES``,
``LDP_MAX_INFLATED_BYTES``, ``LDP_MAX_METRICS`` (1000) and ``LDP_MAX_CATALOG_BYTES``
(8 MiB; the catalog every device fetches), ``LDP_SERVER_SECRET`` (hex, >= 16 bytes; required in
prod, else one is created and kept in Redis), ``LDP_LOG_LEVEL``,
``LDP_TOKEN_KEY_FILE`` (PEM, PKCS#8 RSA >= 2048 bits: the report-token
issuer key, ``collector.tokens``; required in prod, else one is created and
kept in Redis), ``LDP_ACCEPTANCE_HOURS`` (how long after its end an epoch
accepts reports, default 96: later reports get ``epoch_expired``, and the
per-report state of the epoch expires then), ``LDP_TOKEN_AHEAD_HOURS``
(how far ahead devices may get tokens, default 48),
``LDP_TOKEN_UNITS_PER_REQUEST`` (default 256),
``LDP_CORS_ORIGINS`` (comma-separated origins that browsers may call from;
empty, the default, sends no CORS header at all).  The shared fields and
checks are ``ldp_server.settings.ServerSettings``'.
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from ldp_server.settings import (
    DEFAULT_REDIS_URL,
    MIN_KEY_LENGTH,
    Role,
    ServerSettings,
    split_keys,
)

__all__ = ["DEFAULT_REDIS_URL", "MIN_KEY_LENGTH", "Role", "Settings", "split_keys"]


class Settings(ServerSettings):
    """Everything an operator can set; see the module docstring."""

    admin_keys: SecretStr = SecretStr("")
    """Comma-separated admin keys (register metrics)."""
    ingest_keys: SecretStr = SecretStr("")
    """Comma-separated ingest keys (devices: fetch specs, send reports)."""
    analyst_keys: SecretStr = SecretStr("")
    """Comma-separated analyst keys (also read by the aggregator)."""
    shards: int = Field(default=4, ge=1, le=256)
    """Tally shards per metric-epoch (spreads hot keys; 1..256)."""
    retention_days: int = Field(default=31, ge=1, le=3660)
    """Days back a report may be dated (older ones are refused)."""
    tally_retention_days: int = Field(default=400, ge=1, le=3660)
    """Days after its epoch a tally counter expires in Redis."""
    clock_skew_epochs: int = Field(default=1, ge=0, le=24)
    """Epochs into the future a report may claim (device clocks)."""
    rate_limit_per_second: float = Field(default=1000.0, ge=0)
    """Requests per second per client address, shared by every worker through Redis; 0 disables."""
    rate_limit_burst: int = Field(default=2000, ge=1)
    """Requests a client may send at once before the rate applies."""
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    """Largest request body as sent (413 above)."""
    max_inflated_bytes: int = Field(default=4 << 20, ge=1024)
    """Largest body after gzip inflation (413 above)."""
    max_spec_bytes: int = Field(default=16 << 20, ge=1024)
    """Largest metric spec body."""
    max_metrics: int = Field(default=1000, ge=1)
    """Most metrics that can be registered."""
    max_catalog_bytes: int = Field(default=8 << 20, ge=1024)
    """Largest catalog (GET /v1/metrics, fetched by every device)."""
    server_secret: SecretStr | None = None
    """Hex, >= 16 bytes: the key of the dedupe digests (dev: made once, kept in Redis)."""
    log_level: str = "INFO"
    """Level of the JSON log (DEBUG, INFO, WARNING, ERROR)."""
    token_key_file: str | None = None
    """PEM (PKCS#8 RSA >= 2048 bits): the report-token issuer key (required in prod)."""
    acceptance_hours: int = Field(default=96, ge=1, le=24 * 366)
    """Reports are accepted this long after their epoch ends (skew and late delivery)."""
    token_ahead_hours: int = Field(default=48, ge=0, le=24 * 366)
    """How far ahead devices may get report tokens."""
    token_units_per_request: int = Field(default=256, ge=1, le=4096)
    """Most (period, epoch) units one token request may ask for."""

    def check(self) -> None:
        if self.server_secret is not None:
            try:
                secret = bytes.fromhex(self.server_secret.get_secret_value())
            except ValueError:
                raise ValueError("LDP_SERVER_SECRET must be hex") from None
            if len(secret) < 16:
                raise ValueError("LDP_SERVER_SECRET must hold at least 16 bytes")

    def unsafe(self) -> list[str]:
        problems = []
        by_role = self.keys_by_role()
        if not by_role["admin"]:
            problems.append("LDP_ADMIN_KEYS is empty")
        if not by_role["ingest"]:
            problems.append("LDP_INGEST_KEYS is empty")
        if self.server_secret is None:
            problems.append("LDP_SERVER_SECRET is not set (hex, >= 16 bytes: the digest key)")
        if self.token_key_file is None:
            problems.append("LDP_TOKEN_KEY_FILE is not set (PEM RSA key of the token issuer)")
        return problems

    def keys_by_role(self) -> dict[Role, tuple[str, ...]]:
        """The clear keys of each role (hashed at once by ``ldp_server.keys.KeyRing``)."""
        return {
            "ingest": split_keys(self.ingest_keys.get_secret_value()),
            "admin": split_keys(self.admin_keys.get_secret_value()),
            "analyst": split_keys(self.analyst_keys.get_secret_value()),
        }

    def secret_bytes(self) -> bytes | None:
        """LDP_SERVER_SECRET as bytes, if set."""
        if self.server_secret is None:
            return None
        return bytes.fromhex(self.server_secret.get_secret_value())
