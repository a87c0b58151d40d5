"""The server half of the report tokens: blind signing and bulk verification.

(In the collector package: ``ldp_server`` imports nothing of ``ldp_core``.)

The protocol is in ``ldp_core.tokens`` (RSABSSA-SHA384-PSS-Deterministic,
RFC 9474; the token layout of Privacy Pass type 0x0002, RFC 9578).  Here:

- ``TokenKey``: the issuer's RSA key (the ``cryptography`` package generates,
  loads and serialises it; PEM, PKCS#8);
- ``TokenKey.blind_sign``: RSASP1 on a blinded message with the CRT and the
  fault check of RFC 9474 section 4.3 (``cryptography`` has no raw RSA
  private operation, so it is Python ``int`` arithmetic: about 3 ms for a
  2048-bit key);
- ``Verifier.check``: RSASSA-PSS verification of a wire token for its unit
  with OpenSSL (``cryptography``), about 50 us per token; the collector runs
  a batch of them in a worker thread (``collector.tokens``).

>>> key = TokenKey.generate(2048)
>>> from ldp_core import tokens
>>> pending = tokens.prepare(key.public, "browser", 1, 20421)
>>> token = tokens.wire_token(key.public, pending, key.blind_sign(pending.blinded))
>>> len(token)
384
>>> v = Verifier([key.public])
>>> len(v.check(token, "browser", 1, 20421)), v.check(token, "browser", 1, 20422)
(32, None)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from ldp_core.tokens import (
    NONCE_BYTES,
    SALT_BYTES,
    PublicKey,
    TokenError,
    parse_wire_token,
    token_input,
    unit_digest,
)

__all__ = ["TokenKey", "Verifier"]

_PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=SALT_BYTES)


@dataclass(frozen=True)
class TokenKey:
    """The issuer's private key; ``public`` is what devices and verifiers use."""

    private: rsa.RSAPrivateKey

    @classmethod
    def generate(cls, bits: int = 2048) -> TokenKey:
        """A fresh key (RFC 9578 fixes 2048 bits for token type 0x0002)."""
        return cls(rsa.generate_private_key(public_exponent=65537, key_size=bits))

    @classmethod
    def from_pem(cls, pem: bytes, *, min_bits: int = 2048) -> TokenKey:
        """The key of a PEM file; ``min_bits`` is 2048 (RFC 9578) except for tests,
        which use a 1024-bit key in dev mode to mint tens of thousands of tokens fast."""
        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise TokenError(f"the token key must be an RSA key, got {type(key).__name__}")
        if key.key_size < min_bits:
            raise TokenError(f"the token key must have >= {min_bits} bits, got {key.key_size}")
        return cls(key)

    @classmethod
    def from_file(cls, path: str | Path, *, min_bits: int = 2048) -> TokenKey:
        return cls.from_pem(Path(path).read_bytes(), min_bits=min_bits)

    def to_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def public(self) -> PublicKey:
        numbers = self.private.public_key().public_numbers()
        return PublicKey(numbers.n, numbers.e)

    def blind_sign(self, blinded: bytes) -> bytes:
        """RFC 9474 BlindSign: ``blinded^d mod n``; ``TokenError`` for a value that is
        not a k-byte integer below n, or if the result fails the fault check."""
        public = self.public
        k = public.modulus_bytes
        if len(blinded) != k:
            raise TokenError(f"blinded message must hold {k} bytes, got {len(blinded)}")
        m = int.from_bytes(blinded, "big")
        if m >= public.n:
            raise TokenError("blinded message is not below the modulus")
        numbers = self.private.private_numbers()
        p, q = numbers.p, numbers.q
        s1 = pow(m % p, numbers.dmp1, p)
        s2 = pow(m % q, numbers.dmq1, q)
        s = s2 + q * ((s1 - s2) * numbers.iqmp % p)
        if pow(s, public.e, public.n) != m:  # RSAVP1 check against faults
            raise TokenError("blind signature failed its check")
        return s.to_bytes(k, "big")


class Verifier:
    """Checks wire tokens against the issuer's public keys (the newest first)."""

    def __init__(self, keys: Sequence[PublicKey]) -> None:
        if not keys:
            raise ValueError("a Verifier needs at least one public key")
        self._keys = [
            (key, key.key_id, rsa.RSAPublicNumbers(key.e, key.n).public_key()) for key in keys
        ]
        sizes = {key.modulus_bytes for key in keys}
        if len(sizes) != 1:
            raise ValueError(f"all token keys must have one size, got {sorted(sizes)}")
        (self.modulus_bytes,) = sizes
        self.token_chars = math.ceil((NONCE_BYTES + self.modulus_bytes) * 4 / 3)

    def check(self, token: object, metric: str, version: int, epoch: int,
              unit: bytes | None = None) -> bytes | None:
        """The token's nonce if it is a valid token of this unit, else None
        (``unit``: the unit's digest, if the caller has it already)."""
        if type(token) is not str or len(token) != self.token_chars:
            return None
        try:
            nonce, sig = parse_wire_token(token, self.modulus_bytes)
        except TokenError:
            return None
        unit = unit or unit_digest(metric, version, epoch)
        for _key, key_id, public in self._keys:
            try:
                public.verify(sig, token_input(nonce, unit, key_id), _PSS, hashes.SHA384())
            except InvalidSignature:
                continue
            return nonce
        return None

    def check_all(
        self, items: Sequence[tuple[object, str, int, int]]
    ) -> list[bytes | None]:
        """``check`` for each (token, metric, version, epoch), in order (run it off the loop).

        Each distinct (token, unit) of the batch is verified once: the reports of a
        device that share one token pay one RSA check (a repeated item gets the same
        answer; the store then counts at most one of them per unit).
        """
        units: dict[tuple[str, int, int], bytes] = {}
        seen: dict[tuple[object, str, int, int], bytes | None] = {}
        out: list[bytes | None] = []
        for item in items:
            token, metric, version, epoch = item
            if type(token) is str and item in seen:
                out.append(seen[item])
                continue
            key = (metric, version, epoch)
            if key not in units:
                units[key] = unit_digest(metric, version, epoch)
            nonce = self.check(token, metric, version, epoch, units[key])
            if type(token) is str:
                seen[item] = nonce
            out.append(nonce)
        return out
