"""Analyst authentication: bearer keys for the API, a session cookie for the page.

The key ring is the server kit's (``ldp_server.keys.KeyRing``, re-exported
here), built from the analyst keys only.  The dashboard never puts a key in a
page, a script or a URL: the sign-in form POSTs it to ``/login``, which answers
with a redirect to ``/`` that sets an HttpOnly, SameSite=Strict cookie named
``SESSION_COOKIE`` holding a random session token stored server-side with an
expiry and revoked on logout (``aggregator.sessions``).  ``/?key=`` is refused.

>>> ring = analyst_ring(("a" * 24,))
>>> ring.check_bearer("Bearer " + "a" * 24), ring.check_bearer("Bearer nope")
(True, False)
"""

from __future__ import annotations

from collections.abc import Sequence

from ldp_server.keys import KeyRing

__all__ = ["SESSION_COOKIE", "KeyRing", "analyst_ring"]

SESSION_COOKIE = "ldp_dashboard"


def analyst_ring(keys: Sequence[str]) -> KeyRing:
    """The aggregator's ring: the analyst keys; empty means every request is refused."""
    return KeyRing.from_keys({"analyst": tuple(keys)})
