"""The server half of the report tokens: blind signing and bulk verification.

(In the collector package: ``ldp_server`` imports nothing of ``ldp_core``.)

The protocol is in ``ldp_core.tokens`` (RSABSSA-SHA384-PSS-Deterministic,
RFC 9474; the token layout of Privacy Pass type 0x0002, RFC 9578).  Here:

- ``TokenKey``: the issuer's RSA key (the ``cryptography`` package generates,
  loads and serialises it; PEM, PKCS#8);
- ``TokenKey.blind_sign``: RSASP1 on a blinded message with the CRT and the
  fault check of RFC 9474 section 4.3 (``cryptography`` has no raw RSA
  private operation, so it is GMP's constant-time ``mpz_powm_sec`` through
  ``gmpy2``: 1.9 ms for a 2048-bit key, against 9.8 ms with Python ``int``);
- ``Verifier.check``: RSASSA-PSS verification of a wire token for its unit
  with OpenSSL (``cryptography``), 25-45 us per token; the collector runs a
  batch of them in a worker thread (``collector.tokens``), each distinct
  token once, with a bounded cache of tokens already verified.

>>> key = TokenKey.generate(2048)
>>> from ldp_core import tokens
>>> pending = tokens.prepare(key.public, "day", 20421)
>>> token = tokens.wire_token(key.public, pending, key.blind_sign(pending.blinded))
>>> len(token)
384
>>> v = Verifier([key.public])
>>> day = tokens.unit_digest("day", 20421)
>>> len(v.check(token, [day])), v.check(token, [tokens.unit_digest("day", 20422)])
(32, None)
>>> v.check_all([(token, (day,))] * 20) == [pending.nonce] * 20, v.verifications
(True, 2)
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from hashlib import blake2b
from pathlib import Path

import gmpy2
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from gmpy2 import mpz

from ldp_core.tokens import (
    NONCE_BYTES,
    SALT_BYTES,
    PublicKey,
    TokenError,
    parse_wire_token,
    token_input,
)

__all__ = ["TokenKey", "Verifier"]

_PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=SALT_BYTES)


@dataclass(frozen=True)
class _Crt:
    """The numbers of RSASP1 with the CRT, as GMP integers (read once per key)."""

    n: mpz
    e: mpz
    p: mpz
    q: mpz
    dmp1: mpz
    dmq1: mpz
    iqmp: mpz
    k: int

    @classmethod
    def of(cls, private: rsa.RSAPrivateKey) -> _Crt:
        numbers = private.private_numbers()
        public = numbers.public_numbers
        return cls(mpz(public.n), mpz(public.e), mpz(numbers.p), mpz(numbers.q),
                   mpz(numbers.dmp1), mpz(numbers.dmq1), mpz(numbers.iqmp),
                   (public.n.bit_length() + 7) // 8)


@dataclass(frozen=True)
class TokenKey:
    """The issuer's private key; ``public`` is what devices and verifiers use."""

    private: rsa.RSAPrivateKey
    _crt: _Crt = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_crt", _Crt.of(self.private))

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
        c = self._crt
        if len(blinded) != c.k:
            raise TokenError(f"blinded message must hold {c.k} bytes, got {len(blinded)}")
        m = mpz(int.from_bytes(blinded, "big"))
        if m >= c.n:
            raise TokenError("blinded message is not below the modulus")
        # The input is blinded (uniform mod n to us), but the exponents are the
        # private key: powmod_sec is GMP's constant-time mpz_powm_sec (odd
        # moduli), 6-15 % slower than the variable-time powmod for 2048 bits
        # (benchmarks/bench_tokens.py --sign): cheap for no timing channel.
        s1 = gmpy2.powmod_sec(m % c.p, c.dmp1, c.p)
        s2 = gmpy2.powmod_sec(m % c.q, c.dmq1, c.q)
        s = s2 + c.q * ((s1 - s2) * c.iqmp % c.p)
        if gmpy2.powmod(s, c.e, c.n) != m:  # RSAVP1 check against faults
            raise TokenError("blind signature failed its check")
        return int(s).to_bytes(c.k, "big")


class Verifier:
    """Checks wire tokens against the issuer's public keys (the newest first).

    ``check_all`` verifies each distinct (token, units) of a batch once (a
    device's batch carries one token for all its metrics of an epoch) and
    keeps the last ``cache_size`` successful checks: the check is deterministic,
    so a token seen valid for a unit stays valid for it while the keys are the
    same.  A cache entry is a 32-byte BLAKE2b digest of (unit digest, token)
    and the 32-byte nonce: 218 bytes of Python objects each, 14.3 MB at the
    default 65,536 entries (``tracemalloc``, CPython 3; per collector process).
    Failures are never cached: forged tokens cannot fill it.
    """

    def __init__(self, keys: Sequence[PublicKey], *, cache_size: int = 65536) -> None:
        if not keys:
            raise ValueError("a Verifier needs at least one public key")
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        self._keys = [
            (key, key.key_id, rsa.RSAPublicNumbers(key.e, key.n).public_key()) for key in keys
        ]
        sizes = {key.modulus_bytes for key in keys}
        if len(sizes) != 1:
            raise ValueError(f"all token keys must have one size, got {sorted(sizes)}")
        (self.modulus_bytes,) = sizes
        self.token_chars = math.ceil((NONCE_BYTES + self.modulus_bytes) * 4 / 3)
        self.cache_size = cache_size
        self._cache: OrderedDict[bytes, bytes] = OrderedDict()
        self._lock = threading.Lock()
        #: RSA verifications run (not answered from a batch or the cache).
        self.verifications = 0

    def check(self, token: object, units: Sequence[bytes]) -> bytes | None:
        """The token's nonce if it is a valid token of one of ``units`` (unit digests,
        tried in order), else None."""
        if type(token) is not str or len(token) != self.token_chars:
            return None
        raw = token.encode()
        parsed: tuple[bytes, bytes] | None = None
        for unit in units:
            # The cache first: most tokens of a relay's batch were verified before,
            # and their answer needs neither the base64 decode nor the RSA check.
            slot = blake2b(unit + raw, digest_size=32).digest()
            with self._lock:
                hit = self._cache.get(slot)
                if hit is not None:
                    self._cache.move_to_end(slot)
                    return hit
            if parsed is None:
                try:
                    parsed = parse_wire_token(token, self.modulus_bytes)
                except TokenError:
                    return None
            nonce, sig = parsed
            if self._verify(nonce, sig, unit):
                if self.cache_size:
                    with self._lock:
                        self._cache[slot] = nonce
                        if len(self._cache) > self.cache_size:
                            self._cache.popitem(last=False)
                return nonce
        return None

    def cached_all(
        self, items: Sequence[tuple[object, tuple[bytes, ...]]], *, most: int = 32
    ) -> list[bytes | None] | None:
        """``check_all``'s answer if the cache holds every distinct pair (at most
        ``most`` of them), else None: no RSA, so cheap enough for the event loop,
        where a single report with a known token skips the worker-thread hop.

        A pair the cache does not hold may still be valid: None, never a refusal.
        """
        distinct = dict.fromkeys(items)
        if len(distinct) > most:
            return None
        for token, units in distinct:
            if type(token) is not str or len(token) != self.token_chars:
                return None
            raw = token.encode()
            for unit in units:
                with self._lock:
                    hit = self._cache.get(blake2b(unit + raw, digest_size=32).digest())
                if hit is not None:
                    distinct[(token, units)] = hit
                    break
            else:
                return None
        return [distinct[item] for item in items]

    def _verify(self, nonce: bytes, sig: bytes, unit: bytes) -> bool:
        self.verifications += 1
        for _key, key_id, public in self._keys:
            try:
                public.verify(sig, token_input(nonce, unit, key_id), _PSS, hashes.SHA384())
            except InvalidSignature:
                continue
            return True
        return False

    def check_all(self, items: Sequence[tuple[object, tuple[bytes, ...]]]) -> list[bytes | None]:
        """``check`` for each (token, units), in order, each distinct pair once
        (run it off the event loop)."""
        seen: dict[tuple[object, tuple[bytes, ...]], bytes | None] = {}
        out: list[bytes | None] = []
        for token, units in items:
            key = (token, units)
            if key not in seen:
                seen[key] = self.check(token, units) if type(token) is str else None
            out.append(seen[key])
        return out
