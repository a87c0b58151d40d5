"""The install proof of work: scrypt (RFC 7914) with leading zero bits, bound to one install.

A new install pays this once, when it registers with the token issuer
(``collector.routers.installs``); a fake install pays it too, so the price of
a Sybil device is the work below, not zero.  The device half (``solve``) is
also in sdk-js/src/pow.ts; both are checked against sdk-js/test/pow-vectors.json.

The hash input binds the server's challenge, the install and the nonce, each
length-prefixed (4-byte big-endian length, then the bytes), so no two inputs
share an encoding::

    message = lp(DOMAIN) || lp(challenge) || lp(install_digest) || lp(nonce)
    out     = scrypt(password=message, salt=DOMAIN, N, r, p, dkLen=32)
    valid   iff the first ``bits`` bits of ``out`` (most significant bit of out[0]
            first) are zero

with ``DOMAIN = b"ldp-install-pow/1"``, ``install_digest = SHA-256(install key)``
(the 32 raw bytes of ``LDP-Install-Key``: a solution for one key is no
solution for another) and ``nonce`` the 8-byte big-endian counter.

Cost, for ``bits`` = b: each nonce passes with probability 2^-b independently,
so the number of scrypt evaluations to a solution is geometric with mean 2^b
(standard deviation about 2^b too: the p95 is ln(20) = 3.0 times the mean, the
p99 4.6 times); verification is ONE evaluation.  One evaluation fills and reads
128·N·r bytes (scrypt's ROMix array V), so the defaults hold 2 MiB per
evaluation in flight: a GPU or ASIC that runs many guesses at once needs that
much memory per guess.  The defaults (N = 2048, r = 8, p = 1, b = 8: 256
evaluations expected) were sized on this project's 2-core build machine, where
one evaluation takes ~4 ms: ~1 s of one core to solve, ~4 ms to verify
(benchmarks/bench_pow.py; the table is in docs/performance.md).

>>> params = PowParams(n=16, r=1, p=1, bits=4)
>>> proof = solve(b"challenge", install_digest(bytes(32)), params)
>>> verify(b"challenge", install_digest(bytes(32)), proof, params)
True
>>> verify(b"challenge", install_digest(bytes([1]) * 32), proof, params)
False
>>> PowParams(n=1000, r=8, p=1, bits=8)
Traceback (most recent call last):
ValueError: scrypt N must be a power of two in [2, 2**20], got 1000
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

__all__ = [
    "DEFAULT_PARAMS",
    "DOMAIN",
    "NONCE_BYTES",
    "PowParams",
    "install_digest",
    "leading_zero_bits",
    "pow_hash",
    "pow_message",
    "scrypt",
    "solve",
    "verify",
]

DOMAIN = b"ldp-install-pow/1"
NONCE_BYTES = 8
#: Bounds any party will evaluate (a verifier never runs an unbounded scrypt).
MAX_LOG2_N, MAX_R, MAX_P, MAX_BITS = 20, 32, 16, 40


@dataclass(frozen=True)
class PowParams:
    """scrypt's N (a power of two), r, p, and the zero bits a solution needs.

    >>> PowParams().memory_bytes, PowParams().expected_evaluations
    (2097152, 256)
    """

    n: int = 2048
    r: int = 8
    p: int = 1
    bits: int = 8

    def __post_init__(self) -> None:
        if not (2 <= self.n <= 1 << MAX_LOG2_N and self.n & (self.n - 1) == 0):
            raise ValueError(f"scrypt N must be a power of two in [2, 2**{MAX_LOG2_N}], "
                             f"got {self.n}")
        if not 1 <= self.r <= MAX_R:
            raise ValueError(f"scrypt r must be in [1, {MAX_R}], got {self.r}")
        if not 1 <= self.p <= MAX_P:
            raise ValueError(f"scrypt p must be in [1, {MAX_P}], got {self.p}")
        if not 0 <= self.bits <= MAX_BITS:
            raise ValueError(f"bits must be in [0, {MAX_BITS}], got {self.bits}")

    @property
    def memory_bytes(self) -> int:
        """What one evaluation holds: scrypt's V array, 128·N·r bytes."""
        return 128 * self.n * self.r

    @property
    def expected_evaluations(self) -> int:
        """Mean scrypt evaluations of a solve: 2^bits."""
        return 1 << self.bits

    def to_json(self) -> dict[str, int | str]:
        """The params as the challenge endpoint sends them."""
        return {"alg": "scrypt", "n": self.n, "r": self.r, "p": self.p, "bits": self.bits}


DEFAULT_PARAMS = PowParams()


def scrypt(password: bytes, salt: bytes, n: int, r: int, p: int, dklen: int = 32) -> bytes:
    """RFC 7914 scrypt (OpenSSL through ``hashlib``; releases the GIL while it runs).

    >>> scrypt(b"", b"", 16, 1, 1, 8).hex()   # RFC 7914 section 12, first vector
    '77d6576238657b20'
    """
    maxmem = 128 * r * (n + p + 2) + (1 << 16)
    return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=maxmem, dklen=dklen)


def install_digest(install_key: bytes) -> bytes:
    """SHA-256 of the install key's raw bytes: what a proof is bound to."""
    return hashlib.sha256(install_key).digest()


def _lp(part: bytes) -> bytes:
    return struct.pack(">I", len(part)) + part


def pow_message(challenge: bytes, digest: bytes, nonce: int) -> bytes:
    """The scrypt password of one guess (see the module docstring).

    >>> pow_message(b"c", b"d", 1).hex()
    '000000116c64702d696e7374616c6c2d706f772f3100000001630000000164000000080000000000000001'
    """
    return _lp(DOMAIN) + _lp(challenge) + _lp(digest) + _lp(nonce.to_bytes(NONCE_BYTES, "big"))


def pow_hash(challenge: bytes, digest: bytes, nonce: int, params: PowParams) -> bytes:
    """The 32-byte scrypt output of one guess."""
    return scrypt(pow_message(challenge, digest, nonce), DOMAIN, params.n, params.r, params.p)


def leading_zero_bits(data: bytes) -> int:
    """Zero bits before the first one bit, most significant bit of data[0] first.

    >>> leading_zero_bits(bytes([0, 0x10, 0xff])), leading_zero_bits(bytes(2))
    (11, 16)
    """
    value = int.from_bytes(data, "big")
    return len(data) * 8 - value.bit_length()


def solve(challenge: bytes, digest: bytes, params: PowParams, *, start: int = 0,
          max_tries: int | None = None) -> int | None:
    """The first nonce from ``start`` whose hash has ``params.bits`` leading zero bits,
    or None after ``max_tries`` guesses (no clock: the caller bounds the work)."""
    end = 1 << (8 * NONCE_BYTES) if max_tries is None else min(start + max_tries,
                                                               1 << (8 * NONCE_BYTES))
    for nonce in range(start, end):
        if leading_zero_bits(pow_hash(challenge, digest, nonce, params)) >= params.bits:
            return nonce
    return None


def verify(challenge: bytes, digest: bytes, nonce: int, params: PowParams) -> bool:
    """Whether ``nonce`` solves the challenge for this install: one scrypt evaluation."""
    if not 0 <= nonce < 1 << (8 * NONCE_BYTES):
        return False
    return leading_zero_bits(pow_hash(challenge, digest, nonce, params)) >= params.bits
