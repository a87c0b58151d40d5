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
docs/threat-model.md ("The issuer and how a device authenticates"): an install key bounds
what one install gets, not how many installs an attacker makes; an account or
an app attestation (Play Integrity, App Attest) bounds the number of subjects
as well.  ``JwtDeviceAuth`` (``collector.device_auth``, ``LDP_DEVICE_AUTH=jwt``)
is the account: the app's login token, checked against its provider's JWKS.

Issuer state (per subject, expires with the last unit's acceptance window):

    ldp:{i:<subject hex>}   HASH  "<period>|<epoch>" -> 8-byte digest of the
                                  blinded message signed for that unit (fields
                                  "<metric>|<version>|<epoch>" of version-1
                                  tokens may remain until they expire)
    ldp:{i:<subject hex>}:r STRING  UTC day the install registered, paying its proof of
                                  work (``collector.installs``, same hash tag);
                                  EX LDP_INSTALL_REGISTRATION_DAYS

Transition from version-1 tokens (bound to (metric, version, epoch)): the
first version-2 collector writes ``V2_SINCE`` once: its start time if the
registry already holds a metric (a version-1 deployment, whose issuer signed
only for registered metrics), else 0 (a fresh deployment: no version-1 token
exists).  An epoch that starts at or before ``V1_UNTIL`` = ``V2_SINCE`` +
``LDP_TOKEN_AHEAD_HOURS`` (the last epoch a version-1 issuer could have
signed for; written once too) is *version-1-only*: the issuer refuses its
version-2 unit (``epoch_v1_only``) and the collector counts only version-1
tokens in it (a version-2 token there is ``epoch_v1_only``).  Otherwise a device holding a
version-1 token of (metric, version, epoch) could also get the epoch's
version-2 token and report that metric twice.  Later epochs are
version-2-only, so in every epoch one kind of token counts, each at most once
per device and metric slot.  The cut-off is read from Redis once per process
(``V1Cutoff``), settled before any metric is registered (``cutoff_settled``),
and never guessed: a process that cannot read it answers no token request and
counts no report until it can.

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
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, Protocol

from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from collector.device_auth import JwtDeviceAuth
from collector.store import ValidReport
from collector.store.schema import SPEC_NAMES
from collector.token_crypto import TokenKey, Verifier
from ldp_core.tokens import unit_digest, unit_digest_v1
from ldp_server.problems import Problem
from ldp_server.redis_client import RedisClient

__all__ = [
    "ISSUE_LUA",
    "V1_UNTIL",
    "V2_SINCE",
    "DeviceAuth",
    "InstallKeyAuth",
    "JwtDeviceAuth",
    "TokenService",
    "V1Cutoff",
    "cutoff_settled",
    "load_token_key",
    "subject_key",
]

TOKEN_KEY = "ldp:{spec}:token-key"  # noqa: S105 - a key name, not a secret
V2_SINCE = "ldp:{spec}:token-v2-since"
V1_UNTIL = "ldp:{spec}:token-v1-until"
#: At most this many distinct (token, units) of a batch are checked on the event
#: loop (one RSA check, 25-85 us) rather than in a worker thread (a hop costs
#: 250-400 us on a loaded 2-core host: the wake-up and the GIL hand-over).
INLINE_TOKENS = 2
INSTALL_HEADER = "ldp-install-key"

# KEYS[1] V1_UNTIL, KEYS[2] V2_SINCE, KEYS[3] the registry's metric names (one hash
# tag: one slot); ARGV[1] now, ARGV[2] the ahead window (seconds).  V2_SINCE is
# written once: now if a metric is registered (a version-1 deployment), else 0 (no
# version-1 token can exist); V1_UNTIL once, from the first reader's ahead window,
# so processes with other settings still agree.  Returns V1_UNTIL ("0": none).
SINCE_LUA = """
local untl = redis.call('GET', KEYS[1])
if untl then return untl end
local since = redis.call('GET', KEYS[2])
if not since then
  since = redis.call('SCARD', KEYS[3]) > 0 and ARGV[1] or '0'
  redis.call('SET', KEYS[2], since)
end
if tonumber(since) == 0 then untl = '0'
else untl = string.format('%d', tonumber(since) + tonumber(ARGV[2])) end
redis.call('SET', KEYS[1], untl)
return untl
"""

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
                          "send LDP-Install-Key: base64url of 32 random bytes, kept per install",
                          reason="install_key_invalid")
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


class V1Cutoff:
    """Which epochs are version-1-only: those that start at or before ``V1_UNTIL``
    (unix seconds: ``V2_SINCE`` + the ahead window); None when no epoch is.

    Read from Redis on first use and kept (``V2_SINCE`` and ``V1_UNTIL`` are each
    written once, by a script that also decides between a version-1 deployment
    and a fresh one), so every process and restart agrees on it, whatever its own
    ``LDP_TOKEN_AHEAD_HOURS``.  If Redis cannot be read, ``until``
    raises and the request fails (503 ``store_unavailable``): a guessed cut-off,
    earlier or later than another process's, would let one epoch accept both
    kinds of token or refuse both.  ``fixed`` is a known cut-off (tests, benchmarks).

    >>> import asyncio
    >>> asyncio.run(V1Cutoff.fixed(None).until()), asyncio.run(V1Cutoff.fixed(7.0).until())
    (None, 7.0)
    """

    def __init__(self, client: RedisClient | None, clock: Callable[[], float],
                 ahead_seconds: int) -> None:
        self._client, self._clock, self._ahead = client, clock, ahead_seconds
        self._known = client is None
        self._until: float | None = None

    @classmethod
    def fixed(cls, until: float | None) -> V1Cutoff:
        cutoff = cls(None, time.time, 0)
        cutoff._until = until
        return cutoff

    async def until(self) -> float | None:
        if not self._known:
            assert self._client is not None
            until = int(await self._client.eval(SINCE_LUA, 3, V1_UNTIL, V2_SINCE, SPEC_NAMES,
                                                int(self._clock()), self._ahead))
            self._until = until or None
            self._known = True
        return self._until

    @staticmethod
    def v1_only(until: float | None, period_seconds: int, epoch: int) -> bool:
        """Whether the epoch starts at or before the cut-off ``until`` (of ``until()``)."""
        return until is not None and epoch * period_seconds <= until


async def cutoff_settled(request: Request) -> None:
    """A dependency of the metric registry's routes: the cut-off is settled before a
    metric is registered, so that a registry that is not empty when ``V2_SINCE`` is
    first written means a version-1 deployment (a collector that started while Redis
    was down would otherwise take its own first metrics for version-1 ones).  If
    Redis is down the route fails by itself."""
    service: TokenService = request.app.state.tokens
    with suppress(RedisError, OSError):
        await service.cutoff.until()


@dataclass(frozen=True)
class TokenService:
    """The key and verifier of a collector process, the device-auth seam, and the
    version-1 cut-off (``V1Cutoff``)."""

    key: TokenKey
    verifier: Verifier
    auth: DeviceAuth
    cutoff: V1Cutoff

    @classmethod
    def of(cls, key: TokenKey, auth: DeviceAuth | None = None, *,
           cutoff: V1Cutoff | None = None, cache_size: int = 65536) -> TokenService:
        return cls(key, Verifier([key.public], cache_size=cache_size),
                   auth or InstallKeyAuth(), cutoff or V1Cutoff.fixed(None))

    def units(self, report: ValidReport, until: float | None) -> tuple[bytes, ...]:
        """The unit digest a report's token must be signed for: the version-1 unit
        in a version-1-only epoch (cut-off ``until``), else the version-2 one."""
        spec, epoch = report.spec, report.epoch
        if self.cutoff.v1_only(until, spec.epoch_seconds, epoch):
            return (unit_digest_v1(spec.name, spec.version, epoch),)
        return (unit_digest(spec.epoch, epoch),)

    async def verify(
        self, reports: Sequence[ValidReport], positions: Sequence[int]
    ) -> tuple[list[ValidReport], list[int], list[int]]:
        """(reports with a valid token, their positions, positions of refused tokens):
        ``check`` without the codes."""
        good, good_positions, refused = await self.check(reports, positions)
        return good, good_positions, list(refused)

    async def check(
        self, reports: Sequence[ValidReport], positions: Sequence[int]
    ) -> tuple[list[ValidReport], list[int], dict[int, str]]:
        """(reports with a valid token, their positions, {position: code} of the others).

        Codes: ``bad_token`` (not signed for the report's unit), ``epoch_v1_only``
        (a version-2 token in a version-1-only epoch: the issuer refuses those
        units, so only a token issued before this rule, or forged from one, gets it).
        The RSA checks (25-45 us each, one per distinct token and unit of the
        batch, fewer with the verifier's cache) run in a worker thread: a batch
        of 1000 never holds the event loop.  When the cache already holds every
        distinct token (at most 32), the answer comes from it on the loop: a
        thread hop costs more than that look-up.  A valid report's ``token`` becomes
        its nonce (hex): what the store's per-report state is keyed by.
        """
        until = await self.cutoff.until()
        digests: dict[tuple[str, int, str, int], tuple[bytes, ...]] = {}
        items: list[tuple[object, tuple[bytes, ...]]] = []
        for r in reports:
            unit = (r.spec.epoch, r.epoch, r.spec.name, r.spec.version)
            if unit not in digests:
                digests[unit] = self.units(r, until)
            items.append((r.token, digests[unit]))
        # ``check_all`` consults the cache itself: few tokens go to it at once.
        if len(dict.fromkeys(items)) <= INLINE_TOKENS:
            nonces = self.verifier.check_all(items)
        elif (cached := self.verifier.cached_all(items)) is not None:
            nonces = cached
        else:
            nonces = await run_in_threadpool(self.verifier.check_all, items)
        late = [i for i, (r, n) in enumerate(zip(reports, nonces, strict=True))
                if n is None and self.cutoff.v1_only(until, r.spec.epoch_seconds, r.epoch)]
        as_v2: list[bytes | None] = []
        if late:  # only to name the code: a forged token costs one more check here
            as_v2 = await run_in_threadpool(self.verifier.check_all, [
                (reports[i].token, (unit_digest(reports[i].spec.epoch, reports[i].epoch),))
                for i in late])
        v2_here = {i for i, nonce in zip(late, as_v2, strict=True) if nonce is not None}
        good: list[ValidReport] = []
        good_positions: list[int] = []
        refused: dict[int, str] = {}
        hexes: dict[bytes, str] = {}  # a device's reports of ~20 metrics share one nonce
        for i, (report, position, nonce) in enumerate(
                zip(reports, positions, nonces, strict=True)):
            if nonce is None:
                refused[position] = "epoch_v1_only" if i in v2_here else "bad_token"
            else:
                text = hexes.get(nonce)
                if text is None:
                    text = hexes[nonce] = nonce.hex()
                spec, epoch, report_id, _, counters = report
                good.append(ValidReport(spec, epoch, report_id, text, counters))
                good_positions.append(position)
        return good, good_positions, refused

    def sign_all(self, blinded: Sequence[bytes]) -> list[bytes]:
        """Blind signatures, in order (CPU-bound: call it in a worker thread)."""
        return [self.key.blind_sign(b) for b in blinded]


def issue_args(units: Sequence[tuple[str, int, bytes]], expire_at: int) -> list[Any]:
    """ARGV of ``ISSUE_LUA`` for (period, epoch, blinded) units."""
    args: list[Any] = [expire_at]
    for period, epoch, blinded in units:
        args += [f"{period}|{epoch}", blake2b(blinded, digest_size=8).digest()]
    return args
