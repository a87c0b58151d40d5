"""The install proof of work (``ldp_core.pow``): RFC 7914's vectors, binding, cost.

The shared vectors with the TypeScript SDK are checked for freshness in
tests/sdk_js/test_pow_vectors.py and byte for byte in sdk-js/test/pow.test.ts.
"""

from __future__ import annotations

import hashlib
import math

import pytest

from ldp_core.pow import (
    DEFAULT_PARAMS,
    DOMAIN,
    PowParams,
    install_digest,
    leading_zero_bits,
    pow_hash,
    pow_message,
    scrypt,
    solve,
    verify,
)

# RFC 7914 section 12, as published (the fourth vector needs 1 GiB: left out).
RFC7914 = [
    (b"", b"", 16, 1, 1,
     "77d6576238657b203b19ca42c18a0497f16b4844e3074ae8dfdffa3fede21442"
     "fcd0069ded0948f8326a753a0fc81f17e8d3e0fb2e0d3628cf35e20c38d18906"),
    (b"password", b"NaCl", 1024, 8, 16,
     "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162"
     "2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640"),
    (b"pleaseletmein", b"SodiumChloride", 16384, 8, 1,
     "7023bdcb3afd7348461c06cd81fd38ebfda8fbba904f8e3ea9b543f6545da1f2"
     "d5432955613f0fcf62d49705242a9af9e61e85dc0d651e40dfcf017b45575887"),
]
CHEAP = PowParams(n=16, r=1, p=1, bits=6)


@pytest.mark.parametrize(("password", "salt", "n", "r", "p", "out"), RFC7914)
def test_scrypt_matches_rfc7914(password: bytes, salt: bytes, n: int, r: int, p: int,
                                out: str) -> None:
    assert scrypt(password, salt, n, r, p, 64).hex() == out


def test_the_hash_input_is_length_prefixed_and_unambiguous() -> None:
    # Moving a byte between challenge and digest changes the input (plain concatenation
    # would not).
    assert pow_message(b"ab", b"c", 0) != pow_message(b"a", b"bc", 0)
    message = pow_message(b"ch", b"d" * 32, 258)
    assert message == (len(DOMAIN).to_bytes(4, "big") + DOMAIN + b"\0\0\0\2ch" + b"\0\0\0\x20"
                       + b"d" * 32 + b"\0\0\0\x08" + (258).to_bytes(8, "big"))


def test_a_solution_is_bound_to_its_challenge_and_install() -> None:
    key, other = bytes(32), bytes([7]) * 32
    nonce = solve(b"challenge-1", install_digest(key), CHEAP)
    assert nonce is not None and verify(b"challenge-1", install_digest(key), nonce, CHEAP)
    assert pow_hash(b"challenge-1", install_digest(other), nonce, CHEAP) != \
        pow_hash(b"challenge-1", install_digest(key), nonce, CHEAP)
    assert pow_hash(b"challenge-2", install_digest(key), nonce, CHEAP) != \
        pow_hash(b"challenge-1", install_digest(key), nonce, CHEAP)
    assert solve(b"challenge-1", install_digest(key), CHEAP, start=nonce + 1) != nonce
    assert not verify(b"challenge-1", install_digest(key), -1, CHEAP)
    assert not verify(b"challenge-1", install_digest(key), 1 << 64, CHEAP)


def test_solve_is_the_first_solution_and_max_tries_bounds_it() -> None:
    digest = install_digest(b"k" * 32)
    nonce = solve(b"c", digest, CHEAP)
    assert nonce is not None
    assert all(not verify(b"c", digest, k, CHEAP) for k in range(nonce))
    if nonce > 0:
        assert solve(b"c", digest, CHEAP, max_tries=nonce) is None


def test_the_number_of_evaluations_is_geometric_with_mean_two_to_the_bits() -> None:
    """200 solves at 6 bits: the mean of nonce + 1 is 64 with standard deviation
    sqrt(1 - 2^-6) * 64 / sqrt(200) = 4.5; a 5-sigma band fails by chance with
    probability < 1e-6 (and is deterministic here: the challenges are fixed)."""
    digest = install_digest(bytes(32))
    counts = []
    for i in range(200):
        nonce = solve(hashlib.sha256(b"%d" % i).digest(), digest, CHEAP)
        assert nonce is not None
        counts.append(nonce + 1)
    mean = sum(counts) / len(counts)
    sd = math.sqrt(1 - 2 ** -6) * 64 / math.sqrt(200)
    assert abs(mean - 64) < 5 * sd, mean


def test_params_are_checked_and_the_defaults_documented() -> None:
    assert PowParams(n=2048, r=8, p=1, bits=8) == DEFAULT_PARAMS
    assert DEFAULT_PARAMS.memory_bytes == 2 << 20 and DEFAULT_PARAMS.expected_evaluations == 256
    for bad, message in ((dict(n=3), "power of two.*got 3"), (dict(r=0), "r.*got 0"),
                         (dict(p=17), "p.*got 17"), (dict(bits=41), "bits.*got 41")):
        with pytest.raises(ValueError, match=message):
            PowParams(**bad)  # type: ignore[arg-type]


def test_leading_zero_bits() -> None:
    assert [leading_zero_bits(bytes.fromhex(h)) for h in ("80", "7f", "01", "0001", "0000")] == \
        [0, 1, 7, 15, 16]
