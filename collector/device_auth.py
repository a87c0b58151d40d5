"""Account-backed devices: the token issuer knows a device by the app's login token.

``JwtDeviceAuth`` is a ``collector.tokens.DeviceAuth`` for apps that have
accounts.  The device sends the app's OIDC / JWT login token with its token
request (``LDP-Device-Token: <JWT>``, next to the ingest key and the install
key) and the issuer checks it against the identity provider's JWKS
(``LDP_JWT_JWKS_URL`` or ``LDP_JWT_JWKS_FILE``): the signature (an
asymmetric algorithm of ``LDP_JWT_ALGORITHMS``, never ``none`` or ``HS*``),
``exp``, ``nbf`` and ``iat`` (with ``LDP_JWT_LEEWAY_SECONDS``), ``iss`` and
``aud``.  The subject is ``BLAKE2b(iss, sub; key=server secret)`` (16 bytes),
so the limit of one token per subject and unit becomes one per *account*:
a second install of the account asking for the same unit with another blinded
message gets ``token_limit``, and Sybils cost one account each.  Neither the
token nor ``sub`` is stored or logged.

A refused token is 401 ``invalid_device`` with a ``reason``
(``ldp_server.problems.REASONS``): ``device_token_missing``,
``device_token_malformed``, ``device_token_algorithm``,
``device_token_unknown_key``, ``device_token_signature``,
``device_token_expired``, ``device_token_not_yet_valid``,
``device_token_issuer``, ``device_token_audience``, ``device_token_claims``.
JWKS that cannot be read while no usable key is known answer 503
``device_auth_unavailable`` (Retry-After).

Keys (``JwksCache``) are fetched in a worker thread (PyJWT's ``PyJWKClient``
is blocking), kept ``LDP_JWT_JWKS_TTL_SECONDS``, and fetched again at once
for a ``kid`` not among them (a rotation), at most once per
``LDP_JWT_JWKS_REFETCH_SECONDS``: a flood of made-up kids costs one fetch per
interval, not one per request.

>>> account_subject(b"k" * 16, "https://idp.example", "user-1").hex()[:8]
'91302a2a'
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from hashlib import blake2b
from pathlib import Path
from typing import Any

import jwt
from jwt import PyJWK, PyJWKClient
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from collector.logs import log_event
from collector.settings import JWT_ALGORITHMS, Settings
from ldp_server.problems import Problem

__all__ = [
    "DEVICE_TOKEN_HEADER",
    "JwksCache",
    "JwtDeviceAuth",
    "account_subject",
    "device_auth_from",
]

DEVICE_TOKEN_HEADER = "ldp-device-token"  # noqa: S105 - a header name
#: Longest device token read (an ID token of a large provider is 1-2 KiB).
MAX_TOKEN_CHARS = 8192
#: Claims every device token must carry.
REQUIRED_CLAIMS = ("exp", "iat", "iss", "aud", "sub")
#: Seconds a JWKS fetch may take.
FETCH_TIMEOUT = 5.0
#: The JWK a header's alg needs: (kty, crv or None).
_KEY_OF: dict[str, tuple[str, frozenset[str] | None]] = {
    **{a: ("RSA", None) for a in ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")},
    "ES256": ("EC", frozenset({"P-256"})), "ES384": ("EC", frozenset({"P-384"})),
    "ES512": ("EC", frozenset({"P-521"})), "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
}
assert set(_KEY_OF) == set(JWT_ALGORITHMS)


def account_subject(secret: bytes, issuer: str, sub: str) -> bytes:
    """The opaque subject of an account: keyed BLAKE2b of (iss, sub), 16 bytes."""
    data = json.dumps([issuer, sub], ensure_ascii=False).encode()
    return blake2b(data, key=secret, digest_size=16, person=b"ldp-account").digest()


def _refused(reason: str, detail: str) -> Problem:
    return Problem(401, "invalid_device", detail, reason=reason)


class JwksCache:
    """The identity provider's keys: ``load()`` reads them (URL or file, in a worker
    thread), ``find(kid, alg)`` answers from memory and fetches again when they are
    older than ``ttl`` or lack ``kid`` (then at most once per ``refetch`` seconds).

    ``fetches`` counts the reads (successful or not), for tests and logs.
    """

    def __init__(self, load: Callable[[], Any], *, ttl: float, refetch: float,
                 clock: Callable[[], float] = time.monotonic,
                 log: logging.Logger | None = None, source: str = "") -> None:
        self._load, self.ttl, self.refetch, self._clock = load, ttl, refetch, clock
        self._log, self.source = log, source
        self._keys: dict[str | None, list[Mapping[str, Any]]] = {}
        self._fetched_at = float("-inf")
        self._tried_at = float("-inf")
        self._lock = asyncio.Lock()
        self._built: dict[tuple[int, str], PyJWK] = {}
        self.fetches = 0

    @classmethod
    def of_url(cls, url: str, **kw: Any) -> JwksCache:
        client = PyJWKClient(url, cache_jwk_set=False, timeout=FETCH_TIMEOUT,
                             headers={"User-Agent": "ldp-telemetry-collector"})
        return cls(client.fetch_data, source=url.partition("?")[0], **kw)

    @classmethod
    def of_file(cls, path: str | Path, **kw: Any) -> JwksCache:
        file = Path(path)
        return cls(lambda: json.loads(file.read_text(encoding="utf-8")), source=str(file), **kw)

    async def find(self, kid: str | None, alg: str) -> list[PyJWK]:
        """The keys a token of this kid (None: any) and alg may be signed with (maybe []).

        Raises 503 ``device_auth_unavailable`` while no key could be read yet."""
        now = self._clock()
        due = now - self._fetched_at >= self.ttl or (kid is not None and kid not in self._keys)
        if due and now - self._tried_at >= self.refetch:
            await self._fetch(self._tried_at)
        if not self._keys:
            raise Problem(503, "device_auth_unavailable",
                          f"the keys device tokens are checked with (JWKS at {self.source}) "
                          "could not be read; retry later", headers={"Retry-After": "5"})
        return self._candidates(kid, alg)

    async def _fetch(self, seen: float) -> None:
        async with self._lock:
            if self._tried_at != seen:
                return  # another request fetched while this one waited
            self._tried_at = self._clock()
            self.fetches += 1
            try:
                data = await run_in_threadpool(self._load)
                keys = _jwks(data)
            except (OSError, ValueError, TypeError, jwt.PyJWTError) as exc:
                if self._log is not None:
                    log_event(self._log, "jwks_unavailable", logging.WARNING,
                              source=self.source, error=type(exc).__name__)
                return  # keep the keys known: an outage of the provider is not a rotation
            self._keys, self._built = keys, {}
            self._fetched_at = self._tried_at

    def _candidates(self, kid: str | None, alg: str) -> list[PyJWK]:
        kty, curves = _KEY_OF[alg]
        pool = self._keys.get(kid, []) if kid is not None else \
            [k for keys in self._keys.values() for k in keys]
        out = []
        for jwk in pool:
            if jwk.get("kty") != kty or (curves is not None and jwk.get("crv") not in curves) \
                    or jwk.get("alg", alg) != alg or jwk.get("use", "sig") != "sig":
                continue
            built = self._built.get((id(jwk), alg))
            if built is None:
                try:
                    built = self._built[(id(jwk), alg)] = PyJWK(dict(jwk), algorithm=alg)
                except (jwt.PyJWTError, ValueError, TypeError):
                    continue
            out.append(built)
        return out


def _jwks(data: Any) -> dict[str | None, list[Mapping[str, Any]]]:
    """{kid: [jwk, ...]} of a JWK Set ({"keys": [...]}); ValueError if it has no key."""
    keys = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(keys, list):
        raise ValueError('a JWK Set is {"keys": [...]}')
    out: dict[str | None, list[Mapping[str, Any]]] = {}
    for jwk in keys:
        if isinstance(jwk, dict) and isinstance(jwk.get("kty"), str):
            kid = jwk.get("kid")
            out.setdefault(kid if isinstance(kid, str) else None, []).append(jwk)
    if not out:
        raise ValueError("the JWK Set holds no key")
    return out


@dataclass(frozen=True)
class JwtDeviceAuth:
    """The device is the account of its login token (``LDP-Device-Token``); see the module
    docstring.  ``keys`` is the provider's JWKS, ``algorithms`` the accepted ones."""

    keys: JwksCache
    issuer: str
    audience: str
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    leeway: float = 60.0

    def __post_init__(self) -> None:
        bad = set(self.algorithms) - set(JWT_ALGORITHMS)
        if bad or not self.algorithms:
            raise ValueError(f"device token algorithms {sorted(bad)} are not accepted: "
                             f"only {', '.join(JWT_ALGORITHMS)}")

    async def subject(self, request: Request, secret: bytes) -> bytes:
        raw = request.headers.get(DEVICE_TOKEN_HEADER, "").strip()
        if not raw:
            raise _refused("device_token_missing",
                           "send LDP-Device-Token: the app's login token (a JWT)")
        if len(raw) > MAX_TOKEN_CHARS:
            raise _refused("device_token_malformed",
                           f"LDP-Device-Token is {len(raw)} characters, over {MAX_TOKEN_CHARS}")
        try:
            header = jwt.get_unverified_header(raw)
        except jwt.PyJWTError:
            raise _refused("device_token_malformed",
                           "LDP-Device-Token is not a JWT (header.payload.signature)") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self.algorithms:
            shown = alg if isinstance(alg, str) and len(alg) <= 16 else "?"
            raise _refused("device_token_algorithm",
                           f"device token alg {shown!r} is not one of {', '.join(self.algorithms)}")
        if kid is not None and not isinstance(kid, str):
            raise _refused("device_token_malformed", "the device token's kid is not a string")
        candidates = await self.keys.find(kid, alg)
        if not candidates:
            raise _refused("device_token_unknown_key",
                           "no key of the JWKS matches the device token's kid and alg")
        claims = self._verified(raw, alg, candidates)
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise _refused("device_token_claims", "the device token's sub is not a string")
        return account_subject(secret, self.issuer, sub)

    def _verified(self, raw: str, alg: str, candidates: list[PyJWK]) -> dict[str, Any]:
        """The claims, checked with the first key whose signature verifies."""
        for i, key in enumerate(candidates):
            try:
                claims: dict[str, Any] = jwt.decode(
                    raw, key.key, algorithms=[alg], audience=self.audience,
                    # a list: matched exactly (never a substring of a str)
                    issuer=[self.issuer], leeway=self.leeway,
                    options={"require": list(REQUIRED_CLAIMS)})
                return claims
            except jwt.InvalidSignatureError:
                if i + 1 < len(candidates):
                    continue
                raise _refused("device_token_signature",
                               "the device token's signature does not verify") from None
            except jwt.ExpiredSignatureError:
                raise _refused("device_token_expired", "the device token has expired "
                               "(exp): send a fresh login token") from None
            except jwt.ImmatureSignatureError:
                raise _refused("device_token_not_yet_valid",
                               "the device token is not valid yet (nbf or iat ahead)") from None
            except jwt.InvalidIssuerError:
                raise _refused("device_token_issuer",
                               f"the device token's iss is not {self.issuer!r}") from None
            except jwt.InvalidAudienceError:
                raise _refused("device_token_audience",
                               f"the device token's aud does not hold {self.audience!r}") from None
            except jwt.MissingRequiredClaimError as exc:
                raise _refused("device_token_claims",
                               f"the device token lacks the claim {exc.claim!r}") from None
            except jwt.DecodeError:
                raise _refused("device_token_malformed", "the device token cannot be "
                               "decoded") from None
            except jwt.InvalidTokenError:
                raise _refused("device_token_claims", "a claim of the device token is "
                               "malformed (exp, nbf, iat, iss, aud or sub)") from None
        raise AssertionError("no candidate")  # candidates is never empty


def device_auth_from(settings: Settings, log: logging.Logger | None = None
                     ) -> JwtDeviceAuth | None:
    """The ``DeviceAuth`` the settings ask for; None: the default (install keys)."""
    if settings.device_auth != "jwt":
        return None
    assert settings.jwt_issuer and settings.jwt_audience  # the settings refuse it otherwise
    kw: dict[str, Any] = {"ttl": settings.jwt_jwks_ttl_seconds,
                          "refetch": settings.jwt_jwks_refetch_seconds, "log": log}
    keys = (JwksCache.of_url(settings.jwt_jwks_url, **kw) if settings.jwt_jwks_url
            else JwksCache.of_file(str(settings.jwt_jwks_file), **kw))
    return JwtDeviceAuth(keys, settings.jwt_issuer, settings.jwt_audience,
                         settings.jwt_algorithm_list(), float(settings.jwt_leeway_seconds))
