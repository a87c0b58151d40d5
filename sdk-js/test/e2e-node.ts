// End to end, Node side: many devices (one Client each, fresh secret) record
// through the real collector.  argv: url apiKey devices offset stateDir
// Device i holds value DOMAIN[pick(i)]; the first device uses a FileStore.
import { Client, FileStore, MemoryStore, type Spec } from "../src/node.js";
import { amount, pick, DOMAIN, METRICS, NUMERIC } from "./e2e-plan.js";

const [url, apiKey, devicesText, offsetText, stateDir] = process.argv.slice(2);
const devices = Number(devicesText), offset = Number(offsetText);
const first = await Client.open({ url, apiKey, store: new FileStore(stateDir), interval: 0 });
if (!(await first.refreshMetrics())) throw new Error("catalog not fetched");
const specs: Spec[] = [];
const r = await fetch(`${url}/v1/metrics`, { headers: { Authorization: `Bearer ${apiKey}` } });
specs.push(...((await r.json()) as { metrics: Spec[] }).metrics);
const totals = { queued: 0, sent: 0, dropped: 0, notQueued: [] as string[] };
for (let i = 0; i < devices; i++) {
  const c = i === 0 ? first : await Client.open({ url, apiKey, metrics: specs, fetchMetrics: false, interval: 0 , store: new MemoryStore() });
  for (const m of METRICS) {
    const res = await c.record(m, DOMAIN[pick(i + offset)]);
    if (res.status === "queued") totals.queued++; else totals.notQueued.push(res.status);
  }
  for (const m of NUMERIC) {
    const res = await c.record(m, amount(i + offset));
    if (res.status === "queued") totals.queued++; else totals.notQueued.push(res.status);
  }
  if (!(await c.flush(20))) throw new Error(`device ${i} could not deliver`);
  totals.sent += c.counters.sent;
  totals.dropped += Object.values(c.counters.dropped).reduce((a, b) => a + b, 0);
  c.close();
}
console.log(JSON.stringify(totals));
