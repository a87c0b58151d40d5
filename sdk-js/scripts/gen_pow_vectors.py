"""Install proof-of-work vectors for @ldp-telemetry/sdk, generated FROM the Python core.

    PYTHONPATH=. python sdk-js/scripts/gen_pow_vectors.py > sdk-js/test/pow-vectors.json

tests/sdk_js/test_pow_vectors.py regenerates them and compares with the
committed file; sdk-js/test/pow.test.ts checks every entry with both scrypts of
the SDK (the pure TypeScript one of the browser, Node's ``crypto.scrypt``):

- ``rfc7914``: RFC 7914's PBKDF2-HMAC-SHA256 vectors (section 11) and its
  first three scrypt vectors (section 12; the fourth needs 1 GiB), as
  published, each also checked here against ``hashlib``;
- ``pow``: for fixed challenges and install keys, the install digest, the
  hash input (``pow_message``) and output of nonce 0, the first solving
  nonce (``ldp_core.pow.solve``) with its output, and whether the nonce
  before it fails, at the default difficulty and cheaper ones;
- ``leading_zero_bits``: the bit counting at byte boundaries.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

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

# RFC 7914 section 11 (PBKDF2-HMAC-SHA256) and section 12 (scrypt), as published.
PBKDF2 = [
    ("passwd", "salt", 1, 64,
     "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
     "49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783"),
    ("Password", "NaCl", 80000, 64,
     "4ddcd8f60b98be21830cee5ef22701f9641a4418d04c0414aeff08876b34ab56"
     "a1d425a1225833549adb841b51c9b3176a272bdebba1d078478f62b397f33c8d"),
]
SCRYPT = [
    ("", "", 16, 1, 1, 64,
     "77d6576238657b203b19ca42c18a0497f16b4844e3074ae8dfdffa3fede21442"
     "fcd0069ded0948f8326a753a0fc81f17e8d3e0fb2e0d3628cf35e20c38d18906"),
    ("password", "NaCl", 1024, 8, 16, 64,
     "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162"
     "2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640"),
    ("pleaseletmein", "SodiumChloride", 16384, 8, 1, 64,
     "7023bdcb3afd7348461c06cd81fd38ebfda8fbba904f8e3ea9b543f6545da1f2"
     "d5432955613f0fcf62d49705242a9af9e61e85dc0d651e40dfcf017b45575887"),
]
CASES = [
    (PowParams(n=16, r=1, p=1, bits=0), 1),
    (PowParams(n=16, r=1, p=1, bits=4), 2),
    (PowParams(n=16, r=1, p=1, bits=9), 3),
    (PowParams(n=1024, r=8, p=1, bits=6), 4),
    (PowParams(n=64, r=2, p=3, bits=5), 5),
    (DEFAULT_PARAMS, 6),
]


def rfc7914() -> dict[str, Any]:
    pbkdf2 = []
    for password, salt, c, dklen, out in PBKDF2:
        assert hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), c, dklen).hex() \
            == out
        pbkdf2.append({"password": password, "salt": salt, "c": c, "dklen": dklen, "out": out})
    vectors = []
    for password, salt, n, r, p, dklen, out in SCRYPT:
        assert scrypt(password.encode(), salt.encode(), n, r, p, dklen).hex() == out
        vectors.append({"password": password, "salt": salt, "n": n, "r": r, "p": p,
                        "dklen": dklen, "out": out})
    return {"pbkdf2_sha256": pbkdf2, "scrypt": vectors}


def pow_cases() -> list[dict[str, Any]]:
    out = []
    for params, i in CASES:
        challenge = hashlib.sha256(f"pow-vector-challenge-{i}".encode()).digest()[: 13 + i]
        key = hashlib.sha256(f"pow-vector-install-{i}".encode()).digest()
        digest = install_digest(key)
        nonce = solve(challenge, digest, params)
        assert nonce is not None and verify(challenge, digest, nonce, params)
        out.append({
            "params": {"n": params.n, "r": params.r, "p": params.p, "bits": params.bits},
            "challenge": challenge.hex(),
            "install_key": key.hex(),
            "install_digest": digest.hex(),
            "message_0": pow_message(challenge, digest, 0).hex(),
            "hash_0": pow_hash(challenge, digest, 0, params).hex(),
            "nonce": nonce,
            "hash": pow_hash(challenge, digest, nonce, params).hex(),
            "previous_fails": nonce == 0 or not verify(challenge, digest, nonce - 1, params),
        })
    return out


def main() -> None:
    bits = [bytes.fromhex(h) for h in ("ff", "80", "7f", "01", "00ff", "0001", "000080",
                                       "00000000", "0000000001")]
    doc = {
        "domain": DOMAIN.decode(),
        "rfc7914": rfc7914(),
        "pow": pow_cases(),
        "leading_zero_bits": [[b.hex(), leading_zero_bits(b)] for b in bits],
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
