// The minified browser bundles (scripts/bundle.mjs: esbuild, then terser's mangler), as a
// page loads them: the ESM files imported, the IIFEs run as scripts that set
// window.LdpTelemetry.  Every other test imports src/; this one checks that minifying kept
// the behaviour: the shared vectors byte for byte through each bundle's public API (DRBG,
// device tokens, permanent seeds, batch JSON, every mechanism's params, fingerprint,
// context and reports, blind RSA tokens), the core refusing the opt-in forms by name, and a
// Client recording.  Run after ``npm run build`` (``npm test``).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { runInThisContext } from "node:vm";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const dist = fileURLToPath(new URL("..", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8"));
/** The forms outside the core (``forms.ts``), by mechanism and levels. */
const OPT_IN = new Set(["prefix_olh/1", "prefix_olh/2", "cms/1", "hcms/1", "hierarchical/1"]);

const hex = (b: Uint8Array): string => Buffer.from(b).toString("hex");
const bytes = (h: string): Uint8Array => new Uint8Array(Buffer.from(h, "hex"));

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Api = any;

async function esm(file: string): Promise<Api> {
  return import(new URL(`../${file}`, import.meta.url).href);
}

/** Run an IIFE bundle as a classic script; what it left on the global object. */
function iife(file: string): Api {
  const g = globalThis as { LdpTelemetry?: Api };
  delete g.LdpTelemetry;
  runInThisContext(readFileSync(`${dist}${file}`, "utf8"), { filename: file });
  const api = g.LdpTelemetry;
  delete g.LdpTelemetry;
  return api;
}

/** The vectors through ``api``; ``full``: the opt-in forms are registered. Returns forms seen. */
function vectors(api: Api, full: boolean): Set<string> {
  const nist = new api.HmacDrbg(bytes(V.drbg.nist.seed));
  nist.generate(128);
  assert.equal(hex(nist.generate(128)), V.drbg.nist.expected);
  const ops = new api.DrbgRng(bytes(V.drbg.ops_seed));
  for (const [op, arg, want] of V.drbg.ops as [string, number, number | number[]][]) {
    const got = op === "bits" ? ops.getrandbits(arg) : op === "range" ? ops.randrange(arg) : Array.from(ops.words(arg));
    assert.deepEqual(got, want, `${op}(${arg})`);
  }
  for (const [s, m, v, e, want] of V.tokens) assert.equal(api.deviceToken(bytes(s), m, v, e), want);
  for (const [s, c, v, isFloat, want] of V.permanent_seeds) assert.equal(hex(api.permanentSeed(bytes(s), c, v, isFloat)), want);
  const rows = (V.batch.rows as [string, number, number, string, string, string][]).map(
    ([metric, version, epoch, reportId, token, payload]) => ({ metric, version, epoch, reportId, token, payload }));
  assert.equal(api.batchJson(rows), V.batch.json);

  const seen = new Set<string>();
  for (const c of V.mechanisms) {
    // ``levels``: 2 for a two-level form; the hierarchy's is its list of level oracles.
    const form = `${c.spec.params.mechanism ?? c.spec.mechanism}/${c.spec.params.levels === 2 ? 2 : 1}`;
    if (!full && OPT_IN.has(form)) {
      assert.throws(() => api.buildMechanism(c.spec), /is not loaded: import \{ registerForms, /, c.spec.name);
      continue;
    }
    const m = api.buildMechanism(c.spec);
    seen.add(`${m.name}/${m.levels}`);
    assert.equal(m.epsilon, c.canonical_epsilon, c.spec.name);
    assert.equal(api.mechanismFingerprint(c.spec), c.fingerprint, c.spec.name);
    assert.equal(api.memoContext(c.spec), c.context);
    for (const d of c.draws) {
      const rng = new api.DrbgRng(bytes(d.seed));
      const value = typeof d.value === "string" ? m.input(d.value) : d.value;
      if (api.isTwoLevel(m)) {
        const secret = bytes(d.secret);
        const perm = m.permanent(value, secret, c.context);
        assert.equal(m.encode(perm), d.permanent, `${c.spec.name} permanent(${d.value})`);
        assert.equal(m.encode(m.instant(perm, rng)), d.payload, `${c.spec.name} instant(${d.value})`);
        assert.equal(m.memoKey(value, secret, c.context).key, d.memo_key, `${c.spec.name} memo key(${d.value})`);
      } else {
        assert.equal(m.encode(m.perturb(value, rng)), d.payload, `${c.spec.name} perturb(${d.value})`);
      }
    }
  }

  const T = V.blind_rsa;
  const key = api.keyFromJson(T.key);
  assert.equal(hex(key.keyId), T.key.key_id);
  for (const c of T.cases) {
    const p = api.prepare(key, c.period, c.epoch, { nonce: bytes(c.nonce), salt: bytes(c.salt), inv: BigInt(`0x${c.inv}`) });
    assert.equal(hex(p.blinded), c.blinded, `${c.period} ${c.epoch}`);
    assert.equal(api.wireToken(key, p, bytes(c.blind_sig)), c.token, `${c.period} ${c.epoch}`);
    assert.throws(() => api.wireToken(key, { ...p, epoch: c.epoch + 1 }, bytes(c.blind_sig)), api.TokenError);
  }
  return seen;
}

/** A Client of the bundle records into its spool (bundled spec, no network, memory store). */
async function records(api: Api): Promise<void> {
  const spec = V.mechanisms.find((c: { spec: { params: { mechanism: string; levels?: number } } }) =>
    c.spec.params.mechanism === "grr" && (c.spec.params.levels ?? 1) === 1).spec;
  const client = await api.Client.open({ url: "http://127.0.0.1:9", apiKey: "k", metrics: [spec], fetchMetrics: false, interval: 0 });
  assert.deepEqual(await client.record(spec.name, spec.domain[0]), { status: "queued", ok: true, epoch: client.privacyReport().units[0].epoch, clamped: undefined });
  assert.equal((await client.record(spec.name, "not a category")).status, "invalid_value");
  assert.equal(client.queued, 1);
  client.close();
}

for (const [name, full] of [["ldp-sdk", false], ["ldp-sdk-full", true]] as const) {
  test(`${name}.min.js and ${name}.iife.js: the shared vectors, a Client`, async () => {
    const a = await esm(`${name}.min.js`), b = iife(`${name}.iife.js`);
    assert.deepEqual(Object.keys(b).sort(), Object.keys(a).sort());
    for (const api of [a, b]) {
      const seen = vectors(api, full);
      assert.equal(seen.size, full ? 24 : 19, [...seen].join(" "));
      await records(api);
    }
  });
}
