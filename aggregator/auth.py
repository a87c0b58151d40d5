"""Analyst authentication: bearer keys for the API, a session cookie for the page.

The key ring is the server kit's (``ldp_server.keys.KeyRing``, re-exported
here), built from the analyst keys only.  The dashboard never puts a key in a
page or a script: ``GET /?key=K`` (or a form POST to ``/login``) is answered
with a redirect to ``/`` that sets an HttpOnly, SameSite=Strict cookie named
``SESSION_COOKIE`` holding ``KeyRing.session_for(K)`` = ``HMAC(sha256(K),
label)`` -- a value derived from the key, not the key -- and the access log
redacts the query string (see ``app``).

>>> ring = analyst_ring(("a" * 24,))
>>> ring.check_bearer("Bearer " + "a" * 24), ring.check_bearer("Bearer nope")
(True, False)
>>> ring.check_session(ring.session_for("a" * 24))
True
"""

from __future__ import annotations

from collections.abc import Sequence

from ldp_server.keys import KeyRing

__all__ = ["SESSION_COOKIE", "KeyRing", "analyst_ring"]

SESSION_COOKIE = "ldp_dashboard"


def analyst_ring(keys: Sequence[str]) -> KeyRing:
    """The aggregator's ring: the analyst keys; empty means every request is refused."""
    return KeyRing.from_keys({"analyst": tuple(keys)})
