// Conformance 1: the shared vectors generated from the Python core
// (scripts/gen_vectors.py), checked byte for byte.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { buildMechanism, isTwoLevel, type Report, type Spec } from "../src/mechanisms.js";
import { DrbgRng, HmacDrbg } from "../src/rng.js";
import { fromHex, toHex } from "../src/sha256.js";
import { memoContext, mechanismFingerprint, valueKey } from "../src/context.js";
import { pyFloatHex, pyFloatRepr } from "../src/pyjson.js";
import { offsetSeed, permanentSeed } from "../src/mechanisms.js";
import { batchJson, deviceToken } from "../src/wire.js";
import { registerAllForms } from "../src/forms.js";
import { alphabet, normalise } from "../src/alphabet.js";

registerAllForms();

const here = fileURLToPath(new URL(".", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8"));

interface Draw {
  value: number | string; seed: string; payload: string; secret?: string; permanent?: string; memo_key?: number; value_key?: string;
}
interface Case {
  spec: Spec; fingerprint: string; context: string; canonical_epsilon: number; draws: Draw[];
  strings?: [string, number[] | null][];
}

test("HMAC_DRBG matches the NIST CAVP vector", () => {
  const drbg = new HmacDrbg(fromHex(V.drbg.nist.seed));
  drbg.generate(128);
  assert.equal(toHex(drbg.generate(128)), V.drbg.nist.expected);
});

test("HMAC_DRBG integer draws consume the stream as Python does", () => {
  const rng = new DrbgRng(fromHex(V.drbg.ops_seed));
  for (const [op, arg, want] of V.drbg.ops as [string, number, number | number[]][]) {
    const got = op === "bits" ? rng.getrandbits(arg) : op === "range" ? rng.randrange(arg) : Array.from(rng.words(arg));
    assert.deepEqual(got, want, `${op}(${arg})`);
  }
});

test("Python float formatting: repr and hex", () => {
  for (const [x, repr, hex] of V.float_repr as [number, string, string][]) {
    assert.equal(pyFloatRepr(x), repr);
    assert.equal(pyFloatHex(x), hex);
  }
});

test("device tokens, permanent seeds and batch JSON bytes", () => {
  for (const [s, m, v, e, want] of V.tokens) assert.equal(deviceToken(fromHex(s), m, v, e), want);
  for (const [s, c, v, isFloat, want] of V.permanent_seeds) {
    assert.equal(toHex(permanentSeed(fromHex(s), c, v, isFloat)), want);
  }
  for (const [s, c, want, word] of V.offsets as [string, string, string, number][]) {
    assert.equal(toHex(offsetSeed(fromHex(s), c)), want);
    assert.equal(new DrbgRng(fromHex(want)).getrandbits(32), word);
  }
  const rows = (V.batch.rows as [string, number, number, string, string, string][]).map(
    ([metric, version, epoch, reportId, token, payload]) => ({ metric, version, epoch, reportId, token, payload }));
  assert.equal(batchJson(rows), V.batch.json);
});

test("a spec whose integers JSON.parse cannot hold exactly is refused", () => {
  for (const spec of V.unsafe_specs as Spec[]) {
    assert.ok((spec.params.permanent_a as number) > 2 ** 53);
    assert.throws(() => buildMechanism(spec), /permanent_a < 2\*\*53/);
  }
});

test("a memoised string spec whose domain_size JSON.parse rounds is refused", () => {
  for (const spec of V.unsafe_string_specs as Spec[]) {
    assert.ok((spec.params.domain_size as number) > 2 ** 53 && spec.params.levels === 2);
    assert.throws(() => buildMechanism(spec), /domain_size < 2\*\*53/);
  }
});

test("every mechanism: params, fingerprints, contexts, reports for fixed randomness", () => {
  const cases = V.mechanisms as Case[];
  const seen = new Set<string>();
  let draws = 0;
  for (const c of cases) {
    const m = buildMechanism(c.spec);
    seen.add(`${m.name}/${m.levels}`);
    assert.equal(m.epsilon, c.canonical_epsilon, c.spec.name);
    assert.equal(mechanismFingerprint(c.spec), c.fingerprint, c.spec.name);
    assert.equal(memoContext(c.spec), c.context);
    for (const [text, want] of c.strings ?? []) {
      // A string metric codes the app's string (NFC, casefold, alphabet, length) as Python.
      const got = m.input!(text);
      assert.deepEqual(typeof got === "string" ? null : Array.from(got as Uint16Array), want, `${c.spec.name} ${JSON.stringify(text)}`);
    }
    for (const d of c.draws) {
      const rng = new DrbgRng(fromHex(d.seed));
      const value = typeof d.value === "string" ? m.input!(d.value) as Uint16Array : d.value;
      if (isTwoLevel(m)) {
        const secret = fromHex(d.secret!);
        // A string's permanent response and memo key come from its symbols (the Client's input).
        const perm: Report = m.permanent(value as number, secret, c.context);
        assert.equal(m.encode(perm), d.permanent, `${c.spec.name} permanent(${d.value})`);
        assert.equal(m.encode(m.instant(perm, rng)), d.payload, `${c.spec.name} instant(${d.value})`);
        // The ledger key: the value, the memoised Piecewise mean's grid point, or a string's code.
        const memo = m.memoKey(value as number, secret, c.context);
        assert.equal(memo.key, d.memo_key, `${c.spec.name} memo key(${d.value})`);
        assert.equal(valueKey(secret, c.spec.name, c.fingerprint, memo.key, memo.numeric), d.value_key);
      } else {
        assert.equal(m.encode(m.perturb(value, rng)), d.payload, `${c.spec.name} perturb(${d.value})`);
      }
      draws++;
    }
  }
  assert.equal(seen.size, 24, [...seen].join(" "));
  console.log(`# vectors: ${cases.length} specs, ${draws} reports, ${seen.size} mechanism forms`);
});

test("Python's NFC + casefold: every code point where casefold is not lower, and the test strings", () => {
  const a = alphabet("bytes", 1, true);
  for (const [text, want] of V.casefold as [string, string][]) assert.equal(normalise(a, text), want, JSON.stringify(text));
  console.log(`# casefold: ${V.casefold.length} strings`);
});
