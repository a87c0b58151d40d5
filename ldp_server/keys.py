"""API keys by role and bearer headers, for both services.

One key ring for both services.  Keys are held only as SHA-256 digests and a
presented key is compared with every one in constant time:

>>> ring = KeyRing.from_keys({"ingest": ("i" * 24,), "admin": ("a" * 24,)})
>>> ring.role_of("i" * 24), ring.role_of("wrong")
('ingest', None)
>>> header = "Bearer " + "a" * 24
>>> ring.check_bearer(header, "admin"), ring.check_bearer(header, "ingest")
(True, False)

Dashboard sessions are random ids in Redis (``aggregator.sessions``); rate
limits are per client, in Redis (``collector.store.limits``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ldp_server.settings import Role

__all__ = ["KeyRing", "bearer_key", "key_digest"]



def key_digest(key: str) -> bytes:
    """SHA-256 of a key: what a service holds instead of the key."""
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
    """(digest, role) pairs; every lookup compares against every entry in constant time."""

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

    def check_key(self, key: str, *roles: Role) -> bool:
        """True iff ``key`` is held (with one of ``roles``, if any are given)."""
        role = self.role_of(key)
        return role is not None and (not roles or role in roles)

    def check_bearer(self, authorization: str | None, *roles: Role) -> bool:
        """True iff an ``Authorization`` header carries a held key (of ``roles``)."""
        key = bearer_key(authorization)
        return key is not None and self.check_key(key, *roles)

