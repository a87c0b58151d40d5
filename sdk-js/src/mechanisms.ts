/**
 * The mechanisms of ``ldp_core.mechanisms``, one- and two-level, built from the
 * resolved parameters the collector serves (``spec.params`` =
 * ``spec.build().describe()``).  Every threshold is read from those integers,
 * never recomputed from epsilon, and every draw mirrors the Python ``_perturb``
 * / ``_instant`` of the same family, draw for draw: fed the same HMAC_DRBG both
 * produce the same report (checked by the shared vectors).  The forms that need
 * code of their own (``prefix_olh``, ``cms``, ``hcms``, ``hierarchical``) are registered from
 * ``forms.ts`` (``@ldp-telemetry/sdk/forms``; a two-level form under
 * "permanent_<name>"); without it their specs throw ``FormNotLoaded``, which
 * the Client turns into one log line and a status.
 *
 * @example
 *   const m = buildMechanism(spec);        // spec: one entry of GET /v1/metrics
 *   m.encode(m.perturb(2, new SystemRng())) // e.g. "3"
 */
import { bitLength, DrbgRng, type Rng } from "./rng.js";
import { hmacSha256, utf8 } from "./sha256.js";
import { pyFloatHex } from "./pyjson.js";
import { b64url } from "./tokens.js";

/** A randomised report: an index, an OLH (seed, bucket), a packed unary bit vector, or a payload text. */
export type Report = number | readonly [number, number] | Uint8Array | string;

/**
 * A mechanism's input: an index, a number in [lo, hi], or a string metric's
 * symbols (1..B-1, then 0 past the end: ``forms.ts``).
 */
export type Value = number | Uint16Array;

/** The fields of a metric spec the device reads (``MetricSpec.to_json``). */
export interface Spec {
  name: string;
  version: number;
  kind: "categorical" | "boolean" | "numeric" | "string";
  epsilon: number;
  mechanism: string;
  epoch: "hour" | "day";
  domain?: string[];
  lo?: number;
  hi?: number;
  longitudinal?: { epsilon_inf: number };
  max_length?: number;
  alphabet?: string;
  casefold?: boolean;
  params: Record<string, unknown>;
}

/** One mechanism: the device side only (randomise and encode). */
export interface Mechanism {
  readonly name: string;
  readonly levels: 1 | 2;
  /** epsilon charged per report (eps_1 for two levels). */
  readonly epsilon: number;
  /** Whether the input is a float in [lo, hi] (else an index). */
  readonly numeric: boolean;
  /** The one-level randomiser (``_perturb``); two levels: the permanent level's. */
  perturb(value: Value, rng: Rng): Report;
  /** A string metric's input from the app's value, or why it is refused (never quoting it). */
  input?(value: unknown): Value | string;
  /** The report's wire payload as JSON text (``payload_text(m.encode(r))``). */
  encode(report: Report): string;
}

/** A two-level mechanism: permanent response from the DRBG, then an instantaneous draw. */
export interface TwoLevelMechanism extends Mechanism {
  readonly levels: 2;
  readonly epsilonInf: number;
  permanent(value: number, secret: Uint8Array, context: string): Report;
  instant(permanent: Report, rng: Rng): Report;
  /**
   * What the permanent response is a function of besides (secret, context), the
   * lifetime ledger's key (Python ``memo_key``): the value itself, or for the
   * memoised Piecewise mean the grid point the device rounds it to (an integer).
   */
  memoKey(value: number, secret: Uint8Array, context: string): { key: number; numeric: boolean };
}

const WORD = 2 ** 32;
const LABEL = utf8("ldp-telemetry/permanent/v2");
const OFFSET_LABEL = utf8("ldp-telemetry/offset/v1");

function checkSecret(secret: Uint8Array): void {
  if (secret.length < 16) throw new RangeError("secret must be at least 16 bytes");
}

/** HMAC-SHA256(secret, LABEL | 0 | context | 0 | "i:<int>" or "f:<float.hex()>"). */
export function permanentSeed(secret: Uint8Array, context: string, value: number, numeric: boolean): Uint8Array {
  checkSecret(secret);
  const text = numeric ? `f:${pyFloatHex(value)}` : `i:${value}`;
  return hmacSha256(secret, LABEL, Uint8Array.of(0), utf8(context), Uint8Array.of(0), utf8(text));
}

/** HMAC-SHA256(secret, OFFSET_LABEL | 0 | context): the seed of a device's rounding offset. */
export function offsetSeed(secret: Uint8Array, context: string): Uint8Array {
  checkSecret(secret);
  return hmacSha256(secret, OFFSET_LABEL, Uint8Array.of(0), utf8(context));
}

export function int(params: Record<string, unknown>, key: string, what: string): number {
  // Below 2**53 only: JSON.parse rounds a larger integer, and a rounded threshold is
  // another channel (a Piecewise spec above eps ~ 14.5 is refused here).
  const v = params[key];
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
    throw new Error(`${what} needs an integer ${key} < 2**53, got ${v}`);
  }
  return v;
}

function num(params: Record<string, unknown>, key: string, what: string): number {
  const v = params[key];
  if (typeof v !== "number" || !Number.isFinite(v)) throw new Error(`${what} needs a number ${key}, got ${v}`);
  return v;
}

export function grrStep(value: number, keep: number, size: number, rng: Rng): number {
  // Both numbers are drawn whatever happens (Python ``grr_step``).
  const kept = rng.getrandbits(32) < keep;
  const other = (value + 1 + rng.randrange(size - 1)) % size;
  return kept ? value : other;
}

function parity(x: number): number {
  x ^= x >>> 16; x ^= x >>> 8; x ^= x >>> 4; x ^= x >>> 2; x ^= x >>> 1;
  return x & 1;
}

/** base64url without padding (the unary encodings' payload). */
export const base64url = b64url;

/** A one-level family: the randomiser, the encoding, the two-level instantaneous step. */
export interface Family<V = number> {
  perturb(value: V, rng: Rng): Report;
  input?(value: unknown): V | string;
  encode(report: Report): string;
  /** ``_instant`` of the two-level form with instantaneous threshold ``keep`` (if it has one). */
  instant?(permanent: Report, keep: number, rng: Rng): Report;
  /** A permanent level that is not ``perturb`` fed the DRBG of the value (and its key). */
  permanent?(value: V, secret: Uint8Array, context: string): Report;
  memoKey?(value: V, secret: Uint8Array, context: string): { key: number; numeric: boolean };
}

export function intEncode(report: Report): string {
  return String(report as number);
}

/** (j, T): grid point j, and j + 1 instead iff a 32-bit word < T (Python ``_grid.round_input``). */
export function roundInput(x: number, lo: number, hi: number, k: number): [number, number] {
  const s = ((x - lo) / (hi - lo)) * k;  // the same IEEE operations as Python (x in [lo, hi])
  const j = Math.min(Math.floor(s), k);
  return [j, j < k ? Math.ceil((s - j) * WORD) : 0];
}

/** A grid Piecewise channel: k + 1 grid points, M = k + block cells, weights a (block) > b. */
interface Grid { k: number; block: number; a: bigint; b: bigint; total: bigint }

function grid(at: (key: string) => number, blockKey = "block"): Grid {
  const k = at("grid"), block = at(blockKey), a = BigInt(at("a")), b = BigInt(at("b"));
  return { k, block, a, b, total: BigInt(block) * a + BigInt(k) * b };
}

/** The cell for grid point j and u uniform in [0, D) (Python ``PiecewiseMean.cell_of``). */
export function cellOf(g: Grid, j: number, u: bigint): number {
  const inside = BigInt(g.block) * g.a;
  if (u < inside) return j + Number(u / g.a);
  const w = Number((u - inside) / g.b);
  return w < j ? w : w + g.block;
}

/** One-level grid Piecewise (Python ``PiecewiseMean._perturb``): rounding word, then u. */
function piecewise(g: Grid, x: number, lo: number, hi: number, rng: Rng): number {
  const [j, up] = roundInput(x, lo, hi, g.k);
  const point = j + (rng.getrandbits(32) < up ? 1 : 0);
  return cellOf(g, point, rng.below(g.total));
}

/** Reads a family's thresholds from params under ``prefix`` ("" or "permanent_"). */
export function family(name: string, p: Record<string, unknown>, pre: string, d: number, lo: number, hi: number): Family {
  const at = (k: string) => int(p, pre + k, name);
  const flipBit = (perm: Report, keep: number, rng: Rng): Report =>
    (perm as number) ^ (rng.getrandbits(32) >= keep ? 1 : 0);
  switch (name) {
    case "binary_rr": {
      const kn = at("keep_num"), kd = at("keep_den");
      return { perturb: (v, rng) => v ^ (rng.randrange(kd) >= kn ? 1 : 0), encode: intEncode, instant: flipBit };
    }
    case "forced_response": {
      const tn = at("truth_num"), td = at("truth_den"), yn = at("yes_num"), yd = at("yes_den");
      return {
        perturb: (v, rng) => {
          const honest = rng.randrange(td) < tn ? 1 : 0;
          const coin = rng.randrange(yd) < yn ? 1 : 0;
          return (honest & v) | ((1 - honest) & coin);
        },
        encode: intEncode, instant: flipBit,
      };
    }
    case "grr": {
      const keep = at("keep");
      return {
        perturb: (v, rng) => grrStep(v, keep, d, rng), encode: intEncode,
        instant: (perm, k, rng) => grrStep(perm as number, k, d, rng),
      };
    }
    case "sue": case "oue": {
      const one = at("one"), zero = at("zero");
      const nbytes = (d + 7) >> 3;
      return {
        // One word per bit: bit i is 1 iff w_i < zero, the true bit iff w_v < one
        // (Python ``_perturb_words``; zero < one).
        perturb: (v, rng) => {
          const w = rng.words(d);
          const out = new Uint8Array(nbytes);
          for (let i = 0; i < d; i++) if (w[i] < zero) out[i >> 3] |= 1 << (i & 7);
          if (w[v] < one) out[v >> 3] |= 1 << (v & 7);
          return out;
        },
        encode: (r) => `"${base64url(r as Uint8Array)}"`,
        instant: (perm, k, rng) => {
          const w = rng.words(d);
          const src = perm as Uint8Array;
          const out = new Uint8Array(nbytes);
          for (let i = 0; i < d; i++) {
            const bit = (src[i >> 3] >> (i & 7)) & 1;
            if ((bit === 1) === (w[i] < k)) out[i >> 3] |= 1 << (i & 7);
          }
          return out;
        },
      };
    }
    case "olh": {
      const g = at("g"), seeds = at("num_seeds"), keep = at("keep");
      const length = olhLength(g, d);
      const bucket = (seed: number, value: number): number => olhHash(g, length, seed, value);
      return {
        perturb: (v, rng) => {
          const seed = rng.randrange(seeds);
          return [seed, grrStep(bucket(seed, v), keep, g, rng)] as const;
        },
        encode: (r) => { const [s, b] = r as readonly [number, number]; return `[${s},${b}]`; },
        instant: (perm, k, rng) => {
          const [s, b] = perm as readonly [number, number];
          return [s, grrStep(b, k, g, rng)] as const;
        },
      };
    }
    case "one_bit_mean": {
      const one = at("one"), zero = at("zero");
      return {
        // 1 iff u < ceil(zero + z (one - zero)), z = (x - lo)/(hi - lo) exactly.
        perturb: (x, rng) => (rng.getrandbits(32) < meanLimit(x, lo, hi, zero, one) ? 1 : 0),
        encode: intEncode, instant: flipBit,
      };
    }
    case "piecewise": {
      // Two levels (Python ``LongitudinalPiecewise``): alpha-point rounding with the
      // device's offset (a word from HMAC_DRBG(offsetSeed)), the permanent cell of that
      // grid point (one DRBG draw over D), then keep it iff a word < keep, else a cell
      // uniform over all M (both draws every time).  ``perturb`` is the permanent
      // level's law for a fresh device (offset uniform): one-level Piecewise.
      const g = grid(at), cells = g.k + g.block;
      const point = (x: number, secret: Uint8Array, context: string): number => {
        const [j, up] = roundInput(x, lo, hi, g.k);
        return j + (new DrbgRng(offsetSeed(secret, context)).getrandbits(32) < up ? 1 : 0);
      };
      return {
        perturb: (x, rng) => piecewise(g, x, lo, hi, rng), encode: intEncode,
        instant: (perm, k, rng) => {
          const kept = rng.getrandbits(32) < k;
          const other = rng.randrange(cells);
          return kept ? perm : other;
        },
        memoKey: (x, secret, context) => ({ key: point(x, secret, context), numeric: false }),
        permanent: (x, secret, context) => {
          const j = point(x, secret, context);
          return cellOf(g, j, new DrbgRng(permanentSeed(secret, context, j, false)).below(g.total));
        },
      };
    }
    case "hybrid": {
      // Piecewise cells 0..M-1 iff a word < mix, else the 1BitMean bit as cell M or M + 1.
      const g = grid(at), mix = at("mix"), one = at("one"), zero = at("zero");
      return {
        perturb: (x, rng) => {
          if (rng.getrandbits(32) < mix) return piecewise(g, x, lo, hi, rng);
          return g.k + g.block + (rng.getrandbits(32) < meanLimit(x, lo, hi, zero, one) ? 1 : 0);
        },
        encode: intEncode,
      };
    }
    case "hadamard": {
      const keep = at("keep");
      const bits = bitLength(d);
      return {
        perturb: (v, rng) => {
          const row = v + 1;
          const inside = rng.getrandbits(32) < keep ? 1 : 0;
          const y = rng.getrandbits(bits);
          const wrong = parity(row & y) ^ (1 - inside);
          return y ^ (wrong * (row & -row));
        },
        encode: intEncode,
        instant: (perm, k, rng) => {
          const kept = rng.getrandbits(32) < k;
          const other = rng.getrandbits(bits);
          return kept ? perm : other;
        },
      };
    }
    case "square_wave": {
      // Square Wave on the grid: the one-level Piecewise draw with the spec's window.
      const g = grid(at, "window");
      return { perturb: (x, rng) => piecewise(g, x, lo, hi, rng), encode: intEncode };
    }
    default: {
      // A form of ``forms.ts``; its two-level form is registered as "permanent_<name>".
      const key = pre + name, form = FORMS.get(key);
      if (form) return form(p, d, lo, hi);
      throw key in OPTIONAL ? new FormNotLoaded(key) : new Error(`unknown mechanism ${JSON.stringify(key)}`);
    }
  }
}

/** A form outside the core: (params, d, lo, hi) -> its one-level family (any input type: a
 * string form takes symbols, a sketch an index). */
export type Form = (p: Record<string, unknown>, d: number, lo: number, hi: number) => Family<any>;

const FORMS = new Map<string, Form>();
/** The forms ``@ldp-telemetry/sdk/forms`` adds, by mechanism name -> its export. */
const OPTIONAL: Record<string, string> = { prefix_olh: "prefixOlh", permanent_prefix_olh: "prefixOlhMemo", cms: "cms", hcms: "hcms", hierarchical: "hierarchical" };

/** A spec needs a form this build has not registered; the message names the import that adds it. */
export class FormNotLoaded extends Error {
  override name = "FormNotLoaded";
  constructor(readonly form: string) {
    super(`mechanism ${form} is not loaded: import { registerForms, ${OPTIONAL[form]} } from "@ldp-telemetry/sdk/forms"; registerForms(${OPTIONAL[form]})`);
  }
}

/** Make ``name`` buildable (``forms.ts``; Clients opened later use it). */
export function registerForm(name: string, form: Form): void {
  FORMS.set(name, form);
}

/** h_seed(value) of the projective OLH family: <a_seed, base-g digits of value> mod g. */
export function olhHash(g: number, length: number, seed: number, value: number): number {
  // The projective point a_seed: zeros, a leading 1, then base-g digits.
  let rest = seed, lead = 0, block = g ** (length - 1);
  while (rest >= block && lead < length) { rest -= block; lead++; block /= g; }
  if (lead >= length) throw new RangeError(`bad OLH seed ${seed}`);
  const a = new Array<number>(length).fill(0);
  a[lead] = 1;
  for (let i = length - 1; i > lead; i--) { a[i] = rest % g; rest = Math.floor(rest / g); }
  let sum = 0, x = value;
  for (let i = length - 1; i >= 0; i--) { sum = (sum + a[i] * (x % g)) % g; x = Math.floor(x / g); }
  return sum;
}

/** L, the number of base-g digits of values below d. */
export function olhLength(g: number, d: number): number {
  let length = 1;
  for (let span = g; span < d; span *= g) length++;
  return length;
}

function exactScaled(x: number): bigint {
  // x * 2**1074 as an exact integer.
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const biased = (view.getUint32(0) >>> 20) & 0x7ff;
  const frac = (BigInt(view.getUint32(0) & 0xfffff) << 32n) | BigInt(view.getUint32(4));
  const mag = biased === 0 ? frac : (frac | (1n << 52n)) << BigInt(biased - 1);
  return x < 0 ? -mag : mag;
}

/** ceil(zero + (x - lo)/(hi - lo) * (one - zero)), exactly, for lo <= x <= hi. */
export function meanLimit(x: number, lo: number, hi: number, zero: number, one: number): number {
  const l = exactScaled(lo);
  const num = (exactScaled(x) - l) * BigInt(one - zero);
  const den = exactScaled(hi) - l;
  return zero + Number((num + den - 1n) / den);
}

/** The mechanism of a spec, from its resolved ``params``. */
export function buildMechanism(spec: Spec): Mechanism | TwoLevelMechanism {
  const p = spec.params ?? {};
  const name = String(p.mechanism ?? spec.mechanism);
  // A string metric's domain (B**L codes) may pass 2**53: its form reads what it needs.
  const d = spec.kind === "string" ? 0 : int(p, "domain_size", name);
  const numeric = spec.kind === "numeric";
  const lo = numeric ? Number(spec.lo) : 0, hi = numeric ? Number(spec.hi) : 1;
  if (numeric && !(lo < hi)) throw new Error(`numeric spec ${spec.name} needs lo < hi`);
  const epsilon = num(p, "epsilon", name);
  if (p.levels === 2 && name === "olh") return memoisedOlh(p, d, epsilon, numeric);
  if (p.levels === 2) {
    const fam = family(name, p, "permanent_", d, lo, hi);
    if (!fam.instant) throw new Error(`no two-level ${name}`);
    const keep = int(p, "instantaneous_threshold", name);
    return {
      name, levels: 2, epsilon, numeric, epsilonInf: num(p, "epsilon_inf", name),
      perturb: fam.perturb, encode: fam.encode, input: fam.input,
      memoKey: fam.memoKey ?? ((v) => ({ key: v, numeric })),
      permanent: fam.permanent ?? ((v, secret, context) => fam.perturb(v, new DrbgRng(permanentSeed(secret, context, v, numeric)))),
      instant: (perm, rng) => fam.instant!(perm, keep, rng),
    };
  }
  const fam = family(name, p, "", d, lo, hi);
  return { name, levels: 1, epsilon, numeric, perturb: fam.perturb, encode: fam.encode, input: fam.input };
}

/**
 * Two-level OLH (Python ``LongitudinalOLH``): the permanent response is a GRR over
 * the d values (``permanent_keep``), drawn from the per-device HMAC_DRBG; every
 * report is a fresh one-level OLH of it: a new seed, then the bucket's GRR with
 * ``instantaneous_threshold`` (Python ``_instant``, draw for draw).
 */
function memoisedOlh(p: Record<string, unknown>, d: number, epsilon: number, numeric: boolean): TwoLevelMechanism {
  const name = "olh";
  const permanentKeep = int(p, "permanent_keep", name);
  const keep = int(p, "instantaneous_threshold", name);
  const g = int(p, "g", name), seeds = int(p, "num_seeds", name);
  const length = olhLength(g, d);
  const perturb = (v: number, rng: Rng): Report => grrStep(v, permanentKeep, d, rng);
  return {
    name, levels: 2, epsilon, numeric, epsilonInf: num(p, "epsilon_inf", name),
    perturb, memoKey: (v) => ({ key: v, numeric }),
    // A permanent response is an index, a report a [seed, bucket] pair.
    encode: (r) => {
      if (typeof r === "number") return String(r);
      const [s, b] = r as readonly [number, number];
      return `[${s},${b}]`;
    },
    permanent: (v, secret, context) => perturb(v, new DrbgRng(permanentSeed(secret, context, v, numeric))),
    instant: (perm, rng) => {
      const seed = rng.randrange(seeds);
      return [seed, grrStep(olhHash(g, length, seed, perm as number), keep, g, rng)] as const;
    },
  };
}

/** Whether a mechanism has two levels. */
export function isTwoLevel(m: Mechanism): m is TwoLevelMechanism {
  return m.levels === 2;
}

export { WORD };
