// The install proof of work: RFC 7914's vectors and the shared PoW vectors generated from
// the Python core (scripts/gen_pow_vectors.py), each with both scrypts of the SDK.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { pbkdf2Sha256, scrypt } from "../src/scrypt.js";
import { nodeScrypt } from "../src/scrypt-node.js";
import { DOMAIN, checkParams, installDigest, leadingZeroBits, powHash, powMessage, solvePow, verifyPow,
  type PowParams, type ScryptFn } from "../src/pow.js";
import { fromHex, toHex, utf8 } from "../src/sha256.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/pow-vectors.json`, "utf8"));

interface ScryptVector { password: string; salt: string; n: number; r: number; p: number; dklen: number; out: string }
interface PowCase {
  params: PowParams; challenge: string; install_key: string; install_digest: string; message_0: string;
  hash_0: string; nonce: number; hash: string; previous_fails: boolean;
}

const SCRYPTS: [string, ScryptFn][] = [["typescript", scrypt], ["node:crypto", nodeScrypt]];

test("the domain is the Python core's", () => {
  assert.equal(toHex(DOMAIN), toHex(utf8(V.domain)));
});

test("PBKDF2-HMAC-SHA256 matches RFC 7914 section 11", () => {
  for (const v of V.rfc7914.pbkdf2_sha256) {
    assert.equal(toHex(pbkdf2Sha256(utf8(v.password), utf8(v.salt), v.c, v.dklen)), v.out);
  }
});

for (const [name, fn] of SCRYPTS) {
  test(`scrypt (${name}) matches RFC 7914 section 12`, async () => {
    const vectors = V.rfc7914.scrypt as ScryptVector[];
    assert.equal(vectors.length, 3);
    for (const v of vectors) {
      const out = await fn(utf8(v.password), utf8(v.salt), v.n, v.r, v.p, v.dklen);
      assert.equal(toHex(out), v.out, `N=${v.n} r=${v.r} p=${v.p}`);
    }
  });

  test(`proof-of-work vectors (${name}) match the Python core`, async () => {
    const cases = V.pow as PowCase[];
    assert.ok(cases.length >= 6);
    for (const c of cases) {
      const challenge = fromHex(c.challenge);
      const digest = installDigest(fromHex(c.install_key));
      assert.equal(toHex(digest), c.install_digest);
      assert.equal(toHex(powMessage(challenge, digest, 0)), c.message_0);
      assert.equal(toHex(await powHash(challenge, digest, 0, c.params, fn)), c.hash_0);
      assert.equal(toHex(await powHash(challenge, digest, c.nonce, c.params, fn)), c.hash);
      assert.ok(await verifyPow(challenge, digest, c.nonce, c.params, fn));
      assert.ok(c.previous_fails);
      if (c.nonce > 0) assert.equal(await verifyPow(challenge, digest, c.nonce - 1, c.params, fn), false);
      // The first solution from 0 is the Python core's (cheap cases only: the search runs).
      if (c.params.n * c.params.r <= 1024 || c.nonce < 32) {
        assert.equal(await solvePow(challenge, digest, c.params, { scrypt: fn }), c.nonce);
      }
      // Bound to the install: the same challenge and nonce hash otherwise for another key.
      const other = installDigest(utf8("another install"));
      assert.notEqual(toHex(await powHash(challenge, other, c.nonce, c.params, fn)), c.hash);
    }
  });
}

test("leading zero bits count from the most significant bit of the first byte", () => {
  for (const [hex, bits] of V.leading_zero_bits as [string, number][]) assert.equal(leadingZeroBits(fromHex(hex)), bits, hex);
});

test("bad params and nonces are refused naming the value", async () => {
  assert.throws(() => checkParams({ n: 1000, r: 8, p: 1, bits: 8 }), /power of two.*got 1000/);
  assert.throws(() => checkParams({ n: 1024, r: 8, p: 1, bits: 41 }), /bits.*got 41/);
  assert.throws(() => powMessage(new Uint8Array(1), new Uint8Array(32), -1), /nonce.*got -1/);
  assert.equal(await solvePow(new Uint8Array(4), new Uint8Array(32), { n: 16, r: 1, p: 1, bits: 40 }, { maxTries: 3 }), null);
});
