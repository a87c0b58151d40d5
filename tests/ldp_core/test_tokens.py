"""Blind RSA report tokens against RFC 9474's own test vector, and the token layer.

The vector (tests/ldp_core/data/rfc9474_a3_pss_deterministic.json) is RFC 9474
Appendix A.3, RSABSSA-SHA384-PSS-Deterministic, copied from the RFC text.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from collector.token_crypto import TokenKey, Verifier
from ldp_core import tokens
from ldp_core.tokens import PublicKey, TokenError

VECTOR = json.loads((Path(__file__).parent / "data/rfc9474_a3_pss_deterministic.json").read_text())


def hx(name: str) -> bytes:
    return bytes.fromhex(VECTOR[name])


def vector_key() -> PublicKey:
    return PublicKey(int(VECTOR["n"], 16), int(VECTOR["e"], 16))


def test_pss_encoding_matches_the_rfc_vector() -> None:
    key = vector_key()
    em = tokens.emsa_pss_encode(hx("msg"), key.n.bit_length() - 1, hx("salt"))
    assert em.hex() == VECTOR["encoded_msg"]
    assert tokens.emsa_pss_verify(hx("msg"), em, key.n.bit_length() - 1)


def test_blind_matches_the_rfc_vector() -> None:
    key = vector_key()
    blinded, inv = tokens.blind(key, hx("msg"), salt=hx("salt"), inv=int(VECTOR["inv"], 16))
    assert blinded.hex() == VECTOR["blinded_msg"]
    assert inv == int(VECTOR["inv"], 16)


def test_blind_sign_matches_the_rfc_vector() -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    p, q, d = (int(VECTOR[x], 16) for x in ("p", "q", "d"))
    e, n = int(VECTOR["e"], 16), int(VECTOR["n"], 16)
    private = rsa.RSAPrivateNumbers(
        p, q, d, rsa.rsa_crt_dmp1(d, p), rsa.rsa_crt_dmq1(d, q), rsa.rsa_crt_iqmp(p, q),
        rsa.RSAPublicNumbers(e, n),
    ).private_key()
    assert TokenKey(private).blind_sign(hx("blinded_msg")).hex() == VECTOR["blind_sig"]


def test_finalize_matches_the_rfc_vector_and_openssl_agrees() -> None:
    key = vector_key()
    sig = tokens.finalize(key, hx("msg"), hx("blind_sig"), int(VECTOR["inv"], 16))
    assert sig.hex() == VECTOR["sig"]
    assert tokens.verify(key, hx("msg"), sig)
    # The same signature checks with OpenSSL's RSASSA-PSS (what the collector uses).
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    public = rsa.RSAPublicNumbers(key.e, key.n).public_key()
    public.verify(sig, hx("msg"), padding.PSS(padding.MGF1(hashes.SHA384()), 48),
                  hashes.SHA384())


def test_finalize_refuses_a_wrong_blind_signature() -> None:
    key = vector_key()
    bad = bytearray(hx("blind_sig"))
    bad[-1] ^= 1
    with pytest.raises(TokenError, match="does not verify"):
        tokens.finalize(key, hx("msg"), bytes(bad), int(VECTOR["inv"], 16))
    assert not tokens.verify(key, hx("msg")[:-1] + b"\x00", hx("sig"))


@pytest.fixture(scope="module")
def issuer() -> TokenKey:
    return TokenKey.generate(2048)


def test_the_unit_digest_is_the_spec_text() -> None:
    """Unit digest v2 = SHA-256("ldp-token-unit-v2" 0x00 period 0x00 epoch), decimal epoch:
    the bytes every SDK must hash (the JS SDK is checked against the same vectors)."""
    assert tokens.unit_digest("day", 20423) == hashlib.sha256(
        b"ldp-token-unit-v2\x00day\x0020423").digest()
    assert tokens.unit_digest("hour", 490152) == hashlib.sha256(
        b"ldp-token-unit-v2\x00hour\x00490152").digest()
    assert tokens.unit_digest_v1("browser", 1, 20421) == hashlib.sha256(
        b"ldp-token-unit-v1\x00browser\x001\x0020421").digest()
    for period, epoch in (("week", 1), ("Day", 1), ("day", -1), ("day", True), ("day", 1.0)):
        with pytest.raises(TokenError, match=r"token (period|epoch)"):
            tokens.unit_digest(period, epoch)  # type: ignore[arg-type]


def test_a_token_verifies_for_its_unit_only(issuer: TokenKey) -> None:
    pending = tokens.prepare(issuer.public, "day", 100)
    token = tokens.wire_token(issuer.public, pending, issuer.blind_sign(pending.blinded))
    verifier = Verifier([issuer.public])
    assert verifier.check(token, [tokens.unit_digest("day", 100)]) == pending.nonce
    for unit in (tokens.unit_digest("day", 101), tokens.unit_digest("hour", 100),
                 tokens.unit_digest_v1("browser", 1, 100)):
        assert verifier.check(token, [unit]) is None, unit
    day = [tokens.unit_digest("day", 100)]
    assert verifier.check(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1],
                          day) is None
    assert verifier.check("x" * len(token), day) is None
    assert verifier.check(7, day) is None
    # Units are tried in order: a later one that matches is found.
    assert verifier.check(token, [tokens.unit_digest("day", 1), day[0]]) == pending.nonce


def test_other_keys_tokens_are_refused_and_rotation_keeps_both(issuer: TokenKey) -> None:
    other = TokenKey.generate(2048)
    pending = tokens.prepare(other.public, "hour", 5)
    token = tokens.wire_token(other.public, pending, other.blind_sign(pending.blinded))
    unit = [tokens.unit_digest("hour", 5)]
    assert Verifier([issuer.public]).check(token, unit) is None
    assert Verifier([issuer.public, other.public]).check(token, unit) == pending.nonce


def test_the_issuer_sees_nothing_of_the_token(issuer: TokenKey) -> None:
    """Unlinkability: the blinded message is a uniform residue, independent of the token.

    Two requests for the same unit give blinded messages that share nothing, and
    neither contains the nonce or the final signature.
    """
    a = tokens.prepare(issuer.public, "day", 5)
    b = tokens.prepare(issuer.public, "day", 5)
    sig_a = issuer.blind_sign(a.blinded)
    token = tokens.wire_token(issuer.public, a, sig_a)
    assert a.blinded != b.blinded
    assert a.nonce not in a.blinded
    assert tokens.parse_wire_token(token, 256)[1] not in (sig_a, a.blinded)


def test_blind_sign_refuses_out_of_range_input(issuer: TokenKey) -> None:
    with pytest.raises(TokenError, match="must hold 256 bytes"):
        issuer.blind_sign(b"\x01" * 10)
    with pytest.raises(TokenError, match="not below the modulus"):
        issuer.blind_sign(b"\xff" * 256)


def test_blind_sign_is_the_textbook_rsa_private_operation(issuer: TokenKey) -> None:
    """The CRT result equals ``m^d mod n`` (Python ``int``), for random m: half of
    them have s1 < s2, the branch where the recombination reduces a negative value."""
    numbers = issuer.private.private_numbers()
    n, d = issuer.public.n, numbers.d
    rng = random.Random(9474)
    for _ in range(64):
        m = rng.randrange(n)
        assert issuer.blind_sign(m.to_bytes(256, "big")) == pow(m, d, n).to_bytes(256, "big")
    assert issuer.blind_sign(bytes(256)) == bytes(256)


def test_blind_sign_refuses_a_faulty_result(issuer: TokenKey) -> None:
    """RFC 9474 section 4.3: a fault in one CRT half (here a wrong exponent mod p)
    must not leave the issuer, since it reveals a factor of n (gcd(s^e - m, n))."""
    faulty = TokenKey(issuer.private)
    crt = faulty._crt
    object.__setattr__(faulty, "_crt", replace(crt, dmp1=crt.dmp1 + 2))
    pending = tokens.prepare(issuer.public, "day", 5)
    with pytest.raises(TokenError, match="failed its check"):
        faulty.blind_sign(pending.blinded)
    assert issuer.blind_sign(pending.blinded)


def test_public_key_json_round_trip_checks_the_key_id(issuer: TokenKey) -> None:
    body = issuer.public.to_json()
    assert PublicKey.from_json(body) == issuer.public
    with pytest.raises(TokenError, match="key_id"):
        PublicKey.from_json({**body, "key_id": "00" * 32})
