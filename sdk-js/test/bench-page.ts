// Benchmark page (not a test; benchmarks/bench_sdk_js.py serves it to headless
// Chromium): the cost of Client.record per mechanism with a MemoryStore and
// with the IndexedDB store.  performance.now() is coarse in a page (100 us
// unless cross-origin isolated), so records are timed in blocks and each
// block's mean is one sample; the median of the samples is reported.
import { Client, IndexedDbStore, MemoryStore, type Spec } from "../src/browser.js";

// d = 0: a numeric metric on [0, 120], values spread over it (eps = 1), as bench.ts.
const PLAN: [string, string, number][] = [["grr d=4", "c.grr.4.1.0.0", 4], ["olh d=1024", "c.olh.1024.1.0.0", 1024],
  ["oue d=1024", "c.oue.1024.1.0.0", 1024], ["grr d=1024 two-level", "c.grr.1024.1.0.1", 1024],
  ["one_bit_mean", "n.1.0.0.0", 0], ["piecewise", "n.piecewise.1.0.0.0", 0], ["hybrid", "n.hybrid.1.0.0.0", 0],
  ["piecewise two-level", "n.piecewise.1.0.0.1", 0]];

async function main(): Promise<Record<string, unknown>> {
  const q = new URLSearchParams(location.hash.slice(1));
  // Blocks of 1000 in memory (the clock's 100 us steps are 0.1 us per record), 100 with IndexedDB.
  const blocks = Number(q.get("blocks") ?? 20), idbBlocks = Number(q.get("idb") ?? 10);
  const specs = new Map(((await (await fetch("/bench-specs.json")).json()) as Spec[]).map((s) => [s.name, s]));
  const out: Record<string, unknown> = { userAgent: navigator.userAgent };
  for (const [label, name, d] of PLAN) {
    for (const kind of ["memory", "indexeddb"]) {
      const spec = specs.get(name)!;
      const nBlocks = kind === "memory" ? blocks : idbBlocks, size = kind === "memory" ? 1000 : 100;
      const client = await Client.open({ url: "http://127.0.0.1:9", apiKey: "k", metrics: [spec], fetchMetrics: false, interval: 0,
        budgets: { [name]: 1e12 }, batchSize: 1e9, store: kind === "memory" ? new MemoryStore() : new IndexedDbStore(`bench-${name}`) });
      const samples: number[] = [];
      for (let b = 0, i = 0; b < nBlocks; b++) {
        const t = performance.now();
        for (let j = 0; j < size; j++, i++) {
          const r = await client.record(name, d ? spec.domain![i % d] : (i % 997) * 120 / 996);
          if (r.status !== "queued") throw new Error(r.status);
        }
        samples.push(((performance.now() - t) * 1000) / size);
      }
      samples.sort((a, b) => a - b);
      out[`record ${label} (${kind} store)`] = { n: nBlocks * size, block: size,
        median_us: +samples[samples.length >> 1].toFixed(2), p90_us: +samples[Math.floor(samples.length * 0.9)].toFixed(2) };
      client.close();
    }
  }
  return out;
}

main().then(
  (r) => fetch("/done", { method: "POST", body: JSON.stringify({ ok: true, ...r }) }),
  (e) => fetch("/done", { method: "POST", body: JSON.stringify({ ok: false, error: String(e) }) }),
);
