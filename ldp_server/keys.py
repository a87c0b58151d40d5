"""API keys by role, bearer headers, dashboard sessions, and a per-key rate limit.

One key ring for both services.  Keys are held only as SHA-256 digests and a
presented key is compared with every one in constant time:

>>> ring = KeyRing.from_keys({"ingest": ("i" * 24,), "admin": ("a" * 24,)})
>>> ring.role_of("i" * 24), ring.role_of("wrong")
('ingest', None)
>>> header = "Bearer " + "a" * 24
>>> ring.check_bearer(header, "admin"), ring.check_bearer(header, "ingest")
(True, False)

A dashboard session cookie is derived from a key (HMAC of its digest), never
the key itself:

>>> ring.check_session(ring.session_for("a" * 24)), ring.check_session("0" * 64)
(True, False)

Rate limits are per client, in Redis (``collector.store.limits``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ldp_server.settings import Role

__all__ = ["KeyRing", "bearer_key", "key_digest"]

_SESSION_LABEL = b"ldp-dashboard-session-v1"


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

    @staticmethod
    def _session(digest: bytes) -> str:
        return hmac.new(digest, _SESSION_LABEL, hashlib.sha256).hexdigest()

    def session_for(self, key: str) -> str:
        """The session cookie value for a (checked) key: derived from it, not the key."""
        return self._session(key_digest(key))

    def check_session(self, value: str | None) -> bool:
        """True iff a session value was derived from a held key (every entry compared)."""
        if not value:
            return False
        found = False
        for digest, _ in self.entries:
            found |= hmac.compare_digest(value.encode(), self._session(digest).encode())
        return found

