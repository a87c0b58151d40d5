"""Report tokens on the collector: the issuer's key, its per-device limits, verification.

A report counts only with a token (``ldp_core.tokens``: blind RSA, RFC 9474)
that the issuer signed for the report's unit (metric, version, epoch).  The
issuer is ``routers.tokens`` in the same service (it shares the spec registry
to check units, Redis for its limits, and the key ring); the verifier needs
only the public key, so the issuer can move to a service of its own by
moving the private key and that router.

Device authentication is a seam (``DeviceAuth``): it turns a request into an
opaque *subject* digest that the per-unit limit is keyed by.  The default,
``InstallKeyAuth``, is a random per-install key the device draws once and
sends as ``LDP-Install-Key`` (base64url, 32 bytes): registered on first
contact, one token per install and unit.  What each choice buys is in
notes/tokens-readme.md: an install key bounds what one install gets, not how
many installs an attacker makes; an account or an app attestation (Play
Integrity, App Attest) bounds the number of subjects as well.

Issuer state (per subject, expires with the last unit's acceptance window):

    ldp:{i:<subject hex>}   HASH  "<metric>|<version>|<epoch>" -> 8-byte digest of
                                  the blinded message signed for that unit

A second request for a unit with the same blinded message is signed again
(a lost answer can be retried); another blinded message is refused
(``token_limit``).  The issuer sees the subject and the blinded messages,
never a nonce or a token: blinding makes what it signed independent of what
the collector later verifies.

>>> subject_key(b"\\x01" * 16)
'ldp:{i:01010101010101010101010101010101}'
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from collector.store import ValidReport
from collector.token_crypto import TokenKey, Verifier
from ldp_server.problems import Problem
from ldp_server.redis_client import RedisClient

__all__ = [
    "ISSUE_LUA",
    "DeviceAuth",
    "InstallKeyAuth",
    "TokenService",
    "load_token_key",
    "subject_key",
]

TOKEN_KEY = "ldp:{spec}:token-key"  # noqa: S105 - a key name, not a secret
INSTALL_HEADER = "ldp-install-key"

# KEYS[1] the subject's hash; ARGV[1] EXPIREAT (the max over the request);
# ARGV[2..] pairs: unit field, blinded digest.  Returns one char per unit:
# "0" sign (new, or the same blinded message again), "1" token_limit.
ISSUE_LUA = """
local out = {}
local fresh = {}
for i = 2, #ARGV, 2 do
  local have = redis.call('HGET', KEYS[1], ARGV[i])
  if have and have ~= ARGV[i + 1] then
    out[#out + 1] = '1'
  else
    out[#out + 1] = '0'
    if not have then
      fresh[#fresh + 1] = ARGV[i]
      fresh[#fresh + 1] = ARGV[i + 1]
    end
  end
end
if #fresh > 0 then
  redis.call('HSET', KEYS[1], unpack(fresh))
  local ttl = redis.call('TTL', KEYS[1])
  local now = tonumber(redis.call('TIME')[1])
  if ttl < 0 or now + ttl < tonumber(ARGV[1]) then redis.call('EXPIREAT', KEYS[1], ARGV[1]) end
end
return table.concat(out)
"""


def subject_key(subject: bytes) -> str:
    return f"ldp:{{i:{subject.hex()}}}"


class DeviceAuth(Protocol):
    """How the issuer knows a device: a request -> an opaque subject digest.

    Raise ``Problem(401, "invalid_device", ...)`` when the request carries no
    acceptable credential.  The digest must be keyed (never a stable id in clear).
    """

    async def subject(self, request: Request, secret: bytes) -> bytes: ...


@dataclass(frozen=True)
class InstallKeyAuth:
    """The default: a per-install random key (``LDP-Install-Key``, base64url of
    32 bytes), kept by the issuer only as a keyed 16-byte BLAKE2b digest."""

    async def subject(self, request: Request, secret: bytes) -> bytes:
        raw = request.headers.get(INSTALL_HEADER)
        key = _unb64(raw) if raw else None
        if key is None or len(key) != 32:
            raise Problem(401, "invalid_device",
                          "send LDP-Install-Key: base64url of 32 random bytes, kept per install")
        return blake2b(key, key=secret, digest_size=16, person=b"ldp-install").digest()


def _unb64(text: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


async def load_token_key(client: RedisClient, path: str | None, *, dev: bool) -> TokenKey:
    """The issuer key: from ``path`` (LDP_TOKEN_KEY_FILE), else (dev only) one
    created once and kept in Redis, so every collector instance shares it.
    A key file must hold >= 2048 bits, >= 1024 in dev (the test suite's key)."""
    if path is not None:
        return TokenKey.from_file(path, min_bits=1024 if dev else 2048)
    pem = await client.get(TOKEN_KEY)
    if pem is None:
        await client.set(TOKEN_KEY, TokenKey.generate(2048).to_pem(), nx=True)
        pem = await client.get(TOKEN_KEY)
    assert isinstance(pem, bytes)
    return TokenKey.from_pem(pem)


@dataclass(frozen=True)
class TokenService:
    """The key and verifier of a collector process, and the device-auth seam."""

    key: TokenKey
    verifier: Verifier
    auth: DeviceAuth

    @classmethod
    def of(cls, key: TokenKey, auth: DeviceAuth | None = None) -> TokenService:
        return cls(key, Verifier([key.public]), auth or InstallKeyAuth())

    async def verify(
        self, reports: Sequence[ValidReport], positions: Sequence[int]
    ) -> tuple[list[ValidReport], list[int], list[int]]:
        """(reports with a valid token, their positions, positions of bad tokens).

        The RSA checks (~25-50 us each) run in a worker thread: a batch of 1000
        never holds the event loop.  A valid report's ``token`` becomes its
        nonce (hex): what the store's per-report state is keyed by.
        """
        items = [(r.token, r.spec.name, r.spec.version, r.epoch) for r in reports]
        nonces = await run_in_threadpool(self.verifier.check_all, items)
        good: list[ValidReport] = []
        good_positions: list[int] = []
        bad: list[int] = []
        for report, position, nonce in zip(reports, positions, nonces, strict=True):
            if nonce is None:
                bad.append(position)
            else:
                good.append(report._replace(token=nonce.hex()))
                good_positions.append(position)
        return good, good_positions, bad

    def sign_all(self, blinded: Sequence[bytes]) -> list[bytes]:
        """Blind signatures, in order (CPU-bound: call it in a worker thread)."""
        return [self.key.blind_sign(b) for b in blinded]


def issue_args(units: Sequence[tuple[str, int, int, bytes]], expire_at: int) -> list[Any]:
    """ARGV of ``ISSUE_LUA`` for (metric, version, epoch, blinded) units."""
    args: list[Any] = [expire_at]
    for metric, version, epoch, blinded in units:
        args += [f"{metric}|{version}|{epoch}", blake2b(blinded, digest_size=8).digest()]
    return args
