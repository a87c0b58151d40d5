// The Client against the real collector (tests/sdk_js/test_sdk_js.py starts it,
// registers SPECS below and runs `node --test dist/test/e2e-client.js` with
// LDP_E2E_URL, LDP_E2E_KEY and LDP_E2E_STATE).  The network is real; `Net`
// only switches it off (as a device going offline) or loses an answer after
// the collector has handled the request.  Mirrors tests/client_sdk/test_tokens.py.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { buildMechanism, Client, ConfigError, defaultStateDir, FileStore, InvalidValueError, mechanismFingerprint, MemoryStore, openNodeClient,
  type Spec } from "../src/node.js";
import { unb64url } from "../src/tokens.js";

const URL_ = process.env.LDP_E2E_URL!, KEY = process.env.LDP_E2E_KEY!, ROOT = process.env.LDP_E2E_STATE!;
if (!URL_ || !KEY || !ROOT) throw new Error("run by tests/sdk_js/test_sdk_js.py: LDP_E2E_URL, LDP_E2E_KEY, LDP_E2E_STATE");
const DAY = 86400;
// Pinning: OTHER is a collector on the same Redis whose issuer signs with a key of its own.
const OTHER = process.env.LDP_E2E_OTHER_URL!, HONEST_ID = process.env.LDP_E2E_HONEST_ID!, OTHER_ID = process.env.LDP_E2E_OTHER_ID!;
if (!OTHER || !HONEST_ID || !OTHER_ID) throw new Error("run by tests/sdk_js/test_sdk_js.py: LDP_E2E_OTHER_URL, LDP_E2E_HONEST_ID, LDP_E2E_OTHER_ID");
// SWITCHED replaced a version-1 collector: today's epochs take version-1 tokens only.
const SWITCHED = process.env.LDP_E2E_SWITCHED_URL!;
if (!SWITCHED) throw new Error("run by tests/sdk_js/test_sdk_js.py: LDP_E2E_SWITCHED_URL");

interface Sent { method: string; path: string; headers: Record<string, string>; body: Uint8Array | string | undefined; status?: number }

class Net {
  online = true;
  /** Lose the next n successful answers to this path (the collector did handle them). */
  lose: { path: string; n: number } | null = null;
  readonly log: Sent[] = [];
  readonly fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    if (!this.online) throw new TypeError("fetch failed (offline)");
    const path = new URL(String(input)).pathname.slice(1);
    const sent: Sent = { method: init?.method ?? "GET", path, headers: { ...(init?.headers as Record<string, string>) },
      body: init?.body as Uint8Array | string | undefined };
    this.log.push(sent);
    const answer = await fetch(input, init);
    sent.status = answer.status;
    if (this.lose?.path === path && answer.ok && this.lose.n-- > 0) { await answer.text(); throw new TypeError("answer lost"); }
    return answer;
  };
  paths(from = 0): string[] {
    return this.log.slice(from).map((s) => s.path);
  }
}

const specs: Spec[] = ((await (await fetch(`${URL_}/v1/metrics`, { headers: { Authorization: `Bearer ${KEY}` } })).json()) as { metrics: Spec[] }).metrics;
// Retries are many here (backoff of 10-50 ms): info lines are dropped, warnings kept.
const quiet = { warn: (m: string) => console.warn(m), info: () => undefined };
const quick = { backoffBase: 0.01, backoffMax: 0.05, interval: 0, fetchMetrics: false, metrics: specs, logger: quiet };
const dir = (name: string) => mkdtempSync(join(ROOT, `${name}-`));
const journal = (d: string) => readFileSync(join(d, "journal"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));

test("offline reports wait for tokens, then go; the next epoch is stocked and survives a restart", async () => {
  const net = new Net(), d = dir("offline");
  let now = Date.now() / 1000;
  net.online = false;
  const c = await Client.open({ ...quick, url: URL_, apiKey: KEY, store: new FileStore(d), fetch: net.fetch, clock: () => now });
  assert.equal((await c.record("js.t.plan", "free")).status, "queued");
  assert.equal(await c.flush(0.3), false);
  assert.equal(c.queued, 1);
  net.online = true;
  assert.equal(await c.flush(10), true);
  assert.equal(c.counters.sent, 1);
  // The first token request is answered 403 install_unregistered: the install registers
  // once (a proof of work), then asks again.
  assert.deepEqual(net.paths().slice(0, 7), ["v1/tokens/key", "v1/tokens", "v1/installs",
    "v1/installs/challenge", "v1/installs", "v1/tokens", "v1/reports"]);
  const epoch = Math.floor(now / DAY);
  const signed = net.log[5];
  assert.equal(signed.status, 200);
  const asked = JSON.parse(signed.body as string).units as { period: string; epoch: number; blinded: string }[];
  assert.deepEqual(asked.map((u) => [u.period, u.epoch]), [["day", epoch], ["day", epoch + 1], ["day", epoch + 2]]);
  assert.ok(signed.headers["LDP-Install-Key"]);
  const post = net.log[6];
  assert.equal(post.headers["Content-Encoding"], "gzip");
  const batch = JSON.parse(gunzipSync(post.body as Uint8Array).toString());
  const nonce = Buffer.from(unb64url(batch.token[0]).subarray(0, 32)).toString("hex");
  // What the issuer saw shares nothing with what the collector got.
  for (const u of asked) assert.ok(!Buffer.from(unb64url(u.blinded)).toString("hex").includes(nonce));
  c.close();
  // Next day, offline, after a restart: the stocked token goes with the report, no issuer call.
  now += DAY;
  net.online = false;
  const c2 = await Client.open({ ...quick, url: URL_, apiKey: KEY, store: new FileStore(d), fetch: net.fetch, clock: () => now });
  assert.equal((await c2.record("js.t.plan", "pro")).status, "queued");
  assert.equal(await c2.flush(0.2), false);
  const given = journal(d).flatMap((e) => e.a ?? []);
  assert.equal(given.length, 1);
  assert.equal(given[0].epoch, epoch + 1);
  assert.ok(given[0].token.length > 64);
  net.online = true;
  const before = net.log.length;
  assert.equal(await c2.flush(10), true);
  assert.equal(c2.counters.sent, 1);
  assert.deepEqual(net.paths(before), ["v1/reports"]);
  c2.close();
});

test("one token per epoch goes on one report of every metric; stock of past epochs is deleted", async () => {
  const net = new Net(), d = dir("epoch");
  let now = Date.now() / 1000;
  const epoch = Math.floor(now / DAY);
  const c = await Client.open({ ...quick, url: URL_, apiKey: KEY, store: new FileStore(d), fetch: net.fetch, clock: () => now });
  for (const m of ["js.t.plan", "js.t.mem"]) assert.equal((await c.record(m, "free")).status, "queued");
  assert.equal(await c.flush(10), true);
  assert.equal(c.counters.sent, 2);
  assert.equal(c.counters.duplicates, 0);
  const posts = net.log.filter((s) => s.path === "v1/reports").map((s) => JSON.parse(gunzipSync(s.body as Uint8Array).toString()));
  const tokens = posts.flatMap((b) => b.token as string[]);
  assert.equal(tokens.length, 2);
  assert.equal(new Set(tokens).size, 1);
  // One token request signed (a first one may be answered 403 install_unregistered).
  assert.equal(net.log.filter((s) => s.path === "v1/tokens" && s.status === 200).length, 1);
  // Two days on: the stock of epoch and epoch + 1 is dead and leaves the journal.
  now += 2 * DAY;
  assert.equal((await c.record("js.t.plan", "pro")).status, "queued");
  assert.equal(await c.flush(10), true);
  const deleted = journal(d).flatMap((e) => e.a ? e.x ?? [] : []);
  assert.deepEqual(deleted.sort(), [`day|${epoch}`, `day|${epoch + 1}`]);
  c.close();
});

test("a lost issuer answer is asked again with the same blinded messages; the token is spent once", async () => {
  const net = new Net();
  net.lose = { path: "v1/tokens", n: 1 };
  const c = await Client.open({ ...quick, url: URL_, apiKey: KEY, fetch: net.fetch });
  assert.equal((await c.record("js.t.mem", "basic")).status, "queued");
  assert.equal(await c.flush(10), true);
  assert.equal(c.counters.sent, 1);
  assert.deepEqual(c.counters.dropped, {});
  const bodies = net.log.filter((s) => s.path === "v1/tokens" && s.status === 200).map((s) => JSON.parse(s.body as string).units);
  assert.equal(bodies.length, 2);
  assert.deepEqual(bodies[0], bodies[1]);
  c.close();
});

test("a second report of a metric in an epoch is dropped before it leaves, and its epsilon is refunded", async () => {
  const net = new Net();
  const now = Date.now() / 1000, epoch = Math.floor(now / DAY);
  const c = await Client.open({ ...quick, url: URL_, apiKey: KEY, fetch: net.fetch, clock: () => now, budgets: { "js.t.plan": 2 } });
  assert.equal((await c.record("js.t.plan", "free")).status, "queued");
  assert.equal((await c.record("js.t.plan", "team")).status, "queued");
  const spentBoth = c.privacyReport().units.find((u) => u.metric === "js.t.plan" && u.epoch === epoch)!;
  assert.equal(spentBoth.reports, 2);
  assert.equal(await c.flush(10), true);
  assert.equal(c.counters.sent, 1);
  assert.deepEqual(c.counters.dropped, { token_limit: 1 });
  const unit = c.privacyReport().units.find((u) => u.metric === "js.t.plan" && u.epoch === epoch)!;
  assert.equal(unit.reports, 1);
  // One report's epsilon is left, rounded up (never below it).
  const eps = buildMechanism(specs.find((x) => x.name === "js.t.plan")!).epsilon;
  assert.ok(unit.spent >= eps && unit.spent <= eps * (1 + 1e-12), `${unit.spent} vs ${eps}`);
  // The refunded report never reached the collector.
  const sent = net.log.filter((s) => s.path === "v1/reports").map((s) => JSON.parse(gunzipSync(s.body as Uint8Array).toString()));
  assert.equal(sent.reduce((n, b) => n + b.token.length, 0), 1);
  c.close();
});

test("an epoch open when the issuer switched from version-1 tokens: its report is dropped as epoch_v1_only, epsilon refunded", async () => {
  const now = Date.now() / 1000, epoch = Math.floor(now / DAY);
  const c = await Client.open({ ...quick, url: SWITCHED, apiKey: KEY, clock: () => now });
  assert.equal((await c.record("js.t.plan", "free")).status, "queued");
  assert.equal(await c.flush(10), true);
  assert.equal(c.counters.sent, 0);
  assert.deepEqual(c.counters.dropped, { epoch_v1_only: 1 });
  const unit = c.privacyReport().units.find((u) => u.metric === "js.t.plan" && u.epoch === epoch);
  assert.ok(!unit || (unit.reports === 0 && unit.spent === 0), JSON.stringify(unit));
  c.close();
});

test("a wrong ingest key keeps the reports, is logged with the URL and counted; the right key delivers them", async () => {
  const d = dir("badkey"), logged: string[] = [];
  const logger = { warn: (m: string) => logged.push(m), info: () => undefined, error: (m: string) => logged.push(m) };
  const c = await Client.open({ ...quick, url: URL_, apiKey: "not-the-key", store: new FileStore(d), logger });
  assert.equal((await c.record("js.t.plan", "basic")).status, "queued");
  assert.equal(await c.flush(1), false);
  assert.equal(c.queued, 1);
  assert.ok((c.counters.configErrors.invalid_key ?? 0) >= 1);
  assert.deepEqual(c.counters.dropped, {});
  assert.equal(logged.filter((m) => m.includes(URL_) && m.includes("401")).length, 1, logged.join("\n"));
  assert.ok(!logged.join("").includes("not-the-key"));
  c.close();
  const c2 = await Client.open({ ...quick, url: URL_, apiKey: KEY, store: new FileStore(d) });
  assert.equal(await c2.flush(10), true);
  assert.equal(c2.counters.sent, 1);
  c2.close();
});

test("opt-out purges spool, stock and secret, persists, and keeps the lifetime ledger; opt-in charges on top", async () => {
  const d = dir("optout");
  let now = Date.now() / 1000;
  const c = await Client.open({ ...quick, url: URL_, apiKey: KEY, store: new FileStore(d), clock: () => now });
  assert.equal((await c.record("js.t.mem", "pro")).status, "queued");
  const lifetime = () => c.privacyReport().lifetime.find((l) => l.metric === "js.t.mem")!.spent;
  assert.equal(lifetime(), 4);
  const secret = readFileSync(join(d, "secret"));
  await c.optOut();
  assert.equal(c.queued, 0);
  assert.deepEqual(c.counters.dropped, { opt_out: 1 });
  assert.equal(existsSync(join(d, "secret")), false);
  assert.equal((await c.record("js.t.mem", "pro")).status, "opted_out");
  c.close();
  const c2 = await Client.open({ ...quick, url: URL_, apiKey: KEY, store: new FileStore(d), clock: () => now });
  assert.equal(c2.optedOut, true);
  assert.equal(c2.queued, 0);
  assert.equal((await c2.record("js.t.mem", "pro")).status, "opted_out");
  assert.equal(c2.privacyReport().lifetime.find((l) => l.metric === "js.t.mem")!.spent, 4);
  await c2.optIn();
  assert.notDeepEqual(readFileSync(join(d, "secret")), secret);
  now += DAY;
  assert.equal((await c2.record("js.t.mem", "pro")).status, "queued");
  // A new secret is a new permanent response: charged on top of what was spent.
  assert.equal(c2.privacyReport().lifetime.find((l) => l.metric === "js.t.mem")!.spent, 8);
  assert.equal(await c2.flush(10), true);
  assert.equal(c2.counters.sent, 1);
  c2.close();
});

test("record never throws for data by default; strict rejects; outliers are clamped and counted", async () => {
  const c = await Client.open({ ...quick, url: URL_, apiKey: KEY, store: new MemoryStore(), budgets: { "js.t.age": 100 } });
  assert.equal((await c.record("js.t.plan", "Free")).status, "invalid_value");
  assert.equal((await c.record("js.t.age", Number.NaN)).status, "invalid_value");
  assert.equal((await c.record("js.t.age", "12")).status, "invalid_value");
  const r = await c.record("js.t.age", 500);
  assert.equal(r.status, "queued");
  assert.equal(r.clamped, true);
  assert.equal(c.counters.clamped, 1);
  assert.equal(c.counters.refused.invalid_value, 3);
  c.close();
  const s = await Client.open({ ...quick, url: URL_, apiKey: KEY, store: new MemoryStore(), strict: true });
  await assert.rejects(s.record("js.t.plan", "Free"), InvalidValueError);
  await assert.rejects(s.record("js.t.age", 500), InvalidValueError);
  assert.equal((await s.record("js.t.age", 30)).status, "queued");
  s.close();
});

test("openNodeClient reads LDP_COLLECTOR_URL, LDP_API_KEY and LDP_STATE_DIR", async () => {
  const d = join(dir("env"), "state");
  const env = { LDP_COLLECTOR_URL: URL_, LDP_API_KEY: KEY, LDP_STATE_DIR: d };
  const c = await openNodeClient({ ...quick }, env);
  assert.equal((await c.record("js.t.plan", "team")).status, "queued");
  assert.equal(await c.flush(10), true);
  assert.equal(c.counters.sent, 1);
  assert.equal(readFileSync(join(d, "secret")).length, 32);
  c.close();
  await assert.rejects(openNodeClient({}, {}), /LDP_COLLECTOR_URL/);
  assert.equal(defaultStateDir("linux", { XDG_STATE_HOME: "/s" }, "/h"), "/s/ldp-telemetry");
  assert.equal(defaultStateDir("linux", { XDG_STATE_HOME: "rel" }, "/h"), "/h/.local/state/ldp-telemetry");
  assert.equal(defaultStateDir("darwin", {}, "/Users/a"), "/Users/a/Library/Application Support/ldp-telemetry");
  assert.equal(defaultStateDir("win32", { LOCALAPPDATA: "C:\\Users\\a\\AppData\\Local" }, "C:\\Users\\a"),
    "C:\\Users\\a\\AppData\\Local\\ldp-telemetry");
});

test("a report spooled by the SDK before blind tokens (an HMAC token) waits for a real token and counts", async () => {
  const d = dir("legacy"), spec = specs.find((x) => x.name === "js.t.plan")!;
  const epoch = Math.floor(Date.now() / 1000 / DAY);
  const old = new FileStore(d);
  await old.open(() => new Uint8Array(32).fill(7));
  old.commit({ metric: spec.name, version: spec.version, fingerprint: mechanismFingerprint(spec), epoch, period: DAY,
    cost: buildMechanism(spec).epsilon, valueKey: null, epsilonInf: 0 },
  { reportId: "ab".repeat(16), metric: spec.name, version: spec.version, epoch, token: "11".repeat(32), payload: "2" });
  old.close();
  const net = new Net();
  const c = await Client.open({ ...quick, url: URL_, apiKey: KEY, store: new FileStore(d), fetch: net.fetch });
  assert.equal(c.queued, 1);
  assert.equal(await c.flush(10), true);
  assert.equal(c.counters.sent, 1);
  const batch = JSON.parse(gunzipSync(net.log.find((s) => s.path === "v1/reports")!.body as Uint8Array).toString());
  assert.equal(batch.report_id[0], "ab".repeat(16));
  assert.equal(unb64url(batch.token[0]).length, 32 + 128);   // a blind-signed token of the 1024-bit test key
  c.close();
});

/** A logger keeping [level, line] pairs; its methods need their ``this`` (as many logging libraries'). */
class Lines {
  readonly lines: [string, string][] = [];
  warn(m: string): void { this.lines.push(["warn", m]); }
  info(): void { /* dropped: retries are many here */ }
  error(m: string): void { this.lines.push(["error", m]); }
}

function recorder(): { lines: [string, string][]; logger: Lines } {
  const logger = new Lines();
  return { lines: logger.lines, logger };
}

test("an issuer key the app has not pinned: nothing asked or spent, counted, logged once; the reports wait for a pinned issuer", async () => {
  const net = new Net(), d = dir("unpinned"), { lines, logger } = recorder();
  // Pinned through the bundled catalog (upper case: ids are compared in lower case).
  const c = await Client.open({ ...quick, metrics: { metrics: specs, issuer_keys: [HONEST_ID.toUpperCase()] }, url: OTHER,
    apiKey: KEY, store: new FileStore(d), fetch: net.fetch, logger });
  for (const [m, v] of [["js.t.plan", "free"], ["js.t.mem", "pro"], ["js.t.age", 30]] as const) {
    assert.equal((await c.record(m, v)).status, "queued");
  }
  assert.equal(await c.flush(1), false);
  assert.equal(c.queued, 3);
  assert.equal(c.counters.sent, 0);
  assert.deepEqual(c.counters.dropped, {});
  assert.ok(c.counters.configErrors.issuer_key_unpinned >= 2, JSON.stringify(c.counters));   // asked again, refused again
  // Only the key was fetched: no blinded message went out, no report either.
  assert.deepEqual([...new Set(net.paths())], ["v1/tokens/key"]);
  const j = journal(d);
  assert.equal(j.filter((e) => e.t || e.a).length, 0);
  assert.deepEqual(j.filter((e) => e.r).map((e) => e.r.token), ["", "", ""]);
  const errors = lines.filter(([level]) => level === "error");
  assert.equal(errors.length, 1, lines.join("\n"));
  assert.ok(errors[0][1].includes(OTHER_ID) && errors[0][1].includes(OTHER), errors[0][1]);
  assert.ok(!lines.some(([, m]) => m.includes(KEY) || m.includes("without a pin")));
  c.close();
  // The same device, talking to the issuer with the pinned key, delivers them all.
  const net2 = new Net();
  const c2 = await Client.open({ ...quick, url: URL_, apiKey: KEY, store: new FileStore(d), fetch: net2.fetch, issuerKeys: [HONEST_ID], logger });
  assert.equal(await c2.flush(10), true);
  assert.equal(c2.counters.sent, 3);
  assert.deepEqual(c2.counters.configErrors, {});
  assert.equal(lines.length, 1);
  c2.close();
});

test("LDP_ISSUER_KEYS pins in openNodeClient (joined with issuerKeys); a bad pin is a ConfigError at open", async () => {
  const env = { LDP_COLLECTOR_URL: OTHER, LDP_API_KEY: KEY, LDP_STATE_DIR: join(dir("envpin"), "state"),
    LDP_ISSUER_KEYS: ` ${"0".repeat(64)},${HONEST_ID} ` };
  const { lines, logger } = recorder();
  const c = await openNodeClient({ ...quick, logger }, env);
  assert.equal((await c.record("js.t.plan", "pro")).status, "queued");
  assert.equal(await c.flush(0.5), false);
  assert.ok(c.counters.configErrors.issuer_key_unpinned >= 1);
  assert.equal(lines.filter(([level, m]) => level === "error" && m.includes(OTHER_ID)).length, 1);
  c.close();
  // Pinned by the option alone, the environment adding only a key nobody serves.
  const c2 = await openNodeClient({ ...quick, logger, issuerKeys: [HONEST_ID] }, { ...env, LDP_COLLECTOR_URL: URL_, LDP_ISSUER_KEYS: "0".repeat(64) });
  assert.equal(await c2.flush(10), true);
  assert.equal(c2.counters.sent, 1);
  c2.close();
  await assert.rejects(openNodeClient({ ...quick }, { ...env, LDP_ISSUER_KEYS: `${HONEST_ID},abc` }), ConfigError);
  await assert.rejects(Client.open({ ...quick, url: URL_, apiKey: KEY, issuerKeys: ["g".repeat(64)] }), /64 hex digits/);
  await assert.rejects(Client.open({ ...quick, url: URL_, apiKey: KEY, metrics: { metrics: specs, issuer_keys: [{}] as never } }), ConfigError);
});

test("with no pin at all any issuer key is used, with one warning naming it", async () => {
  const { lines, logger } = recorder();
  const c = await Client.open({ ...quick, url: OTHER, apiKey: KEY, logger });
  assert.equal((await c.record("js.t.plan", "team")).status, "queued");
  assert.equal((await c.record("js.t.age", 50)).status, "queued");
  assert.equal(await c.flush(10), true);
  assert.equal(c.counters.sent, 2);
  assert.deepEqual(c.counters.configErrors, {});
  const warned = lines.filter(([, m]) => m.includes("without a pin"));
  assert.equal(warned.length, 1, lines.join("\n"));
  assert.ok(warned[0][1].includes(OTHER_ID));
  c.close();
});
