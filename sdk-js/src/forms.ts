/**
 * ``@ldp-telemetry/sdk/forms``: the mechanism forms outside the core bundle,
 * opt-in and tree-shakeable (import only the forms your metrics use).
 *
 * - ``prefixOlh``: string metrics (``ldp_core.mechanisms.prefix``): the level
 *   drawn with the spec's integer ``shares``, a public seed, the OLH bucket of
 *   the prefix under a seed vector drawn from SHAKE-256, then GRR over ``g``.
 * - ``prefixOlhMemo``: memoised (two-level) string metrics, a spec with
 *   ``longitudinal`` (``ldp_core.mechanisms.prefix_memo``): that report at
 *   eps_inf memoised per device and normalised string, then a fresh GRR of its
 *   bucket per report.
 * - ``cms`` / ``hcms``: Apple's count-mean sketches over the projective family
 *   (``ldp_core.mechanisms.sketch``).
 * - ``hierarchical``: the hierarchical histogram of a numeric metric
 *   (``ldp_core.mechanisms.hierarchical``): the value rounded at random to the
 *   B**h grid points, a uniform level, that level's GRR or Hadamard response.
 *
 * Every parameter is read from the spec's ``params`` (``describe()``); the
 * keep threshold is ``params.keep``, else ``p_star`` * 2**32 (exact: the
 * channel's p is keep / 2**32, which a double holds exactly).  Square Wave
 * needs nothing from here: it is in the core.  A spec whose form is not
 * registered is refused at learn time with one log line naming this import,
 * and its records answer ``form_not_loaded``.
 *
 * @example
 *   import { registerForms, prefixOlh, prefixOlhMemo } from "@ldp-telemetry/sdk/forms";
 *   registerForms(prefixOlh, prefixOlhMemo);   // or registerAllForms()
 *   await client.record("search.query", "Zürich");
 *   await client.record("search.memo", "Zürich");   // a longitudinal spec: memoised, eps_inf once per string
 */
import { alphabet, symbols } from "./alphabet.js";
import { shake256 } from "./keccak.js";
import { base64url, family, grrStep, int, intEncode, olhHash, olhLength, permanentSeed, registerForm, roundInput, type Family, type Form } from "./mechanisms.js";

/** A form and the mechanism name it builds. */
export type NamedForm = readonly [string, Form];
import { bitLength, DrbgRng, type Rng } from "./rng.js";
import { utf8 } from "./sha256.js";

const WORD = 2 ** 32;

/** The keep threshold: ``params.keep``, else p* 2**32 (must be an integer in (0, 2**32)). */
function keepOf(p: Record<string, unknown>, name: string): number {
  const keep = p.keep ?? (p.p_star as number) * WORD;
  if (!Number.isInteger(keep) || (keep as number) <= 0 || (keep as number) >= WORD) {
    throw new Error(`${name} needs an integer keep threshold in (0, 2**32), got ${keep}`);
  }
  return keep as number;
}

function parity(x: number): number {
  let bit = 0;
  for (; x; x &= x - 1) bit ^= 1;
  return bit;
}

/** a_{level, seed} of the prefix form: ``length`` digits of GF(g) from SHAKE-256, by rejection. */
export function seedVector(level: number, seed: number, length: number, g: number): number[] {
  const limit = 65536 - (65536 % g), label = utf8(`ldp-prefix/${g}/${level}/${seed}`);
  for (let size = 4 * length + 8; ; size *= 2) {
    const stream = shake256(label, size), out: number[] = [];
    for (let i = 0; i < size && out.length < length; i += 2) {
      const word = stream[i] | (stream[i + 1] << 8);
      if (word < limit) out.push(word % g);
    }
    if (out.length === length) return out;
  }
}

/** The prefix family of a spec with bucket threshold ``keep`` (``PrefixOLH._perturb``, draw for draw). */
function prefixFamily(p: Record<string, unknown>, keep: number, name: string) {
  const a = alphabet(p.alphabet, p.max_length, p.casefold);
  const cuts = p.cuts as number[], shares = p.shares as number[];
  const g = int(p, "g", name), seeds = int(p, "seeds", name);
  if (!Array.isArray(cuts) || !Array.isArray(shares) || !cuts.length || shares.length !== cuts.length
    || cuts.some((c, i) => !Number.isInteger(c) || c < 1 || c > a.maxLength || (i > 0 && c <= cuts[i - 1]))
    || shares.some((w) => !Number.isSafeInteger(w) || w < 1)) {
    throw new Error(`${name} needs rising cuts <= max_length and one positive share each, got ${JSON.stringify([cuts, shares])}`);
  }
  const total = shares.reduce((x, y) => x + y, 0);
  const vectors = new Map<number, number[]>();  // level * seeds + seed -> a (public, cached)
  const family: Family<Uint16Array> = {
    input: (value) => symbols(a, value),
    perturb: (syms, rng: Rng) => {
      let draw = rng.randrange(total), level = 0;
      while (draw >= shares[level]) draw -= shares[level++];
      const seed = rng.randrange(seeds), key = level * seeds + seed;
      let v = vectors.get(key);
      if (!v) vectors.set(key, v = seedVector(level, seed, cuts[level], g));
      let h = 0;
      for (let i = 0; i < v.length; i++) h = (h + v[i] * syms[i]) % g;
      return (key * g) + grrStep(h, keep, g, rng);
    },
    encode: intEncode,
  };
  return { family, g, base: a.base };
}

/** Strings nobody listed (Python ``PrefixOLH._perturb``, draw for draw). */
export const prefixOlh: NamedForm = ["prefix_olh", (p) => prefixFamily(p, keepOf(p, "prefix_olh"), "prefix_olh").family];

/**
 * Memoised strings (Python ``LongitudinalPrefixOLH``): the permanent response
 * (level, seed, B') is one ``prefixOlh`` report at eps_inf (``permanent_keep``)
 * drawn from the HMAC_DRBG of (secret, context, code), the code of the
 * normalised string (sum sym_i B^i: "Hello" and "hello" share it); each report
 * keeps (level, seed) and sends B' through a fresh GRR over g
 * (``instantaneous_threshold``, applied by the core).  The memo key, the
 * lifetime ledger's, is that code (only ever inside HMACs).  A spec whose
 * ``domain_size`` (B**L) passes 2**53 is refused: JSON.parse rounds it, so the
 * fingerprint, hence the memo context, would not be Python's.
 */
export const prefixOlhMemo: NamedForm = ["permanent_prefix_olh", (p) => {
  const name = "prefix_olh";
  int(p, "domain_size", name);
  const { family, g, base } = prefixFamily(p, int(p, "permanent_keep", name), name);
  const code = (syms: Uint16Array): number => syms.reduceRight((c, s) => c * base + s, 0);
  return {
    ...family,
    memoKey: (syms) => ({ key: code(syms), numeric: false }),
    permanent: (syms, secret, context) => family.perturb(syms, new DrbgRng(permanentSeed(secret, context, code(syms), false))),
    instant: (perm, keep, rng) => {
      const bucket = (perm as number) % g;
      return (perm as number) - bucket + grrStep(bucket, keep, g, rng);
    },
  } satisfies Family<Uint16Array>;
}];

/** The projective family of the sketches: (seeds, buckets m, h_seed). */
function sketch(p: Record<string, unknown>, d: number, name: string) {
  const m = int(p, "buckets", name), seeds = int(p, "seeds", name), length = olhLength(m, d);
  return { m, seeds, keep: keepOf(p, name), bucket: (seed: number, v: number) => olhHash(m, length, seed, v) };
}

/** Count-mean sketch: seed, then bit b set iff its word < keep (b = h) or < 2**32 - keep. */
export const cms: NamedForm = ["cms", (p, d) => {
  const { m, seeds, keep, bucket } = sketch(p, d, "cms");
  const family: Family = {
    perturb: (v, rng) => {
      const seed = rng.randrange(seeds), h = bucket(seed, v), w = rng.words(m);
      const bits = new Uint8Array((m + 7) >> 3);
      for (let b = 0; b < m; b++) if (w[b] < (b === h ? keep : WORD - keep)) bits[b >> 3] |= 1 << (b & 7);
      return `${seed}.${base64url(bits)}`;
    },
    encode: (r) => `"${r as string}"`,
  };
  return family;
}];

/** Hadamard count-mean sketch: ((seed K + column) 2 + sign), the sign kept iff a word < keep. */
export const hcms: NamedForm = ["hcms", (p, d) => {
  const { m, seeds, keep, bucket } = sketch(p, d, "hcms");
  const bits = bitLength(m), width = 2 ** bits;
  const family: Family = {
    perturb: (v, rng) => {
      const seed = rng.randrange(seeds), row = bucket(seed, v) + 1;
      const column = rng.getrandbits(bits), kept = rng.getrandbits(32) < keep ? 1 : 0;
      return (seed * width + column) * 2 + ((1 - parity(row & column)) ^ (1 - kept));
    },
    encode: intEncode,
  };
  return family;
}];

/**
 * Hierarchical histogram (Python ``HierarchicalHistogram._perturb``, draw for draw): grid
 * point j of the k + 1 = B**h (j + 1 iff a word < the rounding threshold), a level l
 * uniform in [0, h), then that level's oracle (``params.levels[l]``: the core's GRR or
 * Hadamard response with its own ``keep``) of j's node there, j // B**(h - 1 - l),
 * shifted by the level's first cell ``offsets[l]``.  A report is one integer cell.
 */
export const hierarchical: NamedForm = ["hierarchical", (p, _d, lo, hi) => {
  const name = "hierarchical", b = int(p, "branching", name), depth = int(p, "depth", name);
  const levels = p.levels as Record<string, unknown>[], offsets = p.offsets as number[];
  const bad = (what: string, got: unknown): Error => new Error(`${name} needs ${what}, got ${JSON.stringify(got)}`);
  if (b < 2 || depth < 1 || b ** depth > 1024) throw bad("branching >= 2 and at most 1024 leaves", [b, depth]);
  if (!Array.isArray(levels) || levels.length !== depth || !Array.isArray(offsets) || offsets.length !== depth + 1
    || offsets.some((o) => !Number.isSafeInteger(o)) || offsets[0] !== 0 || offsets[depth] !== int(p, "num_counters", name)) {
    throw bad(`${depth} levels and ${depth + 1} integer offsets from 0 to num_counters`, { levels: levels?.length, offsets });
  }
  const oracles = levels.map((level, l) => {
    const nodes = int(level, "domain_size", name), kind = level.mechanism;
    if (nodes !== b ** (l + 1) || (kind !== "grr" && kind !== "hadamard")
      || offsets[l + 1] - offsets[l] !== int(level, "num_counters", name)) {
      throw bad(`level ${l}: grr or hadamard over ${b ** (l + 1)} nodes, ${offsets[l + 1] - offsets[l]} cells`, level);
    }
    return family(kind, level, "", nodes, 0, 1);
  });
  const k = b ** depth - 1;
  const perturb = (x: number, rng: Rng): number => {
    const [j, up] = roundInput(x, lo, hi, k);
    const point = j + (rng.getrandbits(32) < up ? 1 : 0), l = rng.randrange(depth);
    return offsets[l] + (oracles[l].perturb(Math.floor(point / b ** (depth - 1 - l)), rng) as number);
  };
  return { perturb, encode: intEncode } satisfies Family;
}];

/** Register forms for every Client opened afterwards; only the forms named here are bundled. */
export function registerForms(...forms: NamedForm[]): void {
  for (const [name, form] of forms) registerForm(name, form);
}

/** Register every form of this module (``registerForms(prefixOlh, prefixOlhMemo, cms, hcms, hierarchical)``). */
export function registerAllForms(): void {
  registerForms(prefixOlh, prefixOlhMemo, cms, hcms, hierarchical);
}
