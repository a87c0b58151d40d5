// Install registration against a real collector (tests/sdk_js/test_pow_vectors.py starts
// it with a cheap difficulty): LDP_E2E_URL, LDP_E2E_KEY (the ingest key).
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { registerInstall } from "../src/register.js";
import { nodeScrypt } from "../src/scrypt-node.js";
import { solvePow, type PowParams, type ScryptFn } from "../src/pow.js";
import { scrypt } from "../src/scrypt.js";
import type { Http } from "../src/stock.js";
import { b64url } from "../src/tokens.js";

const url = process.env.LDP_E2E_URL!, key = process.env.LDP_E2E_KEY!;

const http: Http = async (method, path, body, headers = {}) => {
  const r = await fetch(url + path, { method, body, headers: { Authorization: `Bearer ${key}`, ...headers } });
  return { status: r.status, body: await r.text(), retryAfter: r.headers.get("retry-after") };
};

for (const [name, fn] of [["typescript", scrypt], ["node:crypto", nodeScrypt]] as [string, ScryptFn][]) {
  test(`a new install registers once with the ${name} scrypt, then pays nothing`, async () => {
    let solves = 0;
    const solve = (c: Uint8Array, d: Uint8Array, p: PowParams) => { solves++; return solvePow(c, d, p, { scrypt: fn }); };
    const install = b64url(new Uint8Array(randomBytes(32)));
    const before = await http("POST", "/v1/installs", "{}", { "LDP-Install-Key": install });
    assert.equal(before.status, 403);
    assert.deepEqual(await registerInstall(http, install, { solve }), { status: "registered" });
    assert.equal(solves, 1);
    assert.deepEqual(await registerInstall(http, install, { solve }), { status: "registered" });
    assert.equal(solves, 1);
    const after = await http("POST", "/v1/installs", "{}", { "LDP-Install-Key": install });
    assert.equal(after.status, 200);
  });
}

test("a refused ingest key and a dead collector are outcomes, not exceptions", async () => {
  const wrong: Http = async (method, path, body, headers = {}) => {
    const r = await fetch(url + path, { method, body, headers: { Authorization: "Bearer wrong-key-0123456789abcdefgh", ...headers } });
    return { status: r.status, body: await r.text(), retryAfter: r.headers.get("retry-after") };
  };
  const install = b64url(new Uint8Array(randomBytes(32)));
  assert.deepEqual(await registerInstall(wrong, install), { status: "refused", code: "invalid_key" });
  const dead: Http = async () => { throw new TypeError("fetch failed"); };
  assert.deepEqual(await registerInstall(dead, install), { status: "busy", code: "TypeError" });
});
