// Benchmark (not a test): `node dist/test/bench-forms.js` prints the median and p90
// cost of Client.record in Node (memory store) for the forms of this change beside
// grr d = 4 in the same run: Square Wave (core), the hierarchical histogram (eps 1 on
// [0, 120]), CMS and HCMS (d = 37), prefix_olh
// (a-z, 6 symbols, eps 4; its seed vectors are SHAKE-256 draws, cached per seed) and
// its memoised form (eps_1 4, eps_inf 6: the permanent response's HMAC_DRBG per record).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Client, MemoryStore, type Spec } from "../src/node.js";
import { registerAllForms } from "../src/forms.js";

registerAllForms();
const here = fileURLToPath(new URL(".", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8"));
const specs = new Map<string, Spec>((V.mechanisms as { spec: Spec }[]).map((c) => [c.spec.name, c.spec]));
const WORDS = ["hello", "World", "zebra", "ab", "Maße"];
const PLAN: [string, string, (i: number) => unknown][] = [
  ["grr d=4", "c.grr.4.1.0.0", (i) => specs.get("c.grr.4.1.0.0")!.domain![i % 4]],
  ["square_wave", "n.square_wave.1.0.0", (i) => (i % 997) * 120 / 996],
  ["hierarchical", "n.hierarchical.1.0.0", (i) => (i % 997) * 120 / 996],
  ["cms d=37", "c.cms.37.1.0", (i) => `c${i % 37}`],
  ["hcms d=37", "c.hcms.37.1.0", (i) => `c${i % 37}`],
  ["prefix_olh a-z/6", "s.0.6.1.4.0", (i) => WORDS[i % WORDS.length]],
  ["prefix_olh/2 a-z/6", "s.l.0.6.1.4.0", (i) => WORDS[i % WORDS.length]],
];
const n = 20000, out: Record<string, unknown> = {};
for (const [label, name, value] of PLAN) {
  const client = await Client.open({ url: "http://127.0.0.1:9", apiKey: "k", metrics: [specs.get(name)!], fetchMetrics: false,
    interval: 0, budgets: { [name]: 1e12 }, store: new MemoryStore(), batchSize: 1e9 });
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    const r = await client.record(name, value(i));
    times.push(Number(process.hrtime.bigint() - t) / 1000);
    if (r.status !== "queued") throw new Error(`${name}: ${r.status}`);
  }
  times.sort((a, b) => a - b);
  out[label] = { n, median_us: +times[n >> 1].toFixed(2), p90_us: +times[Math.floor(n * 0.9)].toFixed(2) };
  client.close();
}
console.log(JSON.stringify(out));
