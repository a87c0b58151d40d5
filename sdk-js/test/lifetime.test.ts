// A memoised metric name has a lifetime budget by default (issue 34, item 6), as
// client_sdk (tests/client_sdk/test_lifetime_default.py): lifetimeMultiple (4) x the
// epsilon_inf of the name's first draw on this device, which no later spec version
// moves; lifetimeBudgets overrides it (Infinity: none).  The shared vectors hold a
// device's asks over six spec versions with the Python ledger's answers: this ledger
// must answer alike, at the same step, and round the cap alike, bit for bit.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client, FileStore, type Spec } from "../src/node.js";
import { ConfigError } from "../src/pins.js";
import { Ledger, lifetimeCap, type Ask } from "../src/ledger.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8")).lifetime;
const SPECS = new Map<number, Spec>((V.specs as Spec[]).map((s) => [s.version, s]));
const DAY = 86400;
const quiet = { warn: () => {}, info: () => {} };

interface Step { ask: Record<string, unknown>; status: string; epoch: number; spent: number }

test("the ledger answers the Python ledger's asks alike (the shared lifetime vectors)", () => {
  const ledger = new Ledger();
  const seen: string[] = [];
  for (const step of V.steps as Step[]) {
    const a = step.ask, budget = a.lifetime_budget;
    const ask: Ask = {
      metric: a.metric as string, version: a.version as number, fingerprint: a.fingerprint as string,
      period: a.period as number, now: a.now as number, charge: a.charge as number, budget: a.budget as number,
      valueKey: a.value_key as string, epsilonInf: a.epsilon_inf as number,
      lifetimeBudget: budget === "inf" ? Infinity : (budget as number | null), lifetimeMultiple: a.lifetime_multiple as number,
    };
    const made = ledger.decide(ask);
    if ("status" in made) {
      assert.equal(made.epoch, step.epoch);
    } else {
      assert.equal(made.epoch, step.epoch);
      ledger.apply(made);
    }
    seen.push("status" in made ? made.status : "queued");
    const spent = Object.values(ledger.state.lifetime.plan ?? {}).reduce((x, y) => x + y, 0);
    assert.equal(spent, step.spent, `step ${seen.length}`);
  }
  assert.deepEqual(seen, (V.steps as Step[]).map((s) => s.status));
  // The story they tell: four versions draw four responses, the fifth fresh one is refused.
  assert.deepEqual(seen.slice(0, 7), ["queued", "queued", "queued", "queued", "queued", "over_lifetime_budget", "over_lifetime_budget"]);
  for (const [multiple, first, cap] of V.caps as [number, number, number][]) {
    assert.equal(lifetimeCap({ lifetimeBudget: null, lifetimeMultiple: multiple, epsilonInf: 0 }, first), cap, `${multiple} x ${first}`);
  }
});

test("spec versions cannot redraw an unchanged value without bound (Client, FileStore)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ldp-lifetime-"));
  let now = 1_800_000_000;
  const open = (version: number, extra: Record<string, unknown> = {}) => Client.open({
    url: "http://127.0.0.1:9", apiKey: "k", store: new FileStore(dir), metrics: [SPECS.get(version)!],
    fetchMetrics: false, interval: 0, logger: quiet, clock: () => now, ...extra });
  const life = (c: Client) => c.privacyReport().lifetime.find((l) => l.metric === "plan")!;
  const spends: [number, number][] = [];
  for (const version of [1, 2, 3, 4]) {
    const c = await open(version);
    assert.equal((await c.record("plan", "pro")).status, "queued");   // a fresh permanent response
    now += DAY;
    assert.equal((await c.record("plan", "pro")).status, "queued");   // memoised: no new spend
    now += DAY;
    spends.push([life(c).values, Math.round(life(c).spent * 1e12) / 1e12]);
    c.close();
  }
  assert.deepEqual(spends, [[1, 1], [2, 1.9], [3, 2.7], [4, 3.4]]);
  let c = await open(4);   // a restart: the first draw's eps_inf comes back from the store
  assert.equal((await c.record("plan", "team")).status, "over_lifetime_budget");   // 3.4 + 0.7 > 4 x 1
  assert.equal((await c.record("plan", "pro")).status, "queued");
  assert.equal(life(c).budget, 4);
  assert.ok(life(c).spent <= 4);
  c.close();
  now += DAY;
  c = await open(5);   // eps_inf raised to 8: the cap stays 4 (not 4 x 8)
  assert.equal((await c.record("plan", "pro")).status, "over_lifetime_budget");
  c.close();
  c = await open(5, { lifetimeBudgets: { plan: Infinity } });   // lifted, deliberately
  assert.equal((await c.record("plan", "pro")).status, "queued");
  assert.deepEqual([life(c).values, life(c).budget], [5, Infinity]);
  c.close();
});

test("a ledger saved before the first draw was kept: the smallest draw stands in", () => {
  const l = new Ledger({ versions: {}, high: {}, budget: {}, lifetime: { plan: { a: 2, b: 1 } } });
  assert.deepEqual(l.state.first, { plan: 1 });
  const ask: Ask = { metric: "plan", version: 1, fingerprint: "f", period: DAY, now: 0, charge: 0.5, budget: 0.5,
    valueKey: "c", epsilonInf: 1, lifetimeBudget: null };
  assert.ok(!("status" in l.decide(ask)));                                  // 3 + 1 <= 4 x 1
  l.state.lifetime.plan.c = 1;
  assert.equal((l.decide({ ...ask, valueKey: "d" }) as { status: string }).status, "over_lifetime_budget");
});

test("lifetime options are checked at open", async () => {
  for (const extra of [{ lifetimeBudgets: { plan: 0 } }, { lifetimeBudgets: { plan: Number.NaN } },
    { lifetimeBudgets: { plan: "4" } }, { lifetimeMultiple: 0.5 }, { lifetimeMultiple: Infinity }]) {
    await assert.rejects(Client.open({ url: "http://127.0.0.1:9", apiKey: "k", metrics: [SPECS.get(1)!], fetchMetrics: false,
      interval: 0, logger: quiet, ...(extra as object) }), ConfigError, JSON.stringify(extra));
  }
});
