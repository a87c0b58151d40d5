// Unlinkable in time, the JS SDK (mirrors tests/client_sdk/test_token_timing.py):
// tests/sdk_js/test_token_timing_js.py starts a real collector that accepts the
// simulated past epochs and runs `node --test dist/test/e2e-timing.js` with
// LDP_E2E_URL, LDP_E2E_KEY and LDP_E2E_STATE.  `Wire` notes each request as it
// leaves the device for the collector (the simulated clock, the install key),
// and forwards it unchanged.  From an install's second epoch on, no report batch
// may follow any of its token requests within DELAY, and only first epochs may
// have their token fetched in the flush that sends them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { Client, ConfigError, FileStore, MemoryStore, type Spec } from "../src/node.js";

const URL_ = process.env.LDP_E2E_URL!, KEY = process.env.LDP_E2E_KEY!, ROOT = process.env.LDP_E2E_STATE!;
if (!URL_ || !KEY || !ROOT) throw new Error("run by tests/sdk_js/test_token_timing_js.py: LDP_E2E_URL, LDP_E2E_KEY, LDP_E2E_STATE");
const DAY = 86400, DELAY = 600, AHEAD = 2, TICKS = 6;

interface Arrival { at: number; path: string; install: string; body: string | Uint8Array | undefined; actor: number; action: number }

class Wire {
  readonly arrivals: Arrival[] = [];
  actor = -1;
  action = 0;
  constructor(readonly clock: () => number) {}
  readonly fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const headers = (init?.headers ?? {}) as Record<string, string>;
    this.arrivals.push({ at: this.clock(), path: new URL(String(input)).pathname, install: headers["LDP-Install-Key"] ?? "",
      body: init?.body as string | Uint8Array | undefined, actor: this.actor, action: this.action });
    return fetch(input, init);
  };
  paths(from: number): string[] {
    return this.arrivals.slice(from).map((a) => a.path).filter((p) => p !== "/v1/tokens/key");
  }
}

/** The test's own schedule (not the SDK's randomness): a seeded xorshift. */
function schedule(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x / 2 ** 32; };
}

const specs: Spec[] = ((await (await fetch(`${URL_}/v1/metrics`, { headers: { Authorization: `Bearer ${KEY}` } })).json()) as { metrics: Spec[] }).metrics;
const quiet = { warn: () => undefined, info: () => undefined };
const units = (a: Arrival): number[] => (JSON.parse(a.body as string).units as { period: string; epoch: number }[])
  .filter((u) => u.period === "day").map((u) => u.epoch);

test("from the second epoch on no report follows its install's token request within the delay; k epochs stocked", async () => {
  const devices = Number(process.env.LDP_E2E_DEVICES ?? 12), epochs = 8, rand = schedule(7);   // 60: the setting
  const firstDay = Math.floor(Date.now() / 1000 / DAY) - epochs - 1;
  const sim = { t: firstDay * DAY };
  const wire = new Wire(() => sim.t);
  const opts = { url: URL_, apiKey: KEY, fetch: wire.fetch, clock: () => sim.t, interval: 0, fetchMetrics: false, metrics: specs,
    logger: quiet, backoffBase: 0.01, backoffMax: 0.05, tokensAhead: AHEAD, tokenDelay: DELAY };
  const clients = await Promise.all(Array.from({ length: devices }, () => Client.open({ ...opts, store: new MemoryStore() })));
  const recordedIn = new Map<string, number>();   // "device|epoch" -> the action that recorded it
  const short: string[] = [];
  for (let day = 0; day < epochs; day++) {
    const start = (firstDay + day) * DAY;
    const events: [number, number, string][] = [];
    for (let i = 0; i < devices; i++) {
      for (const kind of ["record", ...Array(TICKS).fill("tick")]) events.push([start + (0.01 + 0.98 * rand()) * DAY, i, kind]);
    }
    events.sort((a, b) => a[0] - b[0]);
    for (const [at, i, kind] of events) {
      sim.t = at;
      wire.actor = i;
      wire.action++;
      const asked = wire.arrivals.filter((a) => a.path === "/v1/tokens").length;
      if (kind === "record") {
        assert.equal((await clients[i].record("js.tt.plan", "free")).ok, true);
        recordedIn.set(`${i}|${firstDay + day}`, wire.action);
      }
      await clients[i].flush(kind === "record" ? 3 : 0.5);
      if (wire.arrivals.filter((a) => a.path === "/v1/tokens").length > asked) {
        const mine = wire.arrivals.filter((a) => a.path === "/v1/tokens" && a.actor === i).flatMap(units);
        for (let e = firstDay + day + 1; e <= firstDay + day + AHEAD; e++) if (!mine.includes(e)) short.push(`device ${i} day ${day}`);
      }
    }
  }
  sim.t += 3 * DELAY;   // the last held reports may go now: none is ever lost
  for (const c of clients) assert.equal(await c.flush(5), true);
  for (const c of clients) c.close();
  // What the collector saw.
  let deviceEpochs = 0, sameFlush = 0, firstAtOnce = 0;
  const gaps: number[] = [];
  const firstEpoch = (i: number) => Math.min(...[...recordedIn.keys()].filter((k) => k.startsWith(`${i}|`)).map((k) => Number(k.split("|")[1])));
  wire.arrivals.forEach((a, n) => {
    if (a.path !== "/v1/reports") return;
    const before = wire.arrivals.slice(0, n).filter((t) => t.path === "/v1/tokens" && t.actor === a.actor);
    for (const epoch of JSON.parse(gunzipSync(a.body as Uint8Array).toString()).epoch as number[]) {
      deviceEpochs++;
      const served = before.filter((t) => units(t).includes(epoch)).at(-1)!;
      if (served.action === a.action) sameFlush++;
      if (epoch === firstEpoch(a.actor)) firstAtOnce += Number(recordedIn.get(`${a.actor}|${epoch}`) === a.action);
      else gaps.push(a.at - before.at(-1)!.at);
    }
  });
  console.log(`# measured: device-epochs ${deviceEpochs}; token fetched in the flush that sent it ${sameFlush}/${deviceEpochs};`
    + ` smallest later gap ${Math.round(Math.min(...gaps))} s`);
  assert.equal(deviceEpochs, devices * epochs);   // every report delivered once
  assert.equal(firstAtOnce, devices);              // first-run delivery as before
  assert.equal(sameFlush, devices);                // only first epochs (before: about half)
  assert.equal(gaps.length, devices * (epochs - 1));
  assert.ok(Math.min(...gaps) >= DELAY, `gaps ${gaps.sort((x, y) => x - y).slice(0, 5)}`);
  assert.deepEqual(short, []);
});

test("the top-up moment and the hold survive a restart; held reports go later, never dropped", async () => {
  const d = mkdtempSync(join(ROOT, "restart-"));
  const day0 = Math.floor(Date.now() / 1000 / DAY) - 3;
  const sim = { t: day0 * DAY + 0.5 * DAY };
  const wire = new Wire(() => sim.t);
  const open = () => Client.open({ url: URL_, apiKey: KEY, fetch: wire.fetch, clock: () => sim.t, interval: 0, fetchMetrics: false,
    metrics: specs, logger: quiet, backoffBase: 0.01, backoffMax: 0.05, tokenDelay: DELAY, store: new FileStore(d) });
  const plan = () => {
    const lines = readFileSync(join(d, "journal"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
    return lines.flatMap((e) => e.t ?? []).filter((t: { period: string }) => t.period === "next:day").at(-1).schedule as
      { due: number; hold: number };
  };
  let c = await open();
  assert.equal((await c.record("js.tt.plan", "free")).ok, true);
  assert.equal(await c.flush(5), true);                       // the first epoch: at once
  // The first epoch goes at once: the first token request is answered 403
  // install_unregistered, the install registers once (proof of work) and asks again.
  assert.deepEqual(wire.paths(0), ["/v1/tokens", "/v1/installs", "/v1/installs/challenge",
    "/v1/installs", "/v1/tokens", "/v1/reports"]);
  const { due } = plan();
  assert.ok((day0 + 1) * DAY <= due && due < (day0 + 2) * DAY, `${due}`);   // drawn within the next epoch
  c.close();
  c = await open();                                           // a restart: the same moment
  assert.equal(plan().due, due);
  sim.t = due - 1;
  let seen = wire.arrivals.length;
  assert.equal((await c.record("js.tt.plan", "pro")).ok, true);
  assert.equal(await c.flush(5), true);
  assert.deepEqual(wire.paths(seen), ["/v1/reports"]);       // from stock, no request
  sim.t = due + 1;
  seen = wire.arrivals.length;
  assert.equal(await c.flush(5), true);
  assert.deepEqual(wire.paths(seen), ["/v1/tokens"]);        // the top-up, nothing sent
  const asked = wire.arrivals.at(-1)!;
  assert.deepEqual(units(asked), [day0 + 3]);
  const { hold } = plan();
  assert.ok(asked.at + DELAY <= hold && hold < asked.at + 2 * DELAY, `${hold - asked.at}`);
  sim.t = due + 2;
  assert.equal((await c.record("js.tt.theme", "dark")).ok, true);   // right after the top-up
  assert.equal(await c.flush(0.3), false);                   // held
  c.close();
  c = await open();
  sim.t = hold - 1;
  assert.equal(await c.flush(0.3), false);                   // still held after a restart
  sim.t = hold + 1;
  seen = wire.arrivals.length;
  assert.equal(await c.flush(5), true);
  assert.deepEqual(wire.paths(seen), ["/v1/reports"]);
  assert.ok(wire.arrivals.at(-1)!.at - asked.at >= DELAY);
  assert.equal(c.counters.sent, 1);
  assert.deepEqual(c.counters.dropped, {});
  c.close();
});

test("tokensAhead and tokenDelay are checked at open, naming the bad value", async () => {
  const base = { url: URL_, apiKey: KEY, fetchMetrics: false, metrics: specs, logger: quiet, store: new MemoryStore() };
  await assert.rejects(Client.open({ ...base, tokenDelay: -1 }), (e: Error) => e instanceof ConfigError && /tokenDelay .* got -1/.test(e.message));
  await assert.rejects(Client.open({ ...base, tokensAhead: 1 }), (e: Error) => e instanceof ConfigError && /tokensAhead .* got 1/.test(e.message));
});
