// End to end, the opt-in forms in Node: devices record a string metric
// (prefix_olh), a Square Wave distribution and a count-mean sketch through the
// real collector (tests/sdk_js/test_sdk_js.py::test_forms_through_the_real_stack).
// argv: url apiKey planFile; the plan is {strings: [...], amounts: [...], plans: [...]},
// one entry per device.  Prints the totals as JSON.
import { readFileSync } from "node:fs";
import { Client, MemoryStore, type Spec } from "../src/node.js";
import { cms, prefixOlh, registerForms } from "../src/forms.js";

registerForms(prefixOlh, cms);
const [url, apiKey, planFile] = process.argv.slice(2);
const plan = JSON.parse(readFileSync(planFile, "utf8")) as { strings: string[]; amounts: number[]; plans: string[] };
const r = await fetch(`${url}/v1/metrics`, { headers: { Authorization: `Bearer ${apiKey}` } });
const specs = ((await r.json()) as { metrics: Spec[] }).metrics;
const quiet = { warn: () => undefined, info: () => undefined, error: (m: string) => console.error(m) };
const totals = { queued: 0, sent: 0, dropped: 0, notQueued: [] as string[] };

async function device(i: number): Promise<void> {
  const c = await Client.open({ url, apiKey, metrics: specs, fetchMetrics: false, interval: 0, store: new MemoryStore(),
    tokensAhead: false, logger: quiet });
  for (const [metric, value] of [["js.f.search", plan.strings[i]], ["js.f.latency", plan.amounts[i]], ["js.f.plan", plan.plans[i]]] as const) {
    const res = await c.record(metric, value);
    if (res.status === "queued") totals.queued++; else totals.notQueued.push(res.status);
  }
  if (!(await c.flush(30))) throw new Error(`device ${i} could not deliver`);
  totals.sent += c.counters.sent;
  totals.dropped += Object.values(c.counters.dropped).reduce((a, b) => a + b, 0);
  c.close();
}

// Four devices at a time (each its own Client, secret and tokens).
for (let i = 0; i < plan.strings.length; i += 4) {
  await Promise.all([i, i + 1, i + 2, i + 3].filter((j) => j < plan.strings.length).map(device));
}
console.log(JSON.stringify(totals));
