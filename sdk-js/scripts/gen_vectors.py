"""Shared conformance vectors for @ldp-telemetry/sdk, generated FROM the Python core.

    PYTHONPATH=. python sdk-js/scripts/gen_vectors.py > sdk-js/test/vectors.json

tests/sdk_js/test_sdk_js.py regenerates them and compares with the committed
file (so they cannot drift), then the Node tests check every entry byte for
byte: resolved params (thresholds, p*, q*, epsilons), fingerprints and memo
contexts, one-level reports for fixed HMAC_DRBG randomness (every family,
including OLH hashes, Hadamard outputs, the grid Piecewise / Hybrid cells and the
hierarchical histogram's cells),
permanent responses for fixed secrets and contexts (the memoised Piecewise
mean's alpha-point grid point and its device offsets, the memoised strings'
(level, seed, bucket) and their memo keys, the codes of the normalised strings),
instantaneous draws, the
exact P[cell | value] of the numeric grid forms, HMAC_DRBG outputs (NIST CAVP),
device tokens, ledger value keys, the lifetime ledger's default budget over spec
versions (the ledger's answers to a device's asks), Python float formatting, batch
JSON bytes, and blind RSA tokens (RFC 9474 A.3 as published, tokens of our units for fixed
nonce, salt and inverse, SHA-384 at its padding boundaries).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from client_sdk._device import DeviceState, mechanism_fingerprint, memo_context, payload_text
from client_sdk._ledger import Ask, MemoryLedger, Refusal, lifetime_cap
from ldp_core import tokens as blind_rsa
from ldp_core._rng import uniform_words
from ldp_core.mechanisms._alphabet import Alphabet
from ldp_core.memo import HmacDrbg, offset_seed, permanent_seed
from ldp_core.metric import MetricSpec
from ldp_core.wire import batch_json, device_token

SECRETS = [bytes(range(32)), hashlib.sha256(b"device-2").digest()]
ROOT = Path(__file__).resolve().parents[2]
RFC9474_A3 = ROOT / "tests" / "ldp_core" / "data" / "rfc9474_a3_pss_deterministic.json"


def seed(*parts: object) -> bytes:
    return hashlib.sha256("|".join(map(str, parts)).encode()).digest()


def specs() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cats = {2: ["a", "b"], 4: ["free", "basic", "pro", "team"], 37: [f"c{i}" for i in range(37)],
            1024: [f"v{i}" for i in range(1024)]}
    for eps, inf in ((0.5, 1.5), (1.0, 3.0), (3.0, 6.0)):
        for mech in ("binary_rr", "forced_response"):
            out.append({"name": f"b.{mech}.{eps}", "kind": "boolean", "epsilon": eps,
                        "mechanism": mech})
        out.append({"name": f"b.l.{eps}", "kind": "boolean", "epsilon": eps,
                    "mechanism": "binary_rr", "longitudinal": {"epsilon_inf": inf}})
        for mech in ("grr", "sue", "oue", "olh", "hadamard"):
            for d in (2, 4, 37, 1024):
                if mech in ("sue", "oue") and d == 1024 and eps != 1.0:
                    continue
                for two in (False, True):
                    spec: dict[str, Any] = {
                        "name": f"c.{mech}.{d}.{eps}.{int(two)}", "kind": "categorical",
                        "domain": cats[d], "epsilon": eps, "mechanism": mech}
                    if two:
                        spec["longitudinal"] = {"epsilon_inf": inf}
                    out.append(spec)
        for b, (lo, hi) in enumerate(((0, 120), (-3.5, 1e-5), (0, 1e17))):
            for mech in ("one_bit_mean", "piecewise", "hybrid"):
                for two in (False, True) if mech != "hybrid" else (False,):
                    prefix = "n" if mech == "one_bit_mean" else f"n.{mech}"
                    spec = {"name": f"{prefix}.{eps}.{b}.{int(two)}", "kind": "numeric", "lo": lo,
                            "hi": hi, "epsilon": eps, "mechanism": mech}
                    if two:
                        spec["longitudinal"] = {"epsilon_inf": inf}
                    out.append(spec)
    # The Piecewise draw over D > 2**53 (BigInt in JS), and hybrid's two pure ends.
    wide: tuple[tuple[str, float, float | None], ...] = (
        ("n.piecewise.10", 10.0, None), ("n.piecewise.4.14", 4.0, 14.0),
        ("n.hybrid.0.2", 0.2, None), ("n.hybrid.9", 9.0, None))
    for name, eps, eps_inf in wide:
        spec = {"name": name, "kind": "numeric", "lo": -1, "hi": 1, "epsilon": eps,
                "mechanism": name.split(".")[1]}
        if eps_inf is not None:
            spec["longitudinal"] = {"epsilon_inf": eps_inf}
        out.append(spec)
    return out + form_specs(cats)


#: String metrics: (alphabet, max_length, casefold), each at eps 1 and 4.
ALPHABETS = (("a-z", 6, True), ("a-z0-9_", 8, False), ("bytes", 2, True), ("à-ÿ", 3, True))


def form_specs(cats: dict[int, list[str]]) -> list[dict[str, Any]]:
    """Square Wave, the hierarchical histogram, the sketches and strings.  (A hashed sketch,
    d > 1024 with 1032+ seeds, is over the registry's counter cap: its hash is OLH's, checked
    by the OLH vectors.)"""
    out: list[dict[str, Any]] = []
    for eps in (0.5, 1.0, 3.0):
        for b, (lo, hi) in enumerate(((0, 120), (-3.5, 1e-5), (0, 1e17))):
            out.append({"name": f"n.square_wave.{eps}.{b}", "kind": "numeric", "lo": lo, "hi": hi,
                        "epsilon": eps, "mechanism": "square_wave",
                        "statistics": ["mean", "distribution", "quantiles"]})
            # Its levels' oracles: GRR, GRR, Hadamard, Hadamard at eps 0.5; all GRR at eps 3.
            out.append({"name": f"n.hierarchical.{eps}.{b}", "kind": "numeric", "lo": lo, "hi": hi,
                        "epsilon": eps, "mechanism": "hierarchical"})
        for mech in ("cms", "hcms"):
            for d in (2, 4, 37, 1024) if eps == 1.0 else (4, 37):
                out.append({"name": f"c.{mech}.{d}.{eps}", "kind": "categorical",
                            "domain": cats[d], "epsilon": eps, "mechanism": mech})
    for eps in (1.0, 4.0):
        for i, (alphabet, length, fold) in enumerate(ALPHABETS):
            out.append({"name": f"s.{i}.{length}.{int(fold)}.{eps}", "kind": "string",
                        "epsilon": eps, "mechanism": "prefix_olh", "alphabet": alphabet,
                        "max_length": length, "casefold": fold})
    # Memoised strings (prefix_memo): every alphabet, and at eps 1 (g = 29: under the
    # counter cap) a-z up to 11 symbols, the longest whose B**L (the params' domain_size)
    # JSON.parse holds exactly: 27**11 < 2**53 < 27**12.
    for eps, inf in ((1.0, 3.0), (4.0, 6.0)):
        longest = (("a-z", 11, True),) if eps == 1.0 else ()
        for i, (alphabet, length, fold) in enumerate((*ALPHABETS, *longest)):
            out.append({"name": f"s.l.{i}.{length}.{int(fold)}.{eps}", "kind": "string",
                        "epsilon": eps, "mechanism": "prefix_olh", "alphabet": alphabet,
                        "max_length": length, "casefold": fold,
                        "longitudinal": {"epsilon_inf": inf}})
    return out


#: Strings every string spec is asked to code (NFC, casefold, the alphabet, the length).
STRINGS = ("hello", "Zebra", "a", "", "zz_9", "Stra\u00dfe", "\u00dfa", "e\u0301t\u00e9", "\ufb01x",
           "\u212b\u00c0", "\u00c9COLE", "\u03a3\u03c2", "toolongstring", "x y", "\u13a0\uab70",
           "\U0001f600", "\u0130", "abc\u00e0", "\u00e9", "\u00df", "e\u0301",
           "\u00ff\u0178")


def values_of(spec: MetricSpec) -> list[Any]:
    if spec.kind == "string":
        m = spec.build()
        return [s for s in STRINGS if s and _codes(m, s) is not None]
    if spec.kind == "numeric":
        assert spec.lo is not None and spec.hi is not None
        span = spec.hi - spec.lo
        return [spec.lo, spec.hi, spec.lo + span / 3, spec.lo + span * 0.7071, spec.lo + span / 1e6]
    d = spec.domain_size
    return sorted({0, 1, d // 2, d - 1})


def _codes(m: Any, value: str) -> list[int] | None:
    """The symbols of ``value`` padded to max_length (the JS ``symbols``), None if refused."""
    try:
        return list(m.alphabet.digits(m.check_value(value)))
    except ValueError:
        return None


def mechanism_cases() -> list[dict[str, Any]]:
    cases = []
    for raw in specs():
        spec = MetricSpec.from_json(raw)
        m = spec.build()
        fingerprint = mechanism_fingerprint(spec)
        context = memo_context(spec, fingerprint)
        draws = []
        for v in values_of(spec):
            x = m.check_value(v)
            for k in range(3):
                s = seed(spec.name, repr(v), k)
                # A string's code may pass 2**53: the JS test codes the string itself.
                entry: dict[str, Any] = {"value": v if spec.kind == "string" else x,
                                         "seed": s.hex()}
                if m.levels == 1:
                    entry["payload"] = payload_text(m.encode(m._perturb(x, HmacDrbg(s))))
                else:
                    secret = SECRETS[k % 2]
                    perm = m.permanent_response(x, secret, context)  # type: ignore[attr-defined]
                    entry["secret"] = secret.hex()
                    entry["permanent"] = payload_text(
                        m.permanent.encode(perm))  # type: ignore[attr-defined]
                    entry["payload"] = payload_text(
                        m.encode(m._instant(perm, HmacDrbg(s))))  # type: ignore[attr-defined]
                    key = m.memo_key(x, secret, context)  # type: ignore[attr-defined]
                    entry["memo_key"] = key
                    entry["value_key"] = DeviceState(secret, MemoryLedger()).value_key(
                        spec.name, fingerprint, key)
                draws.append(entry)
        case = {"spec": spec.to_json(), "fingerprint": fingerprint, "context": context,
                "canonical_epsilon": m.epsilon, "draws": draws}
        if spec.kind == "string":
            case["strings"] = [[s, _codes(m, s)] for s in STRINGS]
        cases.append(case)
    return cases


#: (spec name, value): the numeric forms whose exact output law the Node channel test
#: checks 10^6 reports against (values off the grid, so the rounding is exercised).
CHANNELS = (("n.piecewise.1.0.0.0", 30.7), ("n.piecewise.1.0.0.1", 90.3),
            ("n.hybrid.1.0.0.0", 17.2), ("n.square_wave.1.0.0", 30.7),
            ("n.square_wave.3.0.1", -1.2), ("n.hierarchical.0.5.0", 30.7),
            ("n.hierarchical.3.0.1", -1.2))


def channel_cases() -> list[dict[str, Any]]:
    """P[cell | value] from the core's exact channel (``output_distribution``)."""
    by_name = {raw["name"]: raw for raw in specs()}
    out = []
    for name, value in CHANNELS:
        m = MetricSpec.from_json(by_name[name]).build()
        probs = [float(x) for x in m.output_distribution(value)]  # type: ignore[arg-type]
        out.append({"name": name, "value": value, "probs": probs})
    return out


def casefold_points() -> list[int]:
    """Code points whose casefold is not their lowercase (Python's Unicode)."""
    return [c for c in range(0x110000) if not 0xD800 <= c < 0xE000
            and chr(c).casefold() != chr(c).lower()]


def drbg_cases() -> dict[str, Any]:
    entropy = bytes.fromhex("ca851911349384bffe89de1cbdc46e6831e44d34a4fb935ee285dd14b71a7488")
    nonce = bytes.fromhex("659ba96c601dc69fc902940805ec0ca8")
    nist = {"seed": (entropy + nonce).hex(), "expected": (
        "e528e9abf2dece54d47c7e75e5fe302149f817ea9fb4bee6f4199697d04d5b89"
        "d54fbb978a15b5c443c9ec21036d2460b6f73ebad0dc2aba6e624abf07745bc1"
        "07694bb7547bb0995f70de25d6b29e2d3011bb19d27676c07162c8b5ccde0668"
        "961df86803482cb37ed6d5c0bb8d50cf1f50d476aa0458bdaba806f48be9dcb8")}
    drbg = HmacDrbg(entropy + nonce)
    drbg.generate(128)
    assert drbg.generate(128).hex() == nist["expected"]
    ops = []
    d2 = HmacDrbg(b"ops")
    plan = [("bits", 1), ("bits", 7), ("bits", 32), ("bits", 33), ("range", 6), ("range", 1),
            ("range", 2**32), ("range", 1093), ("bits", 23), ("words", 5), ("range", 3)]
    for op, arg in plan * 3:
        if op == "bits":
            ops.append([op, arg, d2.getrandbits(arg)])
        elif op == "range":
            ops.append([op, arg, d2.randrange(arg)])
        else:
            ops.append([op, arg, list(uniform_words(arg, d2))])
    return {"nist": nist, "ops_seed": b"ops".hex(), "ops": ops}


def token_cases() -> dict[str, Any]:
    """RFC 9474 A.3 as published, plus tokens of our units (period, epoch: unit digest
    v2) under its key for fixed nonce, salt and inverse (the blind signature is
    blinded^d mod n, the RFC's d)."""
    rfc = json.loads(RFC9474_A3.read_text())
    n, e, d = (int(rfc[x], 16) for x in ("n", "e", "d"))
    key = blind_rsa.PublicKey(n, e)
    cases = []
    for i, (period, epoch) in enumerate((("day", 20423), ("hour", 490152), ("day", 0))):
        nonce = seed("nonce", i)
        salt = hashlib.sha384(f"salt|{i}".encode()).digest()
        r = int.from_bytes(hashlib.sha512(f"r|{i}".encode()).digest() * 8, "big") % n
        inv = pow(r, -1, n)
        msg = blind_rsa.token_input(nonce, blind_rsa.unit_digest(period, epoch), key.key_id)
        blinded, _ = blind_rsa.blind(key, msg, salt=salt, inv=inv)
        blind_sig = pow(int.from_bytes(blinded, "big"), d, n).to_bytes(key.modulus_bytes, "big")
        pending = blind_rsa.PendingToken(period, epoch, nonce, blinded, inv)
        cases.append({"period": period, "epoch": epoch,
                      "unit_digest": blind_rsa.unit_digest(period, epoch).hex(),
                      "nonce": nonce.hex(), "salt": salt.hex(), "inv": format(inv, "x"),
                      "token_input": msg.hex(), "blinded": blinded.hex(),
                      "blind_sig": blind_sig.hex(),
                      "token": blind_rsa.wire_token(key, pending, blind_sig)})
    sha384 = [[m.hex(), hashlib.sha384(m).hexdigest()]
              for m in (b"", b"abc", bytes(range(111)), bytes(range(112)), bytes(range(128)),
                        bytes(range(129)), bytes(i % 251 for i in range(1000)))]
    return {"rfc9474_a3": rfc, "key": key.to_json(), "cases": cases, "sha384": sha384}


#: The default lifetime budget (issue 34, item 6): spec versions of one memoised name
#: (version, eps, eps_inf), each changing the parameters, and a device's records
#: (version, value, lifetime budget: None the default, "inf" none; the multiple).
LIFETIME_VERSIONS = ((1, 0.5, 1.0), (2, 0.45, 0.9), (3, 0.4, 0.8), (4, 0.35, 0.7),
                     (5, 1.0, 8.0), (6, 0.3, 0.6))
LIFETIME_RECORDS: tuple[tuple[int, str, float | str | None, float], ...] = (
    (1, "pro", None, 4), (1, "pro", None, 4), (2, "pro", None, 4), (3, "pro", None, 4),
    (4, "pro", None, 4), (4, "team", None, 4), (5, "pro", None, 4), (6, "pro", None, 4),
    (6, "team", None, 4), (6, "team", "inf", 4), (6, "basic", 5.5, 4), (6, "free", None, 6.5))


def lifetime_cases() -> dict[str, Any]:
    """The records of ``LIFETIME_RECORDS`` (one a day) as the ledger's asks, with the
    Python ledger's answers (status, epoch, lifetime spent after), and
    ``lifetime_cap`` (multiple x first draw, rounded down) bit for bit."""
    specs = {v: MetricSpec.from_json({
        "name": "plan", "kind": "categorical", "domain": ["free", "basic", "pro", "team"],
        "mechanism": "grr", "version": v, "epsilon": eps, "longitudinal": {"epsilon_inf": inf}})
        for v, eps, inf in LIFETIME_VERSIONS}
    device, ledger = DeviceState(SECRETS[0], MemoryLedger()), MemoryLedger()
    steps = []
    for day, (version, value, budget, multiple) in enumerate(LIFETIME_RECORDS):
        spec = specs[version]
        m = spec.build()
        fingerprint = mechanism_fingerprint(spec)
        point = m.memo_key(spec.index_of(value), SECRETS[0],  # type: ignore[attr-defined]
                           memo_context(spec, fingerprint))
        ask = Ask(spec.name, spec.version, fingerprint, spec.epoch_seconds,
                  1_800_000_000.0 + day * 86400, m.epsilon, m.epsilon,
                  device.value_key(spec.name, fingerprint, point), spec.epsilon_inf or 0.0,
                  float(budget) if isinstance(budget, str) else budget, multiple)
        made = ledger.charge(ask, lambda epoch: epoch)
        status = made.status if isinstance(made, Refusal) else "queued"
        spent = sum(t for _, _, t, _ in ledger.spend().lifetime)
        steps.append({"ask": {**ask._asdict(), "lifetime_budget": budget}, "status": status,
                      "epoch": made.epoch if isinstance(made, Refusal) else made,
                      "spent": spent})
    caps = [[k, first, lifetime_cap(Ask("m", 1, "", 1, 0.0, 0.0, 0.0, None, first, None, k),
                                    first)]
            for k, first in ((4, 1.0), (4, 0.7), (3, 0.1), (7, 0.9), (4.5, 1.1), (3, 1 / 3),
                             (1, 8.0), (6.5, 0.35))]
    return {"specs": [specs[v].to_json() for v, _, _ in LIFETIME_VERSIONS], "secret":
            SECRETS[0].hex(), "steps": steps, "caps": caps}


def main() -> None:
    floats = [1.0, 0.1, 1e-5, 1e-4, 123456789.0, 1e16, 1e15 + 0.5, 2.5e-300, 5e-324, -0.0, 0.0,
              -3.5, 1e17, 0.9999999983489763, 1 / 3, 2**53 + 0.0, 1.7976931348623157e308]
    tokens = [[s.hex(), m, v, e, device_token(s, m, v, e)]
              for s in SECRETS for m, v, e in (("browser", 1, 20421), ("ü.metric", 3, 0))]
    seeds = [[s.hex(), c, v, isinstance(v, float), permanent_seed(s, c, v).hex()]
             for s in SECRETS for c, v in (("app.theme|ab", 3), ("m|x", 12.5), ("m|é", 0.0))]
    offsets = [[s.hex(), c, offset_seed(s, c).hex(), HmacDrbg(offset_seed(s, c)).getrandbits(32)]
               for s in SECRETS for c in ("latency|ab", "m|\u00e9")]
    rows = [("browser", 1, 20421, "00" * 16, "11" * 32, "3"),
            ("olh\u2603\"\\\x7f\n", 2, 5, "ab" * 16, "cd" * 32, "[5,1]"),
            ("u", 1, 7, "ef" * 16, "01" * 32, '"AQ"')]
    batch = batch_json(*(list(c) for c in zip(*rows, strict=True)))
    vectors = {
        "mechanisms": mechanism_cases(),
        # Python's casefold of every code point where it is not str.lower (sdk-js casefold.ts),
        # and of the test strings, after NFC (Alphabet.normalise).
        "casefold": [[s, Alphabet.parse("bytes", 1, True).normalise(s)] for s in (
            *STRINGS, *(chr(c) for c in casefold_points()))],
        "channels": channel_cases(),
        # Weights of 2**53 and more (eps_inf 20): JSON.parse rounds them, so JS refuses.
        "unsafe_specs": [MetricSpec.from_json(
            {"name": "n.piecewise.wide", "kind": "numeric", "lo": 0, "hi": 1, "epsilon": 8.0,
             "mechanism": "piecewise", "longitudinal": {"epsilon_inf": 20.0}}).to_json()],
        # A memoised string metric whose domain_size 27**12 passes 2**53: JSON.parse rounds
        # it, so the fingerprint (the memo context) would not be Python's: JS refuses.
        "unsafe_string_specs": [MetricSpec.from_json(
            {"name": "s.l.wide", "kind": "string", "epsilon": 1.0, "mechanism": "prefix_olh",
             "alphabet": "a-z", "max_length": 12, "longitudinal": {"epsilon_inf": 3.0}}).to_json()],
        "drbg": drbg_cases(),
        "float_repr": [[x, repr(x), x.hex()] for x in floats],
        "tokens": tokens,
        "permanent_seeds": seeds,
        "offsets": offsets,
        "batch": {"rows": [list(r) for r in rows], "json": batch},
        "blind_rsa": token_cases(),
        "lifetime": lifetime_cases(),
    }
    json.dump(vectors, sys.stdout, indent=None, separators=(",", ":"), ensure_ascii=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
