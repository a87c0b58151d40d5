// ``deviceToken`` against a collector that knows devices by account (LDP_DEVICE_AUTH=jwt):
// tests/sdk_js/test_device_token_js.py starts it with a local identity provider's JWKS,
// registers js.t.plan and runs `node --test dist/test/e2e-device-token.js` with
// LDP_E2E_URL, LDP_E2E_KEY, LDP_E2E_GOOD (a valid login token) and LDP_E2E_EXPIRED.
// The network is real; the fetch is wrapped only to note which request carried what.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, type Spec } from "../src/index.js";

const URL_ = process.env.LDP_E2E_URL!, KEY = process.env.LDP_E2E_KEY!;
const GOOD = process.env.LDP_E2E_GOOD!, EXPIRED = process.env.LDP_E2E_EXPIRED!;
if (!URL_ || !KEY || !GOOD || !EXPIRED) throw new Error("run by tests/sdk_js/test_device_token_js.py");

test("the app's login token gets the report delivered; a failing one never throws at the app", async () => {
  const sent: { path: string; login: boolean }[] = [];
  const noting = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    sent.push({ path: new URL(String(input)).pathname.slice(1),
      login: "LDP-Device-Token" in ((init?.headers ?? {}) as Record<string, string>) });
    return fetch(input, init);
  };
  const specs = ((await (await fetch(`${URL_}/v1/metrics`, { headers: { Authorization: `Bearer ${KEY}` } })).json()) as { metrics: Spec[] }).metrics;
  let login: string | null = null;
  const c = await Client.open({ url: URL_, apiKey: KEY, fetch: noting, metrics: specs, fetchMetrics: false,
    interval: 0, backoffBase: 0.01, backoffMax: 0.05, logger: { warn: () => undefined, info: () => undefined },
    deviceToken: () => { if (login === null) throw new Error("signed out"); return login; } });
  assert.equal((await c.record("js.t.plan", "free")).status, "queued");
  // The callable throws: nothing asked, nothing thrown here, the report waits.
  assert.equal(await c.flush(0.3), false);
  assert.ok((c.counters.configErrors.device_token_unavailable ?? 0) >= 1, JSON.stringify(c.counters));
  assert.equal(c.queued, 1);
  assert.ok(!sent.some((s) => s.path === "v1/tokens"));
  // An expired token: refused by the issuer (401 invalid_device), counted as such, kept.
  login = EXPIRED;
  assert.equal(await c.flush(0.3), false);
  assert.ok((c.counters.configErrors.device_token_refused ?? 0) >= 1, JSON.stringify(c.counters));
  assert.equal(c.counters.configErrors.invalid_key, undefined);
  assert.equal(c.queued, 1);
  assert.deepEqual(c.counters.dropped, {});
  // A good one: delivered.
  login = GOOD;
  assert.equal(await c.flush(10), true);
  assert.equal(c.counters.sent, 1);
  // The login token went with token requests only.
  assert.deepEqual([...new Set(sent.filter((s) => s.login).map((s) => s.path))], ["v1/tokens"]);
  assert.ok(sent.some((s) => s.path === "v1/reports" && !s.login));
  await c.close();
});
