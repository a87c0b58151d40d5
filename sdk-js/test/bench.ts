// Benchmark (not a test; benchmarks/bench_sdk_js.py runs it): median and p90
// cost of Client.record in Node, per mechanism, with a MemoryStore and with
// the FileStore (journal append + fsync per record).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, FileStore, MemoryStore, type Spec } from "../src/node.js";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8"));
const specs = new Map<string, Spec>((V.mechanisms as { spec: Spec }[]).map((c) => [c.spec.name, c.spec]));
const PLAN: [string, string, number][] = [["grr d=4", "c.grr.4.1.0.0", 4], ["olh d=1024", "c.olh.1024.1.0.0", 1024],
  ["oue d=1024", "c.oue.1024.1.0.0", 1024], ["grr d=1024 two-level", "c.grr.1024.1.0.1", 1024]];
const out: Record<string, unknown> = {};
for (const [label, name, d] of PLAN) {
  for (const kind of ["memory", "file"]) {
    const spec = specs.get(name)!;
    const dir = mkdtempSync(join(tmpdir(), "ldp-bench-"));
    const n = kind === "memory" ? 20000 : 300;
    const client = await Client.open({ url: "http://127.0.0.1:9", apiKey: "k", metrics: [spec], fetchMetrics: false,
      interval: 0, budgets: { [name]: 1e12 }, store: kind === "memory" ? new MemoryStore() : new FileStore(dir), batchSize: 1e9 });
    const times: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = process.hrtime.bigint();
      const r = await client.record(name, spec.domain![i % d]);
      times.push(Number(process.hrtime.bigint() - t) / 1000);
      if (r.status !== "queued") throw new Error(r.status);
    }
    times.sort((a, b) => a - b);
    out[`record ${label} (${kind} store)`] = { n, median_us: +times[n >> 1].toFixed(2), p90_us: +times[Math.floor(n * 0.9)].toFixed(2) };
    client.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
console.log(JSON.stringify(out));
