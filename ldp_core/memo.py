"""The permanent level's randomness: a deterministic function of a device secret.

A two-level mechanism's permanent response is not stored: it is drawn from an
HMAC_DRBG (NIST SP 800-90A, SHA-256) seeded with
HMAC-SHA256(secret, LABEL | context | value).  It survives restarts, needs no
table of true values, and is never redrawn.

>>> seed = permanent_seed(bytes(32), "app.theme/1", 3)
>>> HmacDrbg(seed).getrandbits(32) == HmacDrbg(seed).getrandbits(32)
True
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["LABEL", "MIN_SECRET_BYTES", "OFFSET_LABEL", "HmacDrbg", "offset_seed", "permanent_seed"]

#: Domain separation of the permanent-response derivation.  Never change it:
#: a new label would redraw every device's permanent responses.  (v2: one
#: generate call per draw, so the work no longer depends on the value.)
LABEL = b"ldp-telemetry/permanent/v2"
#: Domain separation of a device's permanent rounding offset (alpha-point
#: rounding of a memoised numeric metric).  Never change it either.
OFFSET_LABEL = b"ldp-telemetry/offset/v1"
#: The shortest device secret accepted, in bytes.
MIN_SECRET_BYTES = 16





class HmacDrbg:
    """HMAC_DRBG with SHA-256 (NIST SP 800-90A, no reseed): exact integers.

    Checked against the NIST CAVP vectors (tests/ldp_core/test_longitudinal.py).

    Satisfies ``Rng``, so a mechanism's own ``_perturb`` (integer thresholds)
    draws the permanent response from it unchanged.

    >>> HmacDrbg(b"seed").getrandbits(32) == HmacDrbg(b"seed").getrandbits(32)
    True
    """

    def __init__(self, seed_material: bytes) -> None:
        self._key = b"\x00" * 32
        self._v = b"\x01" * 32
        self._update(seed_material)

    def _mac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, hashlib.sha256).digest()

    def _update(self, data: bytes | None) -> None:
        self._key = self._mac(self._key, self._v + b"\x00" + (data or b""))
        self._v = self._mac(self._key, self._v)
        if data:
            self._key = self._mac(self._key, self._v + b"\x01" + data)
            self._v = self._mac(self._key, self._v)

    def generate(self, count: int) -> bytes:
        """``count`` pseudo-random bytes (one HMAC_DRBG generate call)."""
        out = bytearray()
        while len(out) < count:
            self._v = self._mac(self._key, self._v)
            out += self._v
        self._update(None)
        return bytes(out[:count])

    def getrandbits(self, k: int, /) -> int:
        """A uniform integer in [0, 2**k)."""
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        if k == 0:
            return 0
        nbytes = (k + 7) // 8
        return int.from_bytes(self.generate(nbytes), "little") >> (8 * nbytes - k)

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        """An integer in range(start, stop) from ONE generate call, whatever it draws.

        floor(X * width / 2**k) for X uniform on k = bits(width) + 64 bits: each
        outcome has probability within width / 2**k < 2**-64 (relative) of uniform,
        with no rejection loop, so the permanent level's work does not depend on
        the value or on the draws.  The deviation moves the permanent channel by
        less than 2**-63 in ratio, far inside the outward slack (1e-12) of every
        epsilon this package states.
        """
        if stop is None:
            start, stop = 0, start
        if step != 1:
            raise ValueError("HmacDrbg.randrange supports step=1 only")
        width = stop - start
        if width <= 0:
            raise ValueError(f"empty range for randrange({start}, {stop})")
        bits = width.bit_length() + 64
        return start + ((self.getrandbits(bits) * width) >> bits)


def _check(secret: bytes, context: str) -> None:
    if not isinstance(secret, bytes | bytearray) or len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"secret must be at least {MIN_SECRET_BYTES} bytes")
    if not isinstance(context, str):
        raise ValueError(f"context must be a string such as 'metric/version', got {context!r}")


def offset_seed(secret: bytes, context: str) -> bytes:
    """HMAC-SHA256(secret, OFFSET_LABEL | context): the seed of one device's rounding
    offset for one metric, the same whatever the value.

    >>> offset_seed(bytes(32), "m/1") != permanent_seed(bytes(32), "m/1", 0)
    True
    """
    _check(secret, context)
    message = OFFSET_LABEL + b"\x00" + context.encode("utf-8")
    return hmac.new(bytes(secret), message, hashlib.sha256).digest()


def permanent_seed(secret: bytes, context: str, value: int | float) -> bytes:
    """HMAC-SHA256(secret, LABEL | context | value): the permanent level's seed.

    ``value`` is canonical (``check_value``'s output): ints as decimal text,
    floats as their exact hex form.
    """
    _check(secret, context)
    text = f"f:{value.hex()}" if isinstance(value, float) else f"i:{int(value)}"
    message = LABEL + b"\x00" + context.encode("utf-8") + b"\x00" + text.encode("ascii")
    return hmac.new(bytes(secret), message, hashlib.sha256).digest()


