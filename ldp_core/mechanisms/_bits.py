"""Bit vectors on the wire: packed little-endian within bytes, base64url, no padding.

>>> pack_bits((0, 3, 9), 12)
'CQI'
>>> unpack_bits("CQI", 12)
(0, 3, 9)
"""

from __future__ import annotations

import base64
import binascii
import math

from ldp_core.errors import ReportError

__all__ = ["pack_bits", "unpack_bits"]


def pack_bits(bits: tuple[int, ...], size: int) -> str:
    """The set bits ``bits`` of a ``size``-bit vector as canonical base64url."""
    packed = bytearray((size + 7) // 8)
    for i in bits:
        packed[i >> 3] |= 1 << (i & 7)
    return base64.urlsafe_b64encode(bytes(packed)).rstrip(b"=").decode("ascii")


def unpack_bits(payload: object, size: int) -> tuple[int, ...]:
    """The set bits of a canonical base64url ``size``-bit vector, else ``ReportError``."""
    if not isinstance(payload, str):
        raise ReportError(
            "payload_type", f"payload must be a base64url string, got {type(payload).__name__}"
        )
    expected = math.ceil((size + 7) // 8 * 4 / 3)
    if len(payload) != expected:
        raise ReportError(
            "bitvector_length",
            f"bit vector of {size} bits is {expected} base64url characters, got {len(payload)}",
        )
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    except (binascii.Error, ValueError):
        raise ReportError("payload_encoding", "payload is not base64url") from None
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != payload:
        raise ReportError("payload_encoding", "payload is not canonical base64url")
    if size % 8 and raw[-1] >> (size % 8):
        raise ReportError("bitvector_length", f"bits set beyond the {size} bits of the vector")
    return _set_bits(raw)


def _set_bits(raw: bytes) -> tuple[int, ...]:
    """Indices of the set bits of a little-endian packed vector, ascending."""
    out = []
    for byte_index, byte in enumerate(raw):
        base = byte_index << 3
        while byte:
            low = byte & -byte
            out.append(base + low.bit_length() - 1)
            byte ^= low
    return tuple(out)
