// Blind RSA tokens (src/tokens.ts) against RFC 9474 Appendix A.3 and against
// tokens the Python core (ldp_core.tokens) made for fixed randomness.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { fromHex, sha256, toHex } from "../src/sha256.js";
import { sha384 } from "../src/sha384.js";
import {
  b64url, blind, emsaPssEncode, emsaPssVerify, finalize, i2osp, keyFromJson, modPow, os2ip, prepare, publicKey,
  TokenError, tokenInput, unb64url, unitDigest, verify, wireToken,
} from "../src/tokens.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8")).blind_rsa;
const A3 = V.rfc9474_a3 as Record<string, string>;
const big = (hex: string) => BigInt(`0x${hex}`);

test("SHA-384 matches hashlib at every padding boundary", () => {
  for (const [msg, want] of V.sha384 as [string, string][]) assert.equal(toHex(sha384(fromHex(msg))), want, `${msg.length / 2} bytes`);
  // Split input hashes the same as the whole.
  assert.equal(toHex(sha384(fromHex("6162"), fromHex("63"))), (V.sha384 as [string, string][])[1][1]);
});

test("RFC 9474 A.3: encoded message, blinded message, signature", () => {
  const key = publicKey(big(A3.n), big(A3.e));
  const emBits = big(A3.n).toString(2).length - 1;
  const em = emsaPssEncode(fromHex(A3.msg), emBits, fromHex(A3.salt));
  assert.equal(toHex(em), A3.encoded_msg);
  assert.ok(emsaPssVerify(fromHex(A3.msg), em, emBits));
  const { blinded, inv } = blind(key, fromHex(A3.msg), { salt: fromHex(A3.salt), inv: big(A3.inv) });
  assert.equal(toHex(blinded), A3.blinded_msg);
  const sig = finalize(key, fromHex(A3.msg), fromHex(A3.blind_sig), inv);
  assert.equal(toHex(sig), A3.sig);
  assert.ok(verify(key, fromHex(A3.msg), sig));
  const other = fromHex(A3.msg);
  other[0] ^= 1;
  assert.equal(verify(key, other, sig), false);
  const bad = fromHex(A3.blind_sig);
  bad[bad.length - 1] ^= 1;
  assert.throws(() => finalize(key, fromHex(A3.msg), bad, inv), TokenError);
});

test("EMSA-PSS-VERIFY: any other salt encodes validly; every bit flipped in the RFC 9474 A.3 encoding is refused", () => {
  const msg = fromHex(A3.msg), emBits = big(A3.n).toString(2).length - 1, em = fromHex(A3.encoded_msg);
  assert.ok(emsaPssVerify(msg, em, emBits));
  assert.ok(emsaPssVerify(msg, emsaPssEncode(msg, emBits, new Uint8Array(48).fill(7)), emBits));
  assert.equal(emsaPssVerify(msg, em.subarray(1), emBits), false);
  assert.equal(emsaPssVerify(msg, em, emBits + 8), false);
  // The top bit (cleared: emBits = 8 emLen - 1), the zero padding, the 0x01, the salt, H, 0xbc:
  // every bit of the first, the boundary and the last bytes, one bit of each other byte.
  const dbLen = em.length - 49, edges = new Set([0, dbLen - 49, dbLen - 48, dbLen - 1, dbLen, em.length - 2, em.length - 1]);
  for (let i = 0; i < em.length; i++) {
    for (const bit of edges.has(i) ? [0, 1, 2, 3, 4, 5, 6, 7] : [i % 8]) {
      const bad = em.slice();
      bad[i] ^= 1 << bit;
      assert.equal(emsaPssVerify(msg, bad, emBits), false, `byte ${i} bit ${bit}`);
    }
  }
});

test("tokens of our units: the bytes ldp_core.tokens makes for fixed randomness", () => {
  const key = keyFromJson(V.key);
  assert.equal(toHex(key.keyId), V.key.key_id);
  assert.throws(() => keyFromJson({ ...V.key, key_id: "00".repeat(32) }), TokenError);
  for (const c of V.cases) {
    assert.equal(toHex(unitDigest(c.period, c.epoch)), c.unit_digest);
    assert.equal(toHex(tokenInput(fromHex(c.nonce), fromHex(c.unit_digest), key.keyId)), c.token_input);
    const p = prepare(key, c.period, c.epoch, { nonce: fromHex(c.nonce), salt: fromHex(c.salt), inv: big(c.inv) });
    assert.equal(toHex(p.blinded), c.blinded, `${c.period} ${c.epoch}`);
    assert.equal(wireToken(key, p, fromHex(c.blind_sig)), c.token, `${c.period} ${c.epoch}`);
    // A signature for one unit is no token of another (epoch, or epoch length).
    assert.throws(() => wireToken(key, { ...p, epoch: c.epoch + 1 }, fromHex(c.blind_sig)), TokenError);
    const other = c.period === "day" ? "hour" : "day";
    assert.throws(() => wireToken(key, { ...p, period: other }, fromHex(c.blind_sig)), TokenError);
  }
});

test("unit digest v2: SHA-256 of the spec text; other periods and epochs refused", () => {
  assert.equal(toHex(unitDigest("day", 20423)), toHex(sha256(new TextEncoder().encode("ldp-token-unit-v2\u0000day\u000020423"))));
  for (const [period, epoch] of [["week", 1], ["Day", 1], ["day", -1], ["day", 1.5], ["day", 2 ** 53]] as [string, number][]) {
    assert.throws(() => unitDigest(period, epoch), TokenError, `${period} ${epoch}`);
  }
});

test("fresh randomness: the blinded message hides the nonce, the token unblinds and verifies", () => {
  // The RFC publishes the vector's private exponent d: sign as the issuer would.
  const key = publicKey(big(A3.n), big(A3.e));
  const a = prepare(key, "day", 7), b = prepare(key, "day", 7);
  assert.notEqual(toHex(a.nonce), toHex(b.nonce));
  assert.notEqual(toHex(a.blinded), toHex(b.blinded));
  const blindSig = i2osp(modPow(os2ip(a.blinded), big(A3.d), key.n), key.k);
  const token = unb64url(wireToken(key, a, blindSig));
  assert.equal(token.length, 32 + key.k);
  assert.equal(toHex(token.subarray(0, 32)), toHex(a.nonce));
  assert.ok(verify(key, tokenInput(a.nonce, unitDigest("day", 7), key.keyId), token.subarray(32)));
  assert.ok(!toHex(a.blinded).includes(toHex(a.nonce)));
});

test("base64url round trip and refusals", () => {
  for (let n = 0; n < 40; n++) {
    const bytes = Uint8Array.from({ length: n }, (_, i) => (i * 37 + n) & 255);
    const text = b64url(bytes);
    assert.equal(text, Buffer.from(bytes).toString("base64url"));
    assert.deepEqual(unb64url(text), bytes);
  }
  assert.throws(() => unb64url("ab+c"), TokenError);
  assert.throws(() => unb64url("a"), TokenError);
});
