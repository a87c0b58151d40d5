"""Analyst authentication: bearer keys for the API, a session cookie for the page.

Keys are kept only as SHA-256 digests and compared in constant time.  The
dashboard never puts a key in a page or a script: ``GET /?key=K`` (or a form
POST to ``/login``) is answered with a redirect to ``/`` that sets an
HttpOnly, SameSite=Strict cookie holding ``HMAC(sha256(K), "dashboard")`` --
a value derived from the key, not the key -- and the access log redacts the
query string (see ``app``).

>>> ring = KeyRing.from_keys(("a" * 24,))
>>> ring.check_bearer("Bearer " + "a" * 24), ring.check_bearer("Bearer nope")
(True, False)
>>> ring.check_session(ring.session_for("a" * 24))
True
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

__all__ = ["SESSION_COOKIE", "KeyRing"]

SESSION_COOKIE = "ldp_dashboard"
_SESSION_LABEL = b"ldp-dashboard-session-v1"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True)
class KeyRing:
    """The analyst keys, as digests; empty means every request is refused."""

    digests: tuple[bytes, ...]

    @classmethod
    def from_keys(cls, keys: tuple[str, ...]) -> KeyRing:
        return cls(tuple(_digest(k) for k in keys))

    def check_key(self, key: str) -> bool:
        """True iff ``key`` is one of the analyst keys (constant time per key)."""
        candidate = _digest(key)
        found = False
        for digest in self.digests:
            found |= hmac.compare_digest(candidate, digest)
        return found

    def check_bearer(self, header: str | None) -> bool:
        """True iff an ``Authorization`` header carries a known key."""
        if not header:
            return False
        scheme, _, key = header.partition(" ")
        return scheme.lower() == "bearer" and bool(key.strip()) and self.check_key(key.strip())

    @staticmethod
    def _session(digest: bytes) -> str:
        return hmac.new(digest, _SESSION_LABEL, hashlib.sha256).hexdigest()

    def session_for(self, key: str) -> str:
        """The cookie value for a (checked) key: derived from it, not the key."""
        return self._session(_digest(key))

    def check_session(self, value: str | None) -> bool:
        """True iff a dashboard cookie was derived from a known key."""
        if not value:
            return False
        found = False
        for digest in self.digests:
            found |= hmac.compare_digest(value.encode(), self._session(digest).encode())
        return found
