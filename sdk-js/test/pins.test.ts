// Issuer key pins (src/pins.ts) and where the Client takes them from; the
// behaviour against real collectors is in e2e-client.ts.  No network here:
// the Clients are opened on a loopback URL that nothing listens on and never
// asked to deliver.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client, ConfigError, MemoryStore, openNodeClient, type Spec } from "../src/node.js";
import { issuerPins } from "../src/pins.js";

const A = "ab".repeat(32), B = "cd".repeat(32);
// A GRR spec over ["a", "b"] as the Python core registers it (from the shared vectors).
const here = fileURLToPath(new URL(".", import.meta.url));
const SPEC = (JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8")).mechanisms as { spec: Spec }[])
  .map((v) => v.spec).find((s) => s.mechanism === "grr" && s.domain?.length === 2)!;
const base = { url: "http://127.0.0.1:9", apiKey: "k", interval: 0, fetchMetrics: false, logger: { warn: () => undefined, info: () => undefined } };

test("pins are lowercase key ids; blanks are skipped; anything else is a ConfigError", () => {
  assert.deepEqual([...issuerPins([A.toUpperCase(), " ", ` ${B} `, "", A])], [A, B]);
  assert.equal(issuerPins([]).size, 0);
  for (const bad of ["abc", "ab".repeat(31), "ab".repeat(33), "g".repeat(64), `${A},${B}`, {}, 12]) {
    assert.throws(() => issuerPins([bad]), (e: Error) => e instanceof ConfigError && /64 hex digits \(SHA-256\)/.test(e.message), String(bad));
  }
});

test("Client.open refuses a bad pin from the option or the bundled catalog, and learns the bundle's metrics", async () => {
  await assert.rejects(Client.open({ ...base, issuerKeys: [A, "not-a-key-id"] }), ConfigError);
  await assert.rejects(Client.open({ ...base, metrics: { metrics: [SPEC], issuer_keys: ["nope"] } }), /got "nope"/);
  await assert.rejects(Client.open({ ...base, metrics: { metrics: [SPEC], issuer_keys: { a: A } as never } }), ConfigError);
  await assert.rejects(Client.open({ ...base, url: "http://example.com" }), ConfigError);
  const c = await Client.open({ ...base, store: new MemoryStore(), metrics: { metrics: [SPEC], issuer_keys: [A] }, issuerKeys: [B] });
  assert.equal((await c.record(SPEC.name, "b")).status, "queued");
  assert.equal((await c.record(SPEC.name, "z")).status, "invalid_value");
  c.close();
});

test("openNodeClient joins LDP_ISSUER_KEYS (comma-separated) and refuses a bad one at open", async () => {
  const env = { LDP_COLLECTOR_URL: base.url, LDP_API_KEY: "k", LDP_STATE_DIR: join(mkdtempSync(join(tmpdir(), "ldp-pins-")), "s") };
  const c = await openNodeClient({ ...base, metrics: [SPEC] }, { ...env, LDP_ISSUER_KEYS: `${A}, ${B.toUpperCase()},` });
  assert.equal((await c.record(SPEC.name, "a")).status, "queued");
  c.close();
  await assert.rejects(openNodeClient({ ...base }, { ...env, LDP_ISSUER_KEYS: `${A};${B}` }), ConfigError);
});
