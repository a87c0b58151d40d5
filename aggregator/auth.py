"""Analyst authentication: bearer keys for the API, a session cookie for the page.

The key ring is the server kit's (``ldp_server.keys.KeyRing``, re-exported
here), built from the analyst keys only.  The page's cookie, ``SESSION_COOKIE``,
holds a random session id kept in Redis (``aggregator.sessions``), never a key
or anything derived from one.

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
