"""Dashboard sessions: random, kept server-side in Redis with an expiry, revoked on logout.

A session is ``secrets.token_urlsafe(32)`` (256 bits), sent to the browser
only as an HttpOnly, SameSite=Strict cookie.  Redis holds, under its own
prefix (never a tally key; the aggregator writes nothing else)::

    ldp:dashboard-session:<sha256(token) hex>   STRING  key tag   EX SESSION_SECONDS

so a Redis dump holds neither the token nor the analyst key.  The value is
the *key tag* of the analyst key that signed in (an HMAC of the key's SHA-256
digest, 16 hex digits): a session is valid only while Redis still has it
(expiry, logout) AND its key is still one of ``LDP_ANALYST_KEYS`` (removing a
key ends its sessions at the next restart).  Redis rather than process
memory because several workers or instances serve one dashboard: a session
made by one must be seen, and revoked, by all.

Cross-site requests: ``same_origin`` refuses a sign-in or sign-out whose
``Origin`` is another origin (or ``null``) or whose ``Sec-Fetch-Site`` is
``cross-site``/``same-site`` (login CSRF).  A request with neither header is
not from a browser (browsers send Origin on every POST), so it cannot carry
a victim's cookies and is allowed: scripts sign in with ``curl -d key=...``.

>>> looks_like_token(new_token()), looks_like_token("x" * 43 + "!")
(True, False)
>>> same_origin({"host": "127.0.0.1:8001", "origin": "http://127.0.0.1:8001"})
True
>>> same_origin({"host": "127.0.0.1:8001", "origin": "https://evil.example"})
False
>>> same_origin({"host": "a", "sec-fetch-site": "cross-site"}), same_origin({"host": "a"})
(False, True)
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from urllib.parse import urlsplit

from ldp_server.keys import KeyRing, key_digest
from ldp_server.redis_client import RedisClient

__all__ = [
    "SESSION_PREFIX",
    "SESSION_SECONDS",
    "check_session",
    "looks_like_token",
    "new_token",
    "revoke_session",
    "same_origin",
    "session_redis_key",
    "start_session",
]

SESSION_PREFIX = "ldp:dashboard-session:"
#: A session's lifetime (absolute, not sliding).
SESSION_SECONDS = 8 * 3600
_TAG_LABEL = b"ldp-dashboard-key-tag-v1"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


def new_token() -> str:
    """A fresh session token: 32 random bytes from the OS CSPRNG, URL-safe base64."""
    return secrets.token_urlsafe(32)


def looks_like_token(value: str | None) -> bool:
    """Shape check before any Redis call (43 URL-safe base64 characters)."""
    return value is not None and _TOKEN.fullmatch(value) is not None


def session_redis_key(token: str) -> str:
    """Where a session lives: its token's SHA-256, never the token.

    >>> session_redis_key("a" * 43)[:22]
    'ldp:dashboard-session:'
    """
    return SESSION_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def _tag(digest: bytes) -> str:
    return hmac.new(digest, _TAG_LABEL, hashlib.sha256).hexdigest()[:16]


async def start_session(client: RedisClient, key: str) -> str:
    """Store a new session for a (checked) analyst key; return its token."""
    token = new_token()
    await client.set(session_redis_key(token), _tag(key_digest(key)), ex=SESSION_SECONDS)
    return token


async def check_session(client: RedisClient, ring: KeyRing, token: str | None) -> bool:
    """True iff the session exists, has not expired, and its key is still held."""
    if not looks_like_token(token):
        return False
    assert token is not None
    stored = await client.get(session_redis_key(token))
    if stored is None:
        return False
    tag = stored.decode() if isinstance(stored, bytes) else str(stored)
    found = False
    for digest, _ in ring.entries:
        found |= hmac.compare_digest(tag.encode(), _tag(digest).encode())
    return found


async def revoke_session(client: RedisClient, token: str | None) -> None:
    """Delete a session (logout); unknown or malformed tokens are ignored."""
    if looks_like_token(token):
        assert token is not None
        await client.delete(session_redis_key(token))


def same_origin(headers: Mapping[str, str]) -> bool:
    """False for a browser request from another site (see the module doc)."""
    fetch_site = (headers.get("sec-fetch-site") or "").lower()
    if fetch_site in ("cross-site", "same-site"):
        return False
    origin = headers.get("origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    host = (headers.get("host") or "").lower()
    return parts.scheme in ("http", "https") and bool(host) and parts.netloc.lower() == host
