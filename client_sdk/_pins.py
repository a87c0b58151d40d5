"""The token issuer's keys this app trusts: pinned key ids, never taken from the server.

A malicious issuer could give each device a key of its own and so recognise
the device in every token it later sees (the key id is inside each token).
Blindness does not help against that: the device must know *which* key is the
fleet's.  So the app ships the SHA-256 key ids (``key_id`` of
``GET /v1/tokens/key``, 64 hex digits) of the keys it accepts, and the SDK
uses no other: a key that is not pinned is a configuration error (logged at
ERROR once per key, counted in ``Counters.config_errors["issuer_key_unpinned"]``),
no token is asked or spent with it, and the reports wait in the spool.

Where pins come from (all are joined): ``issuer_keys=`` of ``Client``/``Fleet``,
the ``issuer_keys`` list of the bundled catalog file (``{"metrics": [...],
"issuer_keys": [...]}``), and ``$LDP_ISSUER_KEYS`` (comma-separated).
Rotation: publish the next key's id and ship it in the app (both ids pinned)
before the issuer switches; drop the old id in a later release.  With no pin
at all the SDK accepts the issuer's key and logs one WARNING (the pre-pinning
behaviour, for development).

>>> pins = IssuerPins.of(["AB" * 32], env={"LDP_ISSUER_KEYS": "cd" * 32})
>>> pins.allows("ab" * 32), pins.allows("cd" * 32), pins.allows("ef" * 32)
(True, True, False)
>>> IssuerPins.of([], env={}).enforced
False
>>> IssuerPins.of(["not-a-key-id"], env={})
Traceback (most recent call last):
client_sdk._errors.ConfigError: an issuer key id is 64 hex digits (SHA-256), got 'not-a-key-id'
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from client_sdk._errors import ConfigError

__all__ = ["ENV_PINS", "IssuerPins"]

ENV_PINS = "LDP_ISSUER_KEYS"
_KEY_ID = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class IssuerPins:
    """The key ids (lowercase hex) of the issuer keys this app accepts."""

    key_ids: frozenset[str]

    @classmethod
    def of(cls, given: Iterable[str] | None, env: Mapping[str, str] | None = None) -> IssuerPins:
        """Pins from an argument and the environment (``$LDP_ISSUER_KEYS``), joined."""
        source = os.environ if env is None else env
        values = [*(given or ()), *source.get(ENV_PINS, "").split(",")]
        ids = set()
        for value in values:
            text = str(value).strip().lower()
            if not text:
                continue
            if not _KEY_ID.match(text):
                raise ConfigError(f"an issuer key id is 64 hex digits (SHA-256), got {value!r}")
            ids.add(text)
        return cls(frozenset(ids))

    @property
    def enforced(self) -> bool:
        """True when at least one key is pinned (then only pinned keys are used)."""
        return bool(self.key_ids)

    def allows(self, key_id: str) -> bool:
        """Whether tokens of the key with this id may be asked for and spent."""
        return not self.enforced or key_id.lower() in self.key_ids
