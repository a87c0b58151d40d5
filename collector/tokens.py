"""Report tokens on the collector: the issuer's key, its per-device limits, verification.

A report counts only with a token (``ldp_core.tokens``: blind RSA, RFC 9474)
that the issuer signed for the report's epoch (epoch length, epoch index),
e.g. ("day", 20423); one token serves every metric of that epoch length and
epoch, spent once per metric (the store's per-slot state).  The
issuer is ``routers.tokens`` in the same service (it shares the spec registry
to check units, Redis for its limits, and the key ring); the verifier needs
only the public key, so the issuer can move to a service of its own by
moving the private key and that router.

Device authentication is a seam (``DeviceAuth``): it turns a request into an
opaque *subject* digest that the per-unit limit is keyed by.  The default,
``InstallKeyAuth``, is a random per-install key the device draws once and
sends as ``LDP-Install-Key`` (base64url, 32 bytes): registered on first
contact, one token per install and unit.  What each choice buys is in the
README ("The issuer and how a device authenticates"): an install key bounds
what one install gets, not how many installs an attacker makes; an account or
an app attestation (Play Integrity, App Attest) bounds the number of subjects
as well.

Issuer state (per subject, expires with the last unit's acceptance window):

    ldp:{i:<subject hex>}   HASH  "<period>|<epoch>" -> 8-byte digest of the
                                  blinded message signed for that unit (fields
                                  "<metric>|<version>|<epoch>" of version-1
                                  tokens may remain until they expire)

Transition from version-1 tokens (bound to (metric, version, epoch)): the
first collector of version 2 writes its start time to ``V2_SINCE`` (once,
NX); a report whose epoch starts before that time + ``LDP_TOKEN_AHEAD_HOURS``
(the last epoch a version-1 issuer could have signed for) may carry a
version-1 token: its token is tried as version 2, then as version 1.  Those
epochs leave the acceptance window by themselves, and with them version 1.

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

import redis.exceptions
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from collector.store import ValidReport
from collector.token_crypto import TokenKey, Verifier
from ldp_core.tokens import unit_digest, unit_digest_v1
from ldp_server.problems import Problem
from ldp_server.redis_client import RedisClient

__all__ = [
    "ISSUE_LUA",
    "DeviceAuth",
    "InstallKeyAuth",
    "TokenService",
    "load_token_key",
    "load_v1_until",
    "subject_key",
]

TOKEN_KEY = "ldp:{spec}:token-key"  # noqa: S105 - a key name, not a secret
V2_SINCE = "ldp:{spec}:token-v2-since"
#: At most this many distinct (token, units) of a batch are checked on the event
#: loop (one RSA check, 25-85 us) rather than in a worker thread (a hop costs
#: 250-400 us on a loaded 2-core host: the wake-up and the GIL hand-over).
INLINE_TOKENS = 2
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


async def load_v1_until(client: RedisClient, now: float, ahead_seconds: int) -> float:
    """The start time of the last epoch whose reports may carry a version-1 token:
    the first version-2 collector's start (``V2_SINCE``, written once) + the
    issuer's ahead window.  If Redis cannot be reached (a collector starts before
    it), this start counts as the first: later, never earlier, than the truth."""
    try:
        await client.set(V2_SINCE, str(int(now)), nx=True)
        since = await client.get(V2_SINCE)
    except (redis.exceptions.RedisError, OSError):
        since = None
    return (int(since) if isinstance(since, bytes) else int(now)) + ahead_seconds


@dataclass(frozen=True)
class TokenService:
    """The key and verifier of a collector process, and the device-auth seam.

    ``v1_until``: reports of epochs that start at or before it (unix seconds)
    may carry a version-1 token (None: none may).
    """

    key: TokenKey
    verifier: Verifier
    auth: DeviceAuth
    v1_until: float | None = None

    @classmethod
    def of(cls, key: TokenKey, auth: DeviceAuth | None = None, *,
           v1_until: float | None = None, cache_size: int = 65536) -> TokenService:
        return cls(key, Verifier([key.public], cache_size=cache_size),
                   auth or InstallKeyAuth(), v1_until)

    def units(self, report: ValidReport) -> tuple[bytes, ...]:
        """The unit digests a report's token may be signed for, in the order tried."""
        spec, epoch = report.spec, report.epoch
        v2 = unit_digest(spec.epoch, epoch)
        if self.v1_until is not None and epoch * spec.epoch_seconds <= self.v1_until:
            return v2, unit_digest_v1(spec.name, spec.version, epoch)
        return (v2,)

    async def verify(
        self, reports: Sequence[ValidReport], positions: Sequence[int]
    ) -> tuple[list[ValidReport], list[int], list[int]]:
        """(reports with a valid token, their positions, positions of bad tokens).

        The RSA checks (25-45 us each, one per distinct token and unit of the
        batch, fewer with the verifier's cache) run in a worker thread: a batch
        of 1000 never holds the event loop.  When the cache already holds every
        distinct token (at most 32), the answer comes from it on the loop: a
        thread hop costs more than that look-up.  A valid report's ``token`` becomes
        its nonce (hex): what the store's per-report state is keyed by.
        """
        digests: dict[tuple[str, int, str, int], tuple[bytes, ...]] = {}
        items: list[tuple[object, tuple[bytes, ...]]] = []
        for r in reports:
            unit = (r.spec.epoch, r.epoch, r.spec.name, r.spec.version)
            if unit not in digests:
                digests[unit] = self.units(r)
            items.append((r.token, digests[unit]))
        nonces = self.verifier.cached_all(items)
        if nonces is None and len(dict.fromkeys(items)) <= INLINE_TOKENS:
            nonces = self.verifier.check_all(items)
        if nonces is None:
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


def issue_args(units: Sequence[tuple[str, int, bytes]], expire_at: int) -> list[Any]:
    """ARGV of ``ISSUE_LUA`` for (period, epoch, blinded) units."""
    args: list[Any] = [expire_at]
    for period, epoch, blinded in units:
        args += [f"{period}|{epoch}", blake2b(blinded, digest_size=8).digest()]
    return args
