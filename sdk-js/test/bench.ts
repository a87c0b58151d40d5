// Benchmark (not a test; benchmarks/bench_sdk_js.py runs it): median and p90
// cost of Client.record in Node, per mechanism, with a MemoryStore and with
// the FileStore (journal append + fsync per record); then the device half of
// a 2048-bit blind RSA token (prepare: nonce, PSS encoding, blinding; finalize:
// unblinding and PSS verification), the issuer's signature made with node:crypto's key.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, FileStore, MemoryStore, type Spec } from "../src/node.js";
import { readFileSync } from "node:fs";
import { generateKeyPairSync } from "node:crypto";
import { fileURLToPath } from "node:url";
import { modPow, os2ip, i2osp, prepare, publicKey, wireToken } from "../src/tokens.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8"));
const specs = new Map<string, Spec>((V.mechanisms as { spec: Spec }[]).map((c) => [c.spec.name, c.spec]));
// d = 0: a numeric metric on [0, 120], values spread over it (eps = 1).
const PLAN: [string, string, number][] = [["grr d=4", "c.grr.4.1.0.0", 4], ["olh d=1024", "c.olh.1024.1.0.0", 1024],
  ["oue d=1024", "c.oue.1024.1.0.0", 1024], ["grr d=1024 two-level", "c.grr.1024.1.0.1", 1024],
  ["one_bit_mean", "n.1.0.0.0", 0], ["piecewise", "n.piecewise.1.0.0.0", 0], ["hybrid", "n.hybrid.1.0.0.0", 0],
  ["piecewise two-level", "n.piecewise.1.0.0.1", 0]];
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
      const r = await client.record(name, d ? spec.domain![i % d] : (i % 997) * 120 / 996);
      times.push(Number(process.hrtime.bigint() - t) / 1000);
      if (r.status !== "queued") throw new Error(r.status);
    }
    // Also as the browser page measures: the mean of each block of 1000 (GC pauses included).
    const blocks: number[] = [];
    for (let b = 0; kind === "memory" && b + 1000 <= n; b += 1000) blocks.push(times.slice(b, b + 1000).reduce((x, y) => x + y) / 1000);
    blocks.sort((a, b) => a - b);
    times.sort((a, b) => a - b);
    out[`record ${label} (${kind} store)`] = { n, median_us: +times[n >> 1].toFixed(2), p90_us: +times[Math.floor(n * 0.9)].toFixed(2),
      ...(blocks.length ? { block_median_us: +blocks[blocks.length >> 1].toFixed(2) } : {}) };
    client.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
const jwk = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ format: "jwk" });
const big = (b64: string) => os2ip(Buffer.from(b64, "base64url"));
const key = publicKey(big(jwk.n!), big(jwk.e!)), d = big(jwk.d!);
const prep: number[] = [], fin: number[] = [];
for (let i = 0; i < 200; i++) {
  let t = process.hrtime.bigint();
  const p = prepare(key, "day", i);
  prep.push(Number(process.hrtime.bigint() - t) / 1000);
  const blindSig = i2osp(modPow(os2ip(p.blinded), d, key.n), key.k);
  t = process.hrtime.bigint();
  wireToken(key, p, blindSig);
  fin.push(Number(process.hrtime.bigint() - t) / 1000);
}
for (const [label, xs] of [["token prepare (2048-bit)", prep], ["token finalize (2048-bit)", fin]] as const) {
  xs.sort((a, b) => a - b);
  out[label] = { n: xs.length, median_us: +xs[xs.length >> 1].toFixed(1), p90_us: +xs[Math.floor(xs.length * 0.9)].toFixed(1) };
}
console.log(JSON.stringify(out));
