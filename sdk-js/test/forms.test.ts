// The opt-in forms on the device: a string metric never stores or logs its true
// string (tests/client_sdk/test_strings_privacy.py for the JS SDK), and the
// sketches, Square Wave and the hierarchical histogram record through the Client.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildMechanism, Client, FileStore, InvalidValueError, MemoryStore, type Spec } from "../src/node.js";
import { registerAllForms } from "../src/forms.js";

registerAllForms();
const here = fileURLToPath(new URL(".", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8"));
const SPECS = new Map<string, Spec>((V.mechanisms as { spec: Spec }[]).map((c) => [c.spec.name, c.spec]));
const DEAD = "http://127.0.0.1:9";  // nothing listens: deliveries fail, log lines are written
const DAY = 86400;

function capture() {
  const lines: string[] = [];
  const say = (m: string) => { lines.push(m); };
  return { lines, logger: { warn: say, info: say, error: say } };
}

test("no true string in the journal, the state folder or the logs; payloads vary", async () => {
  const spec = SPECS.get("s.0.6.1.4.0")!;  // a-z, max_length 6, casefold, eps 4
  const dir = mkdtempSync(join(tmpdir(), "ldp-strings-")), { lines, logger } = capture();
  let now = 1_800_000_000;
  const c = await Client.open({ url: DEAD, apiKey: "k", store: new FileStore(dir), metrics: [spec], fetchMetrics: false,
    interval: 0, backoffBase: 0.01, logger, clock: () => now });
  for (let i = 0; i < 40; i++) {
    assert.equal((await c.record(spec.name, "Zebra")).status, "queued");
    now += DAY;
  }
  assert.equal((await c.record(spec.name, "Zebra!")).status, "invalid_value");   // off the alphabet
  assert.equal(await c.flush(0.3), false);
  c.close();
  // "zebra" as Python codes it: sum sym_i 27^i (a = 1).
  const code = [..."zebra"].reduce((acc, ch, i) => acc + BigInt(ch.charCodeAt(0) - 96) * 27n ** BigInt(i), 0n);
  const leaks = ["Zebra", "zebra", "ZEBRA", String(code)];
  for (const f of readdirSync(dir)) {
    const data = readFileSync(join(dir, f)).toString("latin1");
    for (const leak of leaks) assert.ok(!data.includes(leak), `${f} holds ${leak}`);
  }
  assert.ok(lines.length > 0);
  for (const leak of leaks) assert.ok(!lines.join("\n").includes(leak), `a log line holds ${leak}`);
  const rows = readFileSync(join(dir, "journal"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))
    .flatMap((e) => e.r && e.r.metric === spec.name ? [Number(e.r.payload)] : []);
  assert.equal(rows.length, 40);
  const counters = spec.params.num_counters as number;
  assert.ok(rows.every((r) => Number.isInteger(r) && r >= 0 && r < counters));
  // 40 equal payloads from a uniform level and seed (3 x 2048) then GRR: probability < 1e-100.
  assert.ok(new Set(rows).size > 1);
});

test("memoised strings: one lifetime charge per normalised string, its cohort kept, no true string stored", async () => {
  const spec = SPECS.get("s.l.0.6.1.4.0")!;  // a-z, max_length 6, casefold, eps_1 4, eps_inf 6
  const g = spec.params.g as number, inf = spec.params.epsilon_inf as number;
  const dir = mkdtempSync(join(tmpdir(), "ldp-memo-strings-")), { lines, logger } = capture();
  let now = 1_800_000_000;
  const open = () => Client.open({ url: DEAD, apiKey: "k", store: new FileStore(dir), metrics: [spec], fetchMetrics: false,
    interval: 0, backoffBase: 0.01, logger, clock: () => now, lifetimeBudgets: { [spec.name]: 2 * inf } });
  let c = await open();
  for (const value of ["Hello", "hello", "HELLO", "hello", "Zebra", "hello"]) {
    assert.equal((await c.record(spec.name, value)).status, "queued");
    now += DAY;
  }
  // "Hello", "HELLO" and "hello" are one normalised string: 2 lifetime charges of eps_inf.
  const lifetime = () => c.privacyReport().lifetime.find((l) => l.metric === spec.name)!;
  assert.deepEqual(lifetime(), { metric: spec.name, spent: 2 * inf, values: 2, budget: 2 * inf });
  assert.equal((await c.record(spec.name, "world")).status, "over_lifetime_budget");  // a third: over 2 eps_inf
  now += DAY;
  assert.equal(await c.flush(0.3), false);
  c.close();
  c = await open();  // a restart: the same secret, so the same permanent responses and charges
  assert.equal((await c.record(spec.name, "hellO")).status, "queued");
  assert.deepEqual(lifetime(), { metric: spec.name, spent: 2 * inf, values: 2, budget: 2 * inf });
  assert.equal(c.privacyReport().units.filter((u) => u.metric === spec.name).every((u) => u.spent === spec.params.epsilon), true);
  c.close();
  const rows = readFileSync(join(dir, "journal"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))
    .flatMap((e) => e.r && e.r.metric === spec.name ? [Number(e.r.payload)] : []);
  assert.equal(rows.length, 7);
  // Every "hello" report (6 of them, across a restart) has the permanent (level, seed).
  const cohorts = new Set([0, 1, 2, 3, 5, 6].map((i) => Math.floor(rows[i] / g)));
  assert.equal(cohorts.size, 1);
  const code = (w: string) => [...w].reduce((acc, ch, i) => acc + BigInt(ch.charCodeAt(0) - 96) * 27n ** BigInt(i), 0n);
  const leaks = ["Hello", "hello", "HELLO", "hellO", "Zebra", "zebra", "world", String(code("hello")), String(code("zebra")),
    "8,5,12,12,15", `"0":8,"1":5`];
  for (const f of readdirSync(dir)) {
    const data = readFileSync(join(dir, f)).toString("latin1");
    for (const leak of leaks) assert.ok(!data.includes(leak), `${f} holds ${leak}`);
  }
  for (const leak of leaks) assert.ok(!lines.join("\n").includes(leak), `a log line holds ${leak}`);
});

test("strict: a refused string is an error that does not quote it", async () => {
  const spec = SPECS.get("s.1.8.0.1.0")!;  // a-z0-9_, no casefold
  const c = await Client.open({ url: DEAD, apiKey: "k", store: new MemoryStore(), metrics: [spec], fetchMetrics: false,
    interval: 0, strict: true, logger: capture().logger });
  await assert.rejects(c.record(spec.name, "Secret-Value"), (e: Error) => e instanceof InvalidValueError && !e.message.includes("Secret"));
  assert.equal((await c.record(spec.name, "ok_1")).status, "queued");
  c.close();
});

test("Square Wave, CMS and HCMS record through the Client", async () => {
  const names = ["n.square_wave.1.0.0", "c.cms.37.1.0", "c.hcms.37.1.0"];
  const c = await Client.open({ url: DEAD, apiKey: "k", store: new MemoryStore(), metrics: names.map((n) => SPECS.get(n)!),
    fetchMetrics: false, interval: 0, logger: capture().logger });
  assert.equal((await c.record(names[0], 61.5)).status, "queued");
  assert.equal((await c.record(names[1], "c5")).status, "queued");
  assert.equal((await c.record(names[2], "c36")).status, "queued");
  assert.equal((await c.record(names[2], "nope")).status, "invalid_value");
  assert.equal(c.queued, 3);
  c.close();
});

test("the hierarchical histogram records through the Client: one cell per report, clamped, never the value", async () => {
  const spec = SPECS.get("n.hierarchical.1.0.0")!;  // [0, 120], eps 1: 46 cells
  const dir = mkdtempSync(join(tmpdir(), "ldp-hierarchical-")), { logger } = capture();
  let now = 1_800_000_000;
  const c = await Client.open({ url: DEAD, apiKey: "k", store: new FileStore(dir), metrics: [spec], fetchMetrics: false,
    interval: 0, logger, clock: () => now });
  for (let i = 0; i < 30; i++, now += DAY) assert.equal((await c.record(spec.name, 61.37)).status, "queued");
  assert.deepEqual(await c.record(spec.name, 500), { status: "queued", ok: true, epoch: Math.floor(now / DAY), clamped: true });
  assert.equal((await c.record(spec.name, "61.37")).status, "invalid_value");
  assert.equal(c.counters.clamped, 1);
  c.close();
  const rows = readFileSync(join(dir, "journal"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))
    .flatMap((e) => e.r && e.r.metric === spec.name ? [e.r.payload as string] : []);
  assert.equal(rows.length, 31);
  assert.ok(rows.every((r) => /^\d+$/.test(r) && Number(r) < (spec.params.num_counters as number)), rows.join(" "));
  // A uniform level and its oracle: 30 equal cells have probability < 0.2**29.
  assert.ok(new Set(rows).size > 1);
  for (const f of readdirSync(dir)) assert.ok(!readFileSync(join(dir, f)).toString("latin1").includes("61.37"), f);
});

test("a hierarchical spec whose levels do not fill its offsets is refused, naming what it got", () => {
  const spec = SPECS.get("n.hierarchical.0.5.0")!;
  const p = spec.params as { offsets: number[]; levels: Record<string, unknown>[] };
  assert.equal(buildMechanism(spec).name, "hierarchical");
  const shifted = { ...spec, params: { ...spec.params, offsets: [0, 2, 6, 21, 54] } };
  assert.throws(() => buildMechanism(shifted), /hierarchical needs level 2: grr or hadamard over 8 nodes, 15 cells, got \{"mechanism":"hadamard"/);
  const text = { ...spec, params: { ...spec.params, offsets: p.offsets.map(String) } };
  assert.throws(() => buildMechanism(text), /4 levels and 5 integer offsets .*"offsets":\["0","2"/);
  const other = { ...spec, params: { ...spec.params, levels: [p.levels[0], { ...p.levels[1], mechanism: "olh" }, ...p.levels.slice(2)] } };
  assert.throws(() => buildMechanism(other), /level 1: grr or hadamard over 4 nodes/);
});

test("the package's entry points resolve: @ldp-telemetry/sdk/forms shares the core's registry", async () => {
  // Self-reference by package name (package.json "exports"); a variable keeps tsc out of it.
  const names = ["@ldp-telemetry/sdk/forms", "@ldp-telemetry/sdk/node", "@ldp-telemetry/sdk"];
  const [forms, node, root] = await Promise.all(names.map((n) => import(n)));
  assert.equal(typeof forms.registerForms, "function");
  assert.equal(node.Client, Client);
  assert.equal(typeof root.buildMechanism, "function");
  forms.registerForms(forms.hcms);
  assert.equal(node.buildMechanism(SPECS.get("c.hcms.37.1.0")!).name, "hcms");
});
