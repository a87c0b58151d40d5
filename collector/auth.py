"""API keys by role, and a per-key token-bucket rate limit.

Keys are kept only as SHA-256 digests and compared in constant time:

>>> ring = KeyRing.from_keys({"ingest": ("i" * 24,), "admin": ("a" * 24,), "analyst": ()})
>>> ring.role_of("i" * 24), ring.role_of("wrong")
('ingest', None)

A bucket holds ``burst`` tokens and refills at ``rate`` per second; a request
takes one, or learns how long to wait:

>>> limiter = RateLimiter(rate=1.0, burst=2)
>>> [limiter.take("k", now=0.0) for _ in range(3)]
[0.0, 0.0, 1.0]
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from collector.settings import Role

__all__ = ["KeyRing", "RateLimiter", "bearer_key", "key_digest"]


def key_digest(key: str) -> bytes:
    """SHA-256 of a key: what the collector holds instead of the key."""
    return hashlib.sha256(key.encode()).digest()


def bearer_key(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header, else None."""
    if not authorization:
        return None
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    return key.strip()


@dataclass(frozen=True)
class KeyRing:
    """(digest, role) pairs; ``role_of`` compares against every one in constant time."""

    entries: tuple[tuple[bytes, Role], ...]

    @classmethod
    def from_keys(cls, keys: Mapping[Role, Sequence[str]]) -> KeyRing:
        return cls(tuple((key_digest(k), role) for role, ks in keys.items() for k in ks))

    def role_of(self, key: str) -> Role | None:
        """The role of a presented key, or None.  Every entry is compared."""
        digest = key_digest(key)
        found: Role | None = None
        for stored, role in self.entries:
            if hmac.compare_digest(stored, digest):
                found = role
        return found


@dataclass
class RateLimiter:
    """Token buckets per key digest, in process memory (each worker has its own)."""

    rate: float
    burst: int
    max_keys: int = 10_000
    _buckets: dict[bytes | str, tuple[float, float]] = field(default_factory=dict)

    def take(self, key: bytes | str, now: float | None = None) -> float:
        """0.0 if the request may go ahead, else the seconds to wait before retrying."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        tokens, last = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens >= 1.0:
            if len(self._buckets) >= self.max_keys and key not in self._buckets:
                self._buckets.clear()  # only valid keys reach here; bounded memory anyway
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate
