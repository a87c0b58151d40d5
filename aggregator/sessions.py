"""Dashboard sessions: random, kept in Redis with an expiry, revoked on sign-out.

A session id is 32 random bytes (``secrets.token_urlsafe``) in an HttpOnly,
SameSite=Strict cookie; Redis keeps only its SHA-256, so a dump of Redis
cannot be replayed as a cookie.  Signing out deletes it: the cookie is dead
at once, on every worker and instance.

No key ever travels in a URL.  A link that signs a browser in (``ldp up``
prints one; the browser test uses one) carries a *ticket*: minted by an
analyst key (``POST /v1/sessions``), good once, for a minute.  Sign-in and
sign-out are POSTs that must come from the dashboard's own origin (Origin, or
Referer when a browser sends no Origin): a cross-site page cannot sign a
browser in or out.

    ldp:{session}:<sha256 hex>   STRING  "analyst", EX 8 h
    ldp:{ticket}:<sha256 hex>    STRING  "analyst", EX 60 s, GETDEL once

>>> from starlette.requests import Request
>>> scope = {"type": "http", "method": "POST", "scheme": "http", "path": "/login",
...          "headers": [(b"host", b"a.test"), (b"origin", b"http://a.test")]}
>>> same_origin(Request(scope)), same_origin(Request({**scope, "headers": [(b"host", b"a.test")]}))
(True, False)
"""

from __future__ import annotations

import hashlib
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request

from ldp_server.redis_client import RedisClient

__all__ = [
    "SESSION_SECONDS",
    "TICKET_SECONDS",
    "close_session",
    "mint_ticket",
    "open_session",
    "redeem_ticket",
    "same_origin",
    "session_valid",
]

SESSION_SECONDS = 8 * 3600
TICKET_SECONDS = 60
_MAX_ID = 128


def _key(kind: str, secret: str) -> str:
    return f"ldp:{{{kind}}}:{hashlib.sha256(secret.encode()).hexdigest()}"


async def open_session(client: RedisClient) -> str:
    """A new session id (stored hashed, with its expiry)."""
    session = secrets.token_urlsafe(32)
    await client.set(_key("session", session), "analyst", ex=SESSION_SECONDS)
    return session


async def session_valid(client: RedisClient, session: str | None) -> bool:
    if not session or len(session) > _MAX_ID:
        return False
    return bool(await client.exists(_key("session", session)))


async def close_session(client: RedisClient, session: str | None) -> None:
    if session and len(session) <= _MAX_ID:
        await client.delete(_key("session", session))


async def mint_ticket(client: RedisClient) -> str:
    """A one-time sign-in ticket, good for TICKET_SECONDS."""
    ticket = secrets.token_urlsafe(32)
    await client.set(_key("ticket", ticket), "analyst", ex=TICKET_SECONDS)
    return ticket


async def redeem_ticket(client: RedisClient, ticket: str | None) -> bool:
    """True once for a live ticket (GETDEL: a second use, or a replay, fails)."""
    if not ticket or len(ticket) > _MAX_ID:
        return False
    return await client.getdel(_key("ticket", ticket)) is not None


def same_origin(request: Request) -> bool:
    """The request comes from a page of this origin (Origin, else Referer)."""
    expected = f"{request.url.scheme}://{request.headers.get('host', '')}"
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if referer is None:
            return False
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return origin == expected
