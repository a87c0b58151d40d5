// Conformance 2: >= 10^6 reports per mechanism form (all 24 one- and two-level
// forms), drawn with the platform CSPRNG, against the DECLARED channel (p*, q*
// of the Python-resolved params) by Pearson's chi-square.  The numeric grid
// forms (Piecewise, memoised Piecewise, Hybrid, Square Wave, the hierarchical
// histogram) are checked against the core's exact P[cell | value]
// (``output_distribution``, in vectors.json "channels"): M + 1 or so cells, each
// with >= 500 expected reports, so the chi-square approximation holds.  The
// hierarchy at eps 0.5 (GRR, GRR, Hadamard, Hadamard levels: 54 cells, >= 5,899
// expected each) and eps 3 (four GRR levels: 30 cells, >= 7,125), both at a value
// off its 16-point grid, so the rounding, the level draw and both oracles count.
//
// False-positive rate: each of the 28 tests fails when its p-value < 1e-6 / 28,
// so a correct SDK fails this file with probability <= 1e-6 (Bonferroni).
// Unary encodings: the d bits of a report are independent given the value, so
// the d per-bit counts are independent binomials and
// sum_i (c_i - N p_i)^2 / (N p_i (1 - p_i)) is chi-square with d df.
// Two-level forms: the permanent level is drawn with the SAME family code, fed
// the CSPRNG instead of the per-device HMAC_DRBG (a fresh device per report);
// the DRBG path itself is proven bit-exact by the shared vectors.  Memoised
// strings (prefix_olh/2) also through that path: 20,000 fresh secrets (the
// permanent level's (level, diff) table), and one device's 10^6 instantaneous
// draws (its (level, seed) fixed, its bucket a GRR of B' over g).
// CMS: given the seeds, the m bits of every report are independent, so the m
// per-bit counts are independent (sums of Bernoullis with variance p(1-p) each)
// and sum_b (c_b - mu_b)^2 / (N p (1-p)) is chi-square with m df, independent of
// the seeds' multinomial (S - 1 df).  Prefix OLH: a report's (level, seed,
// y - h(x) mod g) has the product law P[level] P[seed] P[diff]; the Pearson
// statistics of the (level, diff) table and of the seeds are asymptotically
// independent (their cells are uncorrelated under a product law), so their
// sum is chi-square with the sum of the df.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { buildMechanism, isTwoLevel, olhHash, olhLength, type Mechanism, type Report, type Spec, type Value } from "../src/mechanisms.js";
import { SystemRng } from "../src/rng.js";
import { registerAllForms, seedVector } from "../src/forms.js";
import { memoContext } from "../src/context.js";
import { chi2Stat, chi2Tail } from "./chi2.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8"));
const SPECS = new Map<string, Spec>((V.mechanisms as { spec: Spec }[]).map((c) => [c.spec.name, c.spec]));
const N = 1_000_000;
const FORMS = 28;  // tests in this file (24 forms; Square Wave and the hierarchy at two (eps,
                   // value); prefix_olh/2 also through its HMAC_DRBG and one device's instantaneous draws)
const ALPHA = 1e-6 / FORMS;
const rng = new SystemRng();
registerAllForms();

function draw(m: Mechanism, value: Value): Report {
  return isTwoLevel(m) ? m.instant(m.perturb(value, rng), rng) : m.perturb(value, rng);
}

function check(label: string, stat: number, df: number): void {
  const p = chi2Tail(stat, df);
  console.log(`# chi2 ${label}: N=${N} stat=${stat.toFixed(2)} df=${df} p=${p.toExponential(3)}`);
  assert.ok(p > ALPHA, `${label}: chi2=${stat} df=${df} p=${p} < ${ALPHA}`);
}

const cases: [string, number][] = [
  ["b.binary_rr.1.0", 1], ["b.forced_response.1.0", 0], ["b.l.1.0", 1],
  ["c.grr.4.1.0.0", 2], ["c.grr.4.1.0.1", 1],
  ["c.sue.37.1.0.0", 5], ["c.sue.37.1.0.1", 36], ["c.oue.37.1.0.0", 0], ["c.oue.37.1.0.1", 17],
  ["c.olh.37.1.0.0", 7], ["c.olh.37.1.0.1", 30],
  ["n.1.0.0.0", 30], ["n.1.0.0.1", 90],
  ["c.hadamard.37.1.0.0", 11], ["c.hadamard.37.1.0.1", 36],
  ["c.cms.37.1.0", 5], ["c.hcms.37.1.0", 11],
];

for (const [name, value] of cases) {
  test(`channel of ${name} (value ${value})`, () => {
    const spec = SPECS.get(name);
    assert.ok(spec, name);
    const m = buildMechanism(spec);
    const p = spec.params as Record<string, number>;
    const pStar = p.p_star, qStar = p.q_star, d = p.domain_size;
    const label = `${m.name}/${m.levels}`;
    if (m.name === "sue" || m.name === "oue") {
      const ones = new Float64Array(d);
      for (let n = 0; n < N; n++) {
        const bits = draw(m, value) as Uint8Array;
        for (let i = 0; i < d; i++) if ((bits[i >> 3] >> (i & 7)) & 1) ones[i]++;
      }
      let stat = 0;
      for (let i = 0; i < d; i++) {
        const q = i === value ? pStar : qStar;
        stat += (ones[i] - N * q) ** 2 / (N * q * (1 - q));
      }
      return check(label, stat, d);
    }
    let probs: number[];
    let cell: (r: Report) => number;
    if (m.name === "cms") {
      const buckets = p.buckets, seeds = p.seeds, length = olhLength(buckets, d);
      const seen = new Float64Array(seeds), ones = new Float64Array(buckets), mu = new Float64Array(buckets);
      for (let n = 0; n < N; n++) {
        const [head, bits] = (draw(m, value) as string).split(".");
        const s = Number(head), raw = Buffer.from(bits, "base64url");
        seen[s]++;
        for (let b = 0; b < buckets; b++) if ((raw[b >> 3] >> (b & 7)) & 1) ones[b]++;
      }
      for (let s = 0; s < seeds; s++) {
        const h = olhHash(buckets, length, s, value);
        for (let b = 0; b < buckets; b++) mu[b] += seen[s] * (b === h ? pStar : 1 - pStar);
      }
      let stat = seeds > 1 ? chi2Stat(seen, new Array(seeds).fill(1 / seeds), N) : 0;
      for (let b = 0; b < buckets; b++) stat += (ones[b] - mu[b]) ** 2 / (N * pStar * (1 - pStar));
      return check(label, stat, buckets + seeds - 1);
    }
    if (m.name === "olh" && m.levels === 2) {
      // P[(s, b) | v] = (1/S) sum_u P1[u | v] P2[b | h_s(u)]: the permanent GRR over d
      // (p1 = permanent_keep / 2^32), then the bucket's GRR over g (p2).
      const g = p.g, seeds = p.num_seeds, length = olhLength(g, d);
      const p1 = p.permanent_keep / 2 ** 32, q1 = (1 - p1) / (d - 1);
      const p2 = p.instantaneous_threshold / 2 ** 32, q2 = (1 - p2) / (g - 1);
      probs = [];
      for (let s = 0; s < seeds; s++) {
        const row = new Array<number>(g).fill(0);
        for (let u = 0; u < d; u++) {
          const h = olhHash(g, length, s, u), w = u === value ? p1 : q1;
          for (let b = 0; b < g; b++) row[b] += w * (b === h ? p2 : q2);
        }
        for (let b = 0; b < g; b++) probs.push(row[b] / seeds);
      }
      cell = (r) => { const [s, b] = r as readonly [number, number]; return s * g + b; };
    } else if (m.name === "olh") {
      const g = p.g, seeds = p.num_seeds;
      const length = olhLength(g, d);
      probs = [];
      for (let s = 0; s < seeds; s++) {
        const h = olhHash(g, length, s, value);
        for (let b = 0; b < g; b++) probs.push((b === h ? pStar : (1 - pStar) / (g - 1)) / seeds);
      }
      cell = (r) => { const [s, b] = r as readonly [number, number]; return s * g + b; };
    } else if (m.name === "hadamard") {
      const width = 2 ** Math.ceil(Math.log2(d + 1));
      probs = [];
      for (let y = 0; y < width; y++) {
        let x = (value + 1) & y, par = 0;
        while (x) { par ^= x & 1; x >>= 1; }
        probs.push(par === 0 ? (2 * pStar) / width : (2 * (1 - pStar)) / width);
      }
      cell = (r) => r as number;
    } else if (m.name === "hcms") {
      // P[(s, column, bit)] = 1/S 1/K (p if bit is row h_s(v) + 1's sign at column, else 1 - p).
      const buckets = p.buckets, seeds = p.seeds, length = olhLength(buckets, d);
      const width = 2 ** Math.ceil(Math.log2(buckets + 1));
      probs = [];
      for (let s = 0; s < seeds; s++) {
        const row = olhHash(buckets, length, s, value) + 1;
        for (let col = 0; col < width; col++) {
          let x = row & col, par = 0;
          while (x) { par ^= x & 1; x >>= 1; }
          const positive = 1 - par;
          for (let bit = 0; bit < 2; bit++) probs.push((bit === positive ? pStar : 1 - pStar) / seeds / width);
        }
      }
      cell = (r) => r as number;
    } else if (m.name === "grr") {
      probs = Array.from({ length: d }, (_, i) => (i === value ? pStar : qStar));
      cell = (r) => r as number;
    } else {
      // One bit: P[1] = p* (true 1), q* (true 0); a mean: q* + z (p* - q*).
      const z = m.numeric ? (value - (spec.lo as number)) / ((spec.hi as number) - (spec.lo as number)) : value;
      const one = qStar + z * (pStar - qStar);
      probs = [1 - one, one];
      cell = (r) => r as number;
    }
    const counts = new Float64Array(probs.length);
    for (let n = 0; n < N; n++) counts[cell(draw(m, value))]++;
    check(label, chi2Stat(counts, probs, N), probs.length - 1);
  });
}

for (const { name, value, probs } of V.channels as { name: string; value: number; probs: number[] }[]) {
  test(`exact channel of ${name} (value ${value})`, () => {
    const m = buildMechanism(SPECS.get(name)!);
    const counts = new Float64Array(probs.length);
    for (let n = 0; n < N; n++) counts[draw(m, value) as number]++;
    check(`${m.name}/${m.levels}`, chi2Stat(counts, probs, N), probs.length - 1);
  });
}

/**
 * The (level, y - h(x) mod g) table of ``n`` prefix reports of "hello" (and, with
 * ``seeds``, the seeds' counts) against P[level] P[diff] (P[diff = 0] = ``keep``) and
 * uniform seeds: the Pearson statistic and its df.
 */
function prefixStat(spec: Spec, n: number, keep: number, seeds: boolean, report: (x: Uint16Array) => number): [number, number] {
  const m = buildMechanism(spec);
  const p = spec.params as Record<string, number> & { cuts: number[]; shares: number[] };
  const g = p.g, S = p.seeds, levels = p.cuts.length;
  const total = p.shares.reduce((a, b) => a + b, 0);
  const x = m.input!("hello") as Uint16Array;
  const h = (level: number, seed: number) => seedVector(level, seed, p.cuts[level], g).reduce((acc, a, i) => (acc + a * x[i]) % g, 0);
  const hashes = new Map<number, number>();
  const table = new Float64Array(levels * g), seen = new Float64Array(S);
  for (let k = 0; k < n; k++) {
    const r = report(x), y = r % g, key = (r - y) / g, level = Math.floor(key / S), seed = key % S;
    let hk = hashes.get(key);
    if (hk === undefined) hashes.set(key, hk = h(level, seed));
    table[level * g + ((y - hk + g) % g)]++;
    seen[seed]++;
  }
  const probs: number[] = [];
  for (let l = 0; l < levels; l++) for (let diff = 0; diff < g; diff++) {
    probs.push((p.shares[l] / total) * (diff === 0 ? keep : (1 - keep) / (g - 1)));
  }
  const stat = chi2Stat(table, probs, n);
  return seeds ? [stat + chi2Stat(seen, new Array(S).fill(1 / S), n), levels * g - 1 + S - 1] : [stat, levels * g - 1];
}

test("channel of prefix_olh (eps 4, \"hello\", a-z, 3 levels)", () => {
  const spec = SPECS.get("s.0.6.1.4.0")!, m = buildMechanism(spec);
  const [stat, df] = prefixStat(spec, N, spec.params.p_star as number, true, (x) => draw(m, x) as number);
  check("prefix_olh/1", stat, df);
});

test("channel of prefix_olh/2 (eps_1 4, eps_inf 6, \"hello\"): p* composed of the two GRRs", () => {
  // A fresh device per report: P[y = h(x)] = p* = p1 p2 + (1 - p1) q2 (params.p_star).
  const spec = SPECS.get("s.l.0.6.1.4.0")!, m = buildMechanism(spec);
  assert.ok(isTwoLevel(m) && m.name === "prefix_olh");
  const [stat, df] = prefixStat(spec, N, spec.params.p_star as number, true, (x) => draw(m, x) as number);
  check("prefix_olh/2", stat, df);
});

test("prefix_olh/2: permanent responses through the device's HMAC_DRBG, a fresh secret each", () => {
  // The memoised path itself (20,000 fresh 32-byte secrets, 0.4 ms each): one prefix_olh
  // report at eps_inf, P[B' = h(x)] = p1 = permanent_keep / 2^32 (eps 1, g 29: >= 60
  // reports expected per cell).
  const spec = SPECS.get("s.l.0.6.1.1.0")!, m = buildMechanism(spec), context = memoContext(spec);
  assert.ok(isTwoLevel(m));
  const n = 20_000, p1 = (spec.params.permanent_keep as number) / 2 ** 32;
  const [stat, df] = prefixStat(spec, n, p1, false, (x) => m.permanent(x as unknown as number, rng.bytes(32), context) as number);
  const p = chi2Tail(stat, df);
  console.log(`# chi2 prefix_olh/2 permanent: N=${n} stat=${stat.toFixed(2)} df=${df} p=${p.toExponential(3)}`);
  assert.ok(p > ALPHA, `chi2=${stat} df=${df} p=${p} < ${ALPHA}`);
});

test("prefix_olh/2: one device's reports keep (level, seed) and move B' by the instantaneous GRR", () => {
  // The Client's path for one secret and value: instant(permanent(x)) per report.  Every
  // report has the permanent (level, seed); its bucket is B' w.p. p2 =
  // instantaneous_threshold / 2^32, each other bucket w.p. (1 - p2)/(g - 1).
  const spec = SPECS.get("s.l.0.6.1.4.0")!, m = buildMechanism(spec), context = memoContext(spec);
  assert.ok(isTwoLevel(m));
  const g = spec.params.g as number, p2 = (spec.params.instantaneous_threshold as number) / 2 ** 32;
  const x = m.input!("hello") as unknown as number, secret = rng.bytes(32);
  const perm = m.permanent(x, secret, context) as number, bucket = perm % g;
  // The Client redraws the permanent response per record (0.4 ms): the first 1,000 here.
  for (let n = 0; n < 1000; n++) assert.equal(m.permanent(x, secret, context), perm);
  const counts = new Float64Array(g);
  for (let n = 0; n < N; n++) {
    const r = m.instant(perm, rng) as number;
    assert.equal(r - (r % g), perm - bucket);
    counts[(r % g - bucket + g) % g]++;
  }
  const probs = Array.from({ length: g }, (_, i) => (i === 0 ? p2 : (1 - p2) / (g - 1)));
  check("prefix_olh/2 instant", chi2Stat(counts, probs, N), g - 1);
});
