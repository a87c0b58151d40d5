"""Install registration: stateless proof-of-work challenges and the registration record.

A new install registers once, paying a memory-hard proof of work
(``ldp_core.pow``); the token issuer then signs only for registered installs
(the gate: ``is_registered``).  The challenge is stateless: the server keeps
nothing between handing it out and checking the proof, because the challenge
carries its own parameters and expiry under a MAC of the server secret::

    challenge = 0x01 | log2(N) | r | p | bits | expires (8 bytes, big-endian unix s)
                | 16 random bytes | MAC (16 bytes)
    MAC       = BLAKE2b(the 29 bytes before it, key=server secret, digest_size=16,
                        person=b"ldp-challenge")

so a device cannot lower its own difficulty, extend an expiry or forge a
challenge.  A challenge may serve many installs, but a proof is bound to one
install key (``ldp_core.pow.install_digest``) and a replayed proof only
finds its install already registered.  The expiry bounds how long work can be
stockpiled before it is spent.

Registration state (Redis; the hash tag is the issuer's, ``collector.tokens.subject_key``,
so both live in one Cluster slot)::

    ldp:{i:<subject hex>}:r   STRING  the UTC day number of the registration;
                                      EX LDP_INSTALL_REGISTRATION_DAYS

The subject is the issuer's keyed digest of the install key
(``InstallKeyAuth``): neither the key nor the client's address is stored.  The
per-network limit of new registrations is a rate-limit bucket keyed by the
keyed digest of the client's /24 (IPv4) or /48 (IPv6) (``Store.take``, an
hour's TTL).

>>> secret = bytes(32)
>>> c = mint_challenge(secret, PowParams(n=1024, r=8, p=1, bits=9), now=1000.0, ttl=600,
...                    rand=bytes(16))
>>> open_challenge(secret, c, now=1500.0)
PowParams(n=1024, r=8, p=1, bits=9)
>>> registration_key(bytes.fromhex("0f" * 16))
'ldp:{i:0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f}:r'
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import struct
from hashlib import blake2b

from ldp_core.pow import PowParams
from ldp_server.problems import Problem

__all__ = [
    "CHALLENGE_BYTES",
    "REGISTER_LUA",
    "dev_loopback",
    "mint_challenge",
    "open_challenge",
    "registration_key",
]

_VERSION = 1
_HEAD = struct.Struct(">BBBBBQ")  # version, log2 N, r, p, bits, expires
_RANDOM = 16
_MAC = 16
CHALLENGE_BYTES = _HEAD.size + _RANDOM + _MAC

# KEYS[1] the registration key; ARGV[1] the day, ARGV[2] its TTL in seconds.
# Returns {the stored day, 1 if this call registered the install else 0}.
REGISTER_LUA = """
local have = redis.call('GET', KEYS[1])
if have then return {have, 0} end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return {ARGV[1], 1}
"""


def dev_loopback(env: str, address: str) -> bool:
    """Whether a new-install limit skips this client: the host itself in dev (its tests,
    benchmarks and simulated fleets register installs freely).  In prod a local proxy
    not named in LDP_TRUSTED_PROXIES would make every client loopback, so there loopback
    is limited like any network.  The token issuer's and the registration's limits
    follow this one rule.

    >>> dev_loopback("dev", "127.0.0.1"), dev_loopback("dev", "::1"), dev_loopback("prod", "::1")
    (True, True, False)
    >>> dev_loopback("dev", "203.0.113.7"), dev_loopback("dev", "unknown")
    (False, False)
    """
    if env != "dev":
        return False
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def registration_key(subject: bytes) -> str:
    """The Redis key of an install's registration (``subject``: ``InstallKeyAuth``'s digest)."""
    return f"ldp:{{i:{subject.hex()}}}:r"


def _mac(secret: bytes, body: bytes) -> bytes:
    return blake2b(body, key=secret, digest_size=_MAC, person=b"ldp-challenge").digest()


def mint_challenge(secret: bytes, params: PowParams, *, now: float, ttl: int,
                   rand: bytes | None = None) -> bytes:
    """A challenge valid until ``now + ttl`` for ``params`` (``rand``: tests only)."""
    body = _HEAD.pack(_VERSION, params.n.bit_length() - 1, params.r, params.p, params.bits,
                      int(now) + ttl) + (os.urandom(_RANDOM) if rand is None else rand)
    return body + _mac(secret, body)


def open_challenge(secret: bytes, challenge: bytes, *, now: float) -> PowParams:
    """The params a challenge was minted with, or Problem 400 ``challenge_invalid``
    (not ours: wrong length, version or MAC) / ``challenge_expired``."""
    if len(challenge) != CHALLENGE_BYTES or challenge[0] != _VERSION:
        raise Problem(400, "challenge_invalid",
                      f"the challenge is not one this collector made ({len(challenge)} bytes, "
                      f"want {CHALLENGE_BYTES}): ask POST /v1/installs/challenge")
    body, mac = challenge[:-_MAC], challenge[-_MAC:]
    if not hmac.compare_digest(mac, _mac(secret, body)):
        raise Problem(400, "challenge_invalid",
                      "the challenge's MAC does not verify: ask POST /v1/installs/challenge")
    _, log2_n, r, p, bits, expires = _HEAD.unpack_from(body)
    if now > expires:
        raise Problem(400, "challenge_expired",
                      f"the challenge expired at {expires} (now {int(now)}): ask a new one")
    try:
        return PowParams(n=1 << log2_n, r=r, p=p, bits=bits)
    except ValueError as exc:  # only a MAC'd challenge of another build gets here
        raise Problem(400, "challenge_invalid", str(exc)) from None
