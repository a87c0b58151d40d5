// End to end, the opt-in forms in Node: devices record a string metric
// (prefix_olh), a Square Wave distribution, a count-mean sketch and a hierarchical
// histogram (the same amounts) through the real collector, and a memoised string
// metric (prefix_olh, two levels) in each of ``memoEpochs`` daily epochs from
// ``memoStart`` (an injected clock: one Client, one secret per device, so its
// reports share their permanent response)
// (tests/sdk_js/test_sdk_js.py::test_forms_through_the_real_stack).
// argv: url apiKey planFile; the plan is {strings: [...], amounts: [...], plans: [...],
// memoStart, memoEpochs}, one entry per device.  Prints the totals as JSON.
import { readFileSync } from "node:fs";
import { Client, MemoryStore, type Spec } from "../src/node.js";
import { cms, hierarchical, prefixOlh, prefixOlhMemo, registerForms } from "../src/forms.js";

registerForms(prefixOlh, prefixOlhMemo, cms, hierarchical);
const [url, apiKey, planFile] = process.argv.slice(2);
const plan = JSON.parse(readFileSync(planFile, "utf8")) as {
  strings: string[]; amounts: number[]; plans: string[]; memoStart: number; memoEpochs: number };
const r = await fetch(`${url}/v1/metrics`, { headers: { Authorization: `Bearer ${apiKey}` } });
const specs = ((await r.json()) as { metrics: Spec[] }).metrics;
const memo = specs.find((s) => s.name === "js.f.memo")!;
const quiet = { warn: () => undefined, info: () => undefined, error: (m: string) => console.error(m) };
/** ``memoCharged``: devices whose lifetime ledger holds one value of js.f.memo at eps_inf. */
const totals = { queued: 0, sent: 0, dropped: 0, notQueued: [] as string[], memoCharged: 0 };

async function device(i: number): Promise<void> {
  let at: number | null = null;  // the injected time of the memoised metric's epochs, else now
  const c = await Client.open({ url, apiKey, metrics: specs, fetchMetrics: false, interval: 0, store: new MemoryStore(),
    tokensAhead: false, logger: quiet, clock: () => at ?? Date.now() / 1000 });
  const records: [string, unknown, number | null][] = [];
  for (let e = 0; e < plan.memoEpochs; e++) records.push(["js.f.memo", plan.strings[i], plan.memoStart + e * 86400]);
  records.push(["js.f.search", plan.strings[i], null], ["js.f.latency", plan.amounts[i], null], ["js.f.plan", plan.plans[i], null],
    ["js.f.hier", plan.amounts[i], null]);
  for (const [metric, value, when] of records) {
    at = when;
    const res = await c.record(metric, value);
    if (res.status === "queued") totals.queued++; else totals.notQueued.push(res.status);
  }
  at = null;
  if (!(await c.flush(30))) throw new Error(`device ${i} could not deliver`);
  const life = c.privacyReport().lifetime.find((l) => l.metric === "js.f.memo");
  if (life?.values === 1 && life.spent === memo.longitudinal!.epsilon_inf) totals.memoCharged++;
  totals.sent += c.counters.sent;
  totals.dropped += Object.values(c.counters.dropped).reduce((a, b) => a + b, 0);
  c.close();
}

// Four devices at a time (each its own Client, secret and tokens).
for (let i = 0; i < plan.strings.length; i += 4) {
  await Promise.all([i, i + 1, i + 2, i + 3].filter((j) => j < plan.strings.length).map(device));
}
console.log(JSON.stringify(totals));
