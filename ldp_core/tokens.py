"""Anonymous report tokens: the device half of blind RSA (RFC 9474), stdlib only.

The scheme is RSABSSA-SHA384-PSS-Deterministic (RFC 9474 section 5: SHA-384,
MGF1-SHA-384, 48-byte salt, identity message preparation), the one Privacy
Pass token type 0x0002 uses (RFC 9578 section 6).  A device

1. draws a 32-byte ``nonce`` and builds the token input of its *unit*, an
   epoch of one length (period "hour" or "day", epoch index), e.g. ("day",
   20423): ``0x0002 || nonce || unit_digest || key_id`` (98 bytes, the RFC
   9578 layout, with the TokenChallenge digest replaced by the unit);
2. blinds it (``blind``) and sends the blinded message to the issuer, which
   signs it without seeing it (``collector.token_crypto.TokenKey.blind_sign``);
3. unblinds the answer (``finalize``, which also verifies the signature), and
   attaches ``nonce || signature`` to every report of that epoch, whatever the
   metric: the collector spends a token once per metric.

The token on the wire (``wire_token``) is ``base64url(nonce || signature)``
without padding: 384 characters for a 2048-bit key.  The collector rebuilds
the token input from the report's epoch and its metric's epoch length, so a
token is valid for one epoch only, and verifies it with the issuer's public
key.  (Tokens of version 1 were bound to (metric, version, epoch):
``unit_digest_v1``, still accepted by the collector during the transition.)
Blinding makes the signature independent of what the issuer saw: the issuer
and the collector together cannot tell which issuance a token came from.

Big-integer arithmetic is Python's ``int`` (``pow`` with a modulus, and with
-1 for the inverse); randomness is the OS CSPRNG (``secrets``).

>>> key = PublicKey(n=3233, e=17)      # a toy key: only the arithmetic is shown here
>>> key.modulus_bytes, len(key.key_id)
(2, 32)
>>> unit_digest("day", 20423).hex()[:16]
'e0f6508118846b82'
>>> unit_digest_v1("browser", 1, 20421).hex()[:16]
'5af8631c97582dd1'
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import secrets
from dataclasses import dataclass

__all__ = [
    "NONCE_BYTES",
    "PERIODS",
    "SALT_BYTES",
    "TOKEN_TYPE",
    "PendingToken",
    "PublicKey",
    "TokenError",
    "b64url",
    "blind",
    "emsa_pss_encode",
    "emsa_pss_verify",
    "finalize",
    "parse_wire_token",
    "prepare",
    "token_input",
    "unb64url",
    "unit_digest",
    "unit_digest_v1",
    "verify",
    "wire_token",
]

TOKEN_TYPE = 0x0002
NONCE_BYTES = 32
#: Epoch lengths a token unit may have (``ldp_core.metric.EPOCH_SECONDS``).
PERIODS = ("hour", "day")
SALT_BYTES = 48  # sLen of RSABSSA-SHA384-PSS-*: the SHA-384 output length
_HASH_BYTES = 48


class TokenError(ValueError):
    """A token, key or blinded value that fails a check of RFC 9474; the message says which."""


@dataclass(frozen=True)
class PublicKey:
    """An RSA public key (modulus ``n``, exponent ``e``) of the token issuer.

    ``key_id`` = SHA-256(I2OSP(n, k) || I2OSP(e, 4)), k the modulus length in
    bytes: it goes into every token input, so a token names the key that signed it.
    """

    n: int
    e: int

    def __post_init__(self) -> None:
        if self.n < 3 or self.n % 2 == 0:
            raise TokenError(f"RSA modulus must be odd and > 2, got {self.n}")
        if not 1 < self.e < 1 << 32:
            raise TokenError(f"RSA exponent must be in (1, 2**32), got {self.e}")

    @property
    def modulus_bytes(self) -> int:
        return (self.n.bit_length() + 7) // 8

    @property
    def key_id(self) -> bytes:
        return hashlib.sha256(_i2osp(self.n, self.modulus_bytes) + _i2osp(self.e, 4)).digest()

    def to_json(self) -> dict[str, str]:
        """``{"n": base64url, "e": base64url, "key_id": hex}`` (the GET /v1/tokens/key body)."""
        return {
            "n": b64url(_i2osp(self.n, self.modulus_bytes)),
            "e": b64url(_i2osp(self.e, (self.e.bit_length() + 7) // 8)),
            "key_id": self.key_id.hex(),
        }

    @classmethod
    def from_json(cls, body: dict[str, str]) -> PublicKey:
        """The key of ``to_json``; ``TokenError`` if it is malformed or its key_id differs."""
        try:
            key = cls(int.from_bytes(unb64url(body["n"]), "big"),
                      int.from_bytes(unb64url(body["e"]), "big"))
        except (KeyError, TypeError) as exc:
            raise TokenError(f"token key must hold n and e, got {sorted(body)}") from exc
        if "key_id" in body and body["key_id"] != key.key_id.hex():
            raise TokenError(f"token key_id {body['key_id']!r} does not match the key")
        return key


def _i2osp(x: int, length: int) -> bytes:
    return x.to_bytes(length, "big")


def _os2ip(data: bytes) -> int:
    return int.from_bytes(data, "big")


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 4648 section 5)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    """The bytes of base64url text (padding optional); ``TokenError`` if it is not."""
    if not isinstance(text, str):
        raise TokenError(f"expected base64url text, got {type(text).__name__}")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise TokenError(f"not base64url: {text[:16]!r}...") from exc


def _mgf1(seed: bytes, length: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < length:
        out += hashlib.sha384(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return bytes(out[:length])


def emsa_pss_encode(msg: bytes, em_bits: int, salt: bytes) -> bytes:
    """EMSA-PSS-ENCODE (RFC 8017 section 9.1.1) with SHA-384 and MGF1-SHA-384."""
    em_len = math.ceil(em_bits / 8)
    m_hash = hashlib.sha384(msg).digest()
    if em_len < _HASH_BYTES + len(salt) + 2:
        raise TokenError(f"modulus of {em_bits + 1} bits is too short for PSS-SHA384")
    h = hashlib.sha384(b"\x00" * 8 + m_hash + salt).digest()
    db = b"\x00" * (em_len - len(salt) - _HASH_BYTES - 2) + b"\x01" + salt
    masked = bytes(a ^ b for a, b in zip(db, _mgf1(h, len(db)), strict=True))
    clear = 8 * em_len - em_bits
    masked = bytes([masked[0] & (0xFF >> clear)]) + masked[1:]
    return masked + h + b"\xbc"


def emsa_pss_verify(msg: bytes, em: bytes, em_bits: int, salt_len: int = SALT_BYTES) -> bool:
    """EMSA-PSS-VERIFY (RFC 8017 section 9.1.2) with SHA-384; True if consistent."""
    em_len = math.ceil(em_bits / 8)
    if len(em) != em_len or em_len < _HASH_BYTES + salt_len + 2 or em[-1] != 0xBC:
        return False
    masked, h = em[: em_len - _HASH_BYTES - 1], em[em_len - _HASH_BYTES - 1 : -1]
    clear = 8 * em_len - em_bits
    if masked[0] >> (8 - clear) if clear else 0:
        return False
    db = bytearray(a ^ b for a, b in zip(masked, _mgf1(h, len(masked)), strict=True))
    db[0] &= 0xFF >> clear
    pad = em_len - _HASH_BYTES - salt_len - 2
    if any(db[:pad]) or db[pad] != 1:
        return False
    salt = bytes(db[len(db) - salt_len :]) if salt_len else b""
    m_hash = hashlib.sha384(msg).digest()
    return hmac.compare_digest(hashlib.sha384(b"\x00" * 8 + m_hash + salt).digest(), h)


def blind(
    key: PublicKey, msg: bytes, *, salt: bytes | None = None, inv: int | None = None
) -> tuple[bytes, int]:
    """RFC 9474 Blind: ``(blinded_msg, inv)``.  ``salt`` and ``inv`` are drawn from
    the OS CSPRNG unless given (only the RFC's test vectors give them)."""
    k = key.modulus_bytes
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    m = _os2ip(emsa_pss_encode(msg, key.n.bit_length() - 1, salt))
    if math.gcd(m, key.n) != 1:
        raise TokenError("encoded message is not invertible modulo n")
    if inv is None:
        while True:
            r = secrets.randbelow(key.n - 1) + 1
            if math.gcd(r, key.n) == 1:
                break
        inv = pow(r, -1, key.n)
    else:
        r = pow(inv, -1, key.n)
    z = m * pow(r, key.e, key.n) % key.n
    return _i2osp(z, k), inv


def verify(key: PublicKey, msg: bytes, sig: bytes) -> bool:
    """RSASSA-PSS-VERIFY (RFC 8017 section 8.1.2), SHA-384, 48-byte salt."""
    if len(sig) != key.modulus_bytes:
        return False
    s = _os2ip(sig)
    if s >= key.n:
        return False
    em_bits = key.n.bit_length() - 1
    em = _i2osp(pow(s, key.e, key.n), math.ceil(em_bits / 8))
    return emsa_pss_verify(msg, em, em_bits)


def finalize(key: PublicKey, msg: bytes, blind_sig: bytes, inv: int) -> bytes:
    """RFC 9474 Finalize: the signature of ``msg``; ``TokenError`` if it does not verify."""
    if len(blind_sig) != key.modulus_bytes:
        raise TokenError(f"blind signature must hold {key.modulus_bytes} bytes, "
                         f"got {len(blind_sig)}")
    sig = _i2osp(_os2ip(blind_sig) * inv % key.n, key.modulus_bytes)
    if not verify(key, msg, sig):
        raise TokenError("the issuer's blind signature does not verify")
    return sig


def unit_digest(period: str, epoch: int) -> bytes:
    """SHA-256 of the unit a token is for: "ldp-token-unit-v2" NUL period NUL epoch.

    It takes the place of RFC 9578's challenge digest: a token signed for one
    epoch does not verify for any other epoch or epoch length.  ``period`` is
    "hour" or "day", ``epoch`` the index (unix seconds // epoch length), in
    decimal: ``unit_digest("day", 20423)`` is SHA-256 of
    b"ldp-token-unit-v2\\x00day\\x0020423".
    """
    if period not in PERIODS:
        raise TokenError(f"token period must be one of {PERIODS}, got {period!r}")
    if type(epoch) is not int or epoch < 0:
        raise TokenError(f"token epoch must be an int >= 0, got {epoch!r}")
    return hashlib.sha256(f"ldp-token-unit-v2\x00{period}\x00{epoch}".encode()).digest()


def unit_digest_v1(metric: str, version: int, epoch: int) -> bytes:
    """The unit digest of version-1 tokens, bound to one metric version:
    SHA-256 of "ldp-token-unit-v1" NUL metric NUL version NUL epoch (the
    collector still accepts such tokens during the transition)."""
    text = f"ldp-token-unit-v1\x00{metric}\x00{version}\x00{epoch}"
    return hashlib.sha256(text.encode()).digest()


def token_input(nonce: bytes, unit: bytes, key_id: bytes) -> bytes:
    """token_type (2) || nonce (32) || unit digest (32) || key id (32): what is signed."""
    if len(nonce) != NONCE_BYTES:
        raise TokenError(f"nonce must hold {NONCE_BYTES} bytes, got {len(nonce)}")
    return TOKEN_TYPE.to_bytes(2, "big") + nonce + unit + key_id


@dataclass(frozen=True)
class PendingToken:
    """A token asked for and not yet signed: kept by the device until the answer comes.

    ``blinded`` is what the issuer sees; ``nonce`` and ``inv`` never leave the device.
    """

    period: str
    epoch: int
    nonce: bytes
    blinded: bytes
    inv: int


def prepare(key: PublicKey, period: str, epoch: int) -> PendingToken:
    """A fresh nonce for the unit (period, epoch), blinded for the issuer (steps 1, 2)."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    msg = token_input(nonce, unit_digest(period, epoch), key.key_id)
    blinded, inv = blind(key, msg)
    return PendingToken(period, epoch, nonce, blinded, inv)


def wire_token(key: PublicKey, pending: PendingToken, blind_sig: bytes) -> str:
    """The token the report carries: base64url(nonce || signature), verified first."""
    msg = token_input(pending.nonce, unit_digest(pending.period, pending.epoch), key.key_id)
    return b64url(pending.nonce + finalize(key, msg, blind_sig, pending.inv))


def parse_wire_token(token: str, modulus_bytes: int) -> tuple[bytes, bytes]:
    """``(nonce, signature)`` of a wire token; ``TokenError`` if it has the wrong size."""
    raw = unb64url(token)
    if len(raw) != NONCE_BYTES + modulus_bytes:
        raise TokenError(f"token must hold {NONCE_BYTES + modulus_bytes} bytes, got {len(raw)}")
    return raw[:NONCE_BYTES], raw[NONCE_BYTES:]
