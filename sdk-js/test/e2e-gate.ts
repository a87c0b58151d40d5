// The Client against a collector whose issuer requires registration (tests/sdk_js/
// test_pow_vectors.py starts it with LDP_INSTALL_REGISTRATION_REQUIRED=true, a cheap
// difficulty, and the metric "js.gate"): LDP_E2E_URL, LDP_E2E_KEY.  Mirrors
// tests/collector/test_installs.py's Python SDK test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, MemoryStore, type Spec } from "../src/index.js";

const url = process.env.LDP_E2E_URL!, key = process.env.LDP_E2E_KEY!;

test("a new install registers when the issuer asks, then its report is delivered", async () => {
  const paths: string[] = [];
  const logged: string[] = [];
  const net = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    paths.push(new URL(String(input)).pathname);
    return fetch(input, init);
  };
  const metrics = ((await (await fetch(`${url}/v1/metrics`, { headers: { Authorization: `Bearer ${key}` } })).json()) as { metrics: Spec[] }).metrics;
  const logger = { warn: (m: string) => logged.push(m), info: () => undefined, error: (m: string) => logged.push(m) };
  const c = await Client.open({ url, apiKey: key, store: new MemoryStore(), fetch: net, metrics, fetchMetrics: false,
    backoffBase: 0.01, backoffMax: 0.05, interval: 0, logger });
  assert.equal((await c.record("js.gate", "a")).status, "queued");
  assert.equal(await c.flush(15), true);
  assert.equal(c.counters.sent, 1);
  assert.deepEqual({ ...c.counters.configErrors }, {});
  assert.ok(paths.includes("/v1/installs/challenge"), paths.join(" "));
  assert.equal(paths.filter((p) => p === "/v1/installs/challenge").length, 1);
  assert.ok(!logged.some((m) => /key refused/.test(m)), logged.join("\n"));
  await c.close();
});
