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
``LDP_TOKEN_UNITS_PER_REQUEST`` (default: the ahead window's epochs),
``LDP_INSTALLS_PER_PREFIX_PER_HOUR`` (default 1000),
``LDP_REDIS_MEMORY_HIGH_SHARE`` (default 0.9),
``LDP_DEVICE_AUTH`` (how the token issuer knows a device: ``install_key``, the
default, or ``jwt``, the app's login token, ``collector.device_auth``) with
``LDP_JWT_JWKS_URL`` or ``LDP_JWT_JWKS_FILE``, ``LDP_JWT_ISSUER``,
``LDP_JWT_AUDIENCE`` (all required with ``jwt``), ``LDP_JWT_ALGORITHMS``
(``RS256,ES256``; asymmetric only), ``LDP_JWT_LEEWAY_SECONDS``,
``LDP_JWT_JWKS_TTL_SECONDS`` and ``LDP_JWT_JWKS_REFETCH_SECONDS``,
install registration (``collector.routers.installs``): ``LDP_INSTALL_POW_N``
(2048), ``LDP_INSTALL_POW_R`` (8), ``LDP_INSTALL_POW_BITS`` (8; 0 refused in prod),
``LDP_INSTALL_CHALLENGE_TTL_SECONDS`` (600),
``LDP_INSTALL_REGISTRATIONS_PER_PREFIX_PER_HOUR`` (20; 0 disables),
``LDP_INSTALL_REGISTRATION_DAYS`` (400), ``LDP_INSTALL_REGISTRATION_REQUIRED``
(true: the token issuer signs only for registered installs; prod refuses false
unless ``LDP_DEVICE_AUTH=jwt``, where the account is the Sybil bound),
``LDP_CORS_ORIGINS`` (comma-separated origins that browsers may call from;
empty, the default, sends no CORS header at all).  The shared fields and
checks are ``ldp_server.settings.ServerSettings``'.
"""

from __future__ import annotations

import ipaddress
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr

from ldp_core.metric import EPOCH_SECONDS
from ldp_core.pow import PowParams
from ldp_server.settings import (
    DEFAULT_REDIS_URL,
    MIN_KEY_LENGTH,
    Role,
    ServerSettings,
    split_keys,
)

__all__ = ["DEFAULT_REDIS_URL", "JWT_ALGORITHMS", "MIN_KEY_LENGTH", "Role", "Settings",
           "is_loopback_url", "split_keys"]

#: Signature algorithms a device's login token may use: asymmetric ones only (an HS*
#: key would be the public JWKS itself, and ``none`` is no signature).
JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                  "ES256", "ES384", "ES512", "EdDSA")


def is_loopback_url(url: str) -> bool:
    """Whether the URL's host is a loopback address or ``localhost``.

    >>> is_loopback_url("http://127.0.0.1:8080/jwks"), is_loopback_url("http://idp.example/")
    (True, False)
    """
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    token_units_per_request: int | None = Field(default=None, ge=1, le=4096)
    """Most units one token request gets signed (the rest: unit_limit, asked again);
    default: the epochs of the ahead window, per epoch length (52 with 48 hours)."""
    installs_per_prefix_per_hour: int = Field(default=1000, ge=0)
    """New installs the token issuer registers per client network (/24 IPv4, /48 IPv6)
    and hour, with as many at once (429 after); loopback is not counted in dev; 0 disables."""
    redis_memory_high_share: float = Field(default=0.9, gt=0, le=1)
    """Share of Redis's maxmemory above which /readyz answers 503 store_memory_low and
    the token issuer registers no new install; 1 disables (no effect without maxmemory)."""
    device_auth: Literal["install_key", "jwt"] = "install_key"
    """How the token issuer knows a device: install_key (a random key per install) or jwt
    (the app's login token in LDP-Device-Token: one token per account and epoch)."""
    jwt_jwks_url: str | None = None
    """With jwt: the JWKS of the app's identity provider (https; http only to loopback in prod)."""
    jwt_jwks_file: str | None = None
    """With jwt: the JWKS as a file instead of LDP_JWT_JWKS_URL (read again like the URL)."""
    jwt_issuer: str | None = None
    """With jwt: the iss every device token must carry (required)."""
    jwt_audience: str | None = None
    """With jwt: the aud every device token must carry, e.g. the app's client id (required)."""
    jwt_algorithms: str = "RS256,ES256"
    """With jwt: accepted signature algorithms, comma-separated (RS*, PS*, ES*, EdDSA only)."""
    jwt_leeway_seconds: int = Field(default=60, ge=0, le=600)
    """With jwt: clock skew allowed on exp, nbf and iat."""
    jwt_jwks_ttl_seconds: int = Field(default=3600, ge=1, le=7 * 86400)
    """With jwt: how long fetched JWKS keys are used before they are fetched again."""
    jwt_jwks_refetch_seconds: float = Field(default=30.0, ge=0, le=3600)
    """With jwt: least seconds between fetches for a token whose kid is unknown (rotation)."""

    # --- Install registration: the proof of work (collector.routers.installs, ldp_core.pow)
    install_pow_n: int = Field(default=2048, ge=2, le=1 << 20)
    """scrypt N of the install proof of work (a power of two; memory 128*N*r bytes)."""
    install_pow_r: int = Field(default=8, ge=1, le=32)
    """scrypt r of the install proof of work."""
    install_pow_bits: int = Field(default=8, ge=0, le=40)
    """Leading zero bits a proof needs: 2^bits scrypt evaluations expected (~1 s of one
    core at the defaults); 0 (no work) is refused in prod."""
    install_challenge_ttl_seconds: int = Field(default=600, ge=10, le=86400)
    """How long a registration challenge may be solved and sent back."""
    install_registrations_per_prefix_per_hour: int = Field(default=20, ge=0)
    """New registrations per client network (/24 IPv4, /48 IPv6) and hour, with as many
    at once (429 registration_limited after); 0 disables."""
    install_registration_days: int = Field(default=400, ge=1, le=3660)
    """How long a registration is kept (then the install registers again, paying again)."""
    install_registration_required: bool = True
    """Whether the token issuer signs only for registered installs (403 install_unregistered
    otherwise; install-key device auth only: with jwt the account bounds the subjects).
    Prod refuses false with install-key auth: a fake install would get tokens free."""

    def install_pow_params(self) -> PowParams:
        """The difficulty new challenges carry (p = 1).

        >>> Settings().install_pow_params()
        PowParams(n=2048, r=8, p=1, bits=8)
        """
        return PowParams(n=self.install_pow_n, r=self.install_pow_r, p=1,
                         bits=self.install_pow_bits)
    # --- end of install registration

    def check(self) -> None:
        if self.server_secret is not None:
            try:
                secret = bytes.fromhex(self.server_secret.get_secret_value())
            except ValueError:
                raise ValueError("LDP_SERVER_SECRET must be hex") from None
            if len(secret) < 16:
                raise ValueError("LDP_SERVER_SECRET must hold at least 16 bytes")
        if self.device_auth == "jwt":
            self._check_jwt()
        try:
            self.install_pow_params()
        except ValueError as exc:
            raise ValueError(f"LDP_INSTALL_POW_N / LDP_INSTALL_POW_R: {exc}") from None

    def _check_jwt(self) -> None:
        problems = []
        if (self.jwt_jwks_url is None) == (self.jwt_jwks_file is None):
            problems.append("LDP_DEVICE_AUTH=jwt needs exactly one of LDP_JWT_JWKS_URL and "
                            "LDP_JWT_JWKS_FILE")
        if self.jwt_jwks_url is not None and \
                urlsplit(self.jwt_jwks_url).scheme not in ("https", "http"):
            problems.append("LDP_JWT_JWKS_URL must be https:// (http:// only to loopback in prod)")
        if not self.jwt_issuer:
            problems.append("LDP_DEVICE_AUTH=jwt needs LDP_JWT_ISSUER (the iss of the app's "
                            "login tokens)")
        if not self.jwt_audience:
            problems.append("LDP_DEVICE_AUTH=jwt needs LDP_JWT_AUDIENCE (the aud of the app's "
                            "login tokens)")
        algorithms = self.jwt_algorithm_list()
        if not algorithms or not set(algorithms) <= set(JWT_ALGORITHMS):
            problems.append("LDP_JWT_ALGORITHMS must list only " + ", ".join(JWT_ALGORITHMS))
        if problems:
            raise ValueError("; ".join(problems))

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
        url = self.jwt_jwks_url
        if self.device_auth == "jwt" and url is not None and urlsplit(url).scheme == "http" \
                and not is_loopback_url(url):
            problems.append("LDP_JWT_JWKS_URL is plain http to a host that is not loopback")
        if self.install_pow_bits == 0:
            problems.append("LDP_INSTALL_POW_BITS is 0 (no proof of work: fake installs are free)")
        if not self.install_registration_required and self.device_auth == "install_key":
            problems.append("LDP_INSTALL_REGISTRATION_REQUIRED is false with "
                            "LDP_DEVICE_AUTH=install_key (fake installs get tokens free)")
        return problems

    def units_per_request(self) -> int:
        """LDP_TOKEN_UNITS_PER_REQUEST, by default the units of the ahead window: the
        current epoch and those that start within it, of each epoch length.

        >>> Settings(token_ahead_hours=48).units_per_request()
        52
        """
        if self.token_units_per_request is not None:
            return self.token_units_per_request
        ahead = self.token_ahead_hours * 3600
        return sum(ahead // seconds + 1 for seconds in EPOCH_SECONDS.values())

    def jwt_algorithm_list(self) -> tuple[str, ...]:
        """LDP_JWT_ALGORITHMS as a tuple."""
        return split_keys(self.jwt_algorithms)

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
