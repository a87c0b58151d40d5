// Delivery bookkeeping across awaits (src/client.ts): a report the collector
// answered for leaves the spool (``queued``) and enters the counters in ONE
// synchronous step, after the store forgot it.  The Python SDK once removed a
// batch from its spool before taking the tally lock, so a concurrent flush()
// returned True while counters().sent was still 0 (fixed in 01257fd); here the
// same gap was an ``await`` between "off the spool" and "counted".
//
// How the gap is seen: ``everyTurn`` keeps exactly one job of its own in the
// microtask queue, so it runs between any two other jobs, and checks
//     queued + sent + duplicates + dropped === N
// at every turn of a flush (no report uncounted once it looks delivered, none
// counted while it is still spooled and will be resent).  Everything the flush
// awaits here is a promise (a store whose writes resolve later, as IndexedDB's,
// and a collector-shaped transport that answers ``duplicate`` for a token already
// spent in its metric, as the collector does), so the whole flush runs inside the
// sampled microtasks.  The last test is the token stock's twin of the same
// question: a token is a report's only once the store holds it.  The real
// collector is exercised by e2e-client.ts; this needs job-level control that a
// socket cannot give.  No randomness is asserted on (the jitter is 0: backoffBase 0).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "../src/client.js";
import type { Charge } from "../src/ledger.js";
import type { TokenEntry } from "../src/stock.js";
import type { Loaded, Store } from "../src/store.js";
import type { Row } from "../src/wire.js";

const N = 50;
const EPOCH = 20000, clock = (): number => EPOCH * 86400 + 5;

/** A spool of reports (and their charges, a token stock); writes resolve a turn later (as
 * IndexedDB's), and the next ``fail`` writes of a kind are refused (a full disk, an aborted
 * IndexedDB transaction). */
class Spool implements Store {
  readonly removed: string[] = [];
  readonly dropped: string[] = [];
  readonly refunds: Charge[] = [];
  readonly assigned: Row[] = [];
  fail = { remove: 0, assign: 0 };
  constructor(readonly rows: Row[], readonly tokens: TokenEntry[] = []) {}

  async open(): Promise<Loaded> {
    const charges = this.rows.map((r): Charge => ({ metric: r.metric, version: r.version, fingerprint: "f", epoch: r.epoch,
      period: 86400, cost: r.charge ?? 0, valueKey: null, epsilonInf: 0 }));
    return { secret: new Uint8Array(32).fill(7), optedOut: false, tokens: this.tokens.map((t) => ({ ...t })), ledger: null,
      charges, rows: this.rows.map((r) => ({ ...r })), catalog: null };
  }

  async #write(kind: "remove" | "assign", n: number): Promise<void> {
    await Promise.resolve();
    if (this.fail[kind] > 0) {
      this.fail[kind]--;
      throw new Error(`spool write refused (${kind} of ${n})`);
    }
  }

  async remove(ids: string[]): Promise<void> {
    await this.#write("remove", ids.length);
    this.removed.push(...ids);
  }

  async assign(rows: Row[]): Promise<void> {
    await this.#write("assign", rows.length);
    this.assigned.push(...rows.map((r) => ({ ...r })));
  }

  async drop(ids: string[], refunds: Charge[]): Promise<void> {
    await Promise.resolve();
    this.dropped.push(...ids);
    this.refunds.push(...refunds);
  }

  commit(): void { throw new Error("no record in these tests"); }
  saveTokens(): void {}
  saveCatalog(): void {}
  optOut(): void {}
  optIn(): void {}
}

const rows = (n = N, token = (i: number) => `tok${i}`.padEnd(80, "x")): Row[] => Array.from({ length: n }, (_, i) => ({
  reportId: i.toString(16).padStart(32, "0"), metric: "m", version: 1, epoch: EPOCH, period: "day",
  token: token(i), payload: String(i % 4), charge: 1,
}));

type Verdict = { status: "accepted" | "duplicate" | "rejected"; code?: string };

/** POST /v1/reports as the collector answers it: a report whose token was already spent in
 * its metric (a resent report, or a token reused by another report) is ``duplicate``;
 * ``refuse`` answers a whole batch with that 4xx instead; ``verdict`` rules the others. */
function collector(opts: { refuse?: number; verdict?: (i: number) => Verdict } = {}) {
  const spent = new Set<string>();
  let posts = 0;
  const fetchFn = async (url: string | URL | Request, init?: RequestInit) => {
    assert.match(String(url), /\/v1\/reports$/);
    posts++;
    const b = JSON.parse(String(init!.body)) as { report_id: string[]; metric: string[]; token: string[] };
    let status = 200, body: string;
    if (opts.refuse) {
      status = opts.refuse;
      body = JSON.stringify({ code: "bad_batch", status });
    } else {
      body = JSON.stringify({ results: b.report_id.map((id, i) => {
        const use = `${b.metric[i]}|${b.token[i]}`;
        if (spent.has(use)) return { status: "duplicate" };
        spent.add(use);
        return opts.verdict?.(Number.parseInt(id, 16)) ?? { status: "accepted" };
      }) });
    }
    await Promise.resolve();
    return { status, text: async () => body, headers: { get: () => null } } as unknown as Response;
  };
  return { fetch: fetchFn as typeof fetch, posts: () => posts };
}

/** Run ``check`` at every microtask turn until ``stop()``; at most ``cap`` turns. */
function everyTurn(check: () => void, cap = 200_000): { stop: () => number } {
  let on = true, turns = 0;
  const step = (): void => {
    if (!on) return;
    turns++;
    check();
    if (turns < cap) queueMicrotask(step);
  };
  queueMicrotask(step);
  return { stop: () => { on = false; return turns; } };
}

const answered = (c: Client): number =>
  c.counters.sent + c.counters.duplicates + Object.values(c.counters.dropped).reduce((a, b) => a + b, 0);

async function open(store: Spool, fetchFn: typeof fetch): Promise<Client> {
  return Client.open({ url: "http://127.0.0.1:9", apiKey: "k", store, fetch: fetchFn, interval: 0, fetchMetrics: false,
    gzip: false, batchSize: 2, backoffBase: 0, clock, logger: { warn: () => undefined, info: () => undefined } });
}

/** Flush under the sampler; the states it saw that break the invariant. */
async function sampledFlush(c: Client, flushes = 1): Promise<{ ok: boolean[]; bad: string[]; turns: number }> {
  const bad: string[] = [];
  const sampler = everyTurn(() => {
    const q = c.queued, a = answered(c);
    if (q + a !== N) bad.push(`queued ${q} + answered ${a} (sent ${c.counters.sent}) != ${N}`);
  });
  // Several callers at once: each must see, when its flush resolves true, every report counted.
  const ok = await Promise.all(Array.from({ length: flushes }, () => c.flush(5).then((done) => {
    if (done && answered(c) !== N) bad.push(`flush resolved true with ${answered(c)} of ${N} counted`);
    return done;
  })));
  const turns = sampler.stop();
  return { ok, bad, turns };
}

test("a delivered report leaves the spool and is counted in the same turn (accepted, duplicate, rejected)", async () => {
  const spool = new Spool(rows());
  const net = collector({ verdict: (i) => (i % 10 === 3 ? { status: "rejected", code: "bad_payload" } : { status: "accepted" }) });
  const c = await open(spool, net.fetch);
  assert.equal(c.queued, N);
  const { ok, bad, turns } = await sampledFlush(c, 3);
  assert.deepEqual(ok, [true, true, true]);
  assert.ok(turns > 20 && turns < 200_000, `the sampler ran ${turns} turns (the flush must finish in microtasks)`);
  assert.deepEqual(bad.slice(0, 3), [], `${bad.length} sampled states broke the invariant`);
  assert.equal(net.posts(), 3);   // batches of batchSize x 10 = 20: 20 + 20 + 10
  assert.deepEqual(c.counters.dropped, { bad_payload: 5 });
  assert.equal(c.counters.sent, N - 5);
  assert.equal(c.counters.batches, 3);
  assert.equal(spool.removed.length, N);
  c.close();
});

test("a batch refused with a 4xx is dropped and counted in the same turn", async () => {
  const spool = new Spool(rows());
  const net = collector({ refuse: 400 });
  const c = await open(spool, net.fetch);
  const { ok, bad } = await sampledFlush(c, 2);
  assert.deepEqual(ok, [true, true]);
  assert.deepEqual(bad.slice(0, 3), [], `${bad.length} sampled states broke the invariant`);
  assert.deepEqual(c.counters.dropped, { bad_batch: N });
  assert.equal(c.counters.sent, 0);
  assert.equal(spool.removed.length, N);
  c.close();
});

test("a spool removal that fails counts nothing: the reports stay, are resent and counted once (duplicate)", async () => {
  // The opposite order (count, then remove) would count the first batch as sent and,
  // after the resend, again as duplicate: 70 answered for 50 reports.
  const spool = new Spool(rows());
  spool.fail.remove = 1;
  const net = collector();
  const c = await open(spool, net.fetch);
  const { ok, bad } = await sampledFlush(c);
  assert.deepEqual(ok, [true]);
  assert.deepEqual(bad.slice(0, 3), [], `${bad.length} sampled states broke the invariant`);
  assert.equal(c.counters.retries, 1);
  assert.equal(c.counters.duplicates, 20);   // the first batch, delivered but not forgotten, then resent
  assert.equal(c.counters.sent, N - 20);
  assert.equal(net.posts(), 4);
  assert.equal(new Set(spool.removed).size, N);
  c.close();
});

test("a token is given to a report only once the store holds it: a failed write neither sends it twice nor loses one", async () => {
  // Two reports of one metric version in one epoch (a budget of two) and one stock token for
  // the epoch: the first report takes it, the second is dropped as token_limit before it leaves
  // (epsilon refunded).  The first ``assign`` write fails.  Before the fix the first report
  // already held the token in memory, its use unrecorded, so the retry gave the same token to
  // the second: both were sent and the collector answered the second ``duplicate`` (a report
  // lost, its epsilon spent).
  const stock: TokenEntry = { period: "day", epoch: EPOCH, nonce: "00", blinded: "AA", inv: "1", token: "T".repeat(90) };
  const spool = new Spool(rows(2, () => ""), [stock]);
  spool.fail.assign = 1;
  const net = collector();
  const c = await open(spool, net.fetch);
  assert.equal(c.queued, 2);
  assert.equal(await c.flush(5), true);
  assert.equal(c.counters.retries, 1);
  assert.deepEqual({ sent: c.counters.sent, duplicates: c.counters.duplicates, dropped: c.counters.dropped },
    { sent: 1, duplicates: 0, dropped: { token_limit: 1 } });
  assert.equal(net.posts(), 1);
  assert.deepEqual(spool.assigned.map((r) => [r.reportId, r.token]), [[rows(1)[0].reportId, stock.token]]);
  assert.deepEqual(spool.dropped, [rows(2)[1].reportId]);
  assert.deepEqual(spool.refunds.map((r) => [r.cost, r.refund]), [[1, true]]);
  // One report's epsilon left on the unit (the ledger rounds sums and refunds outward, up).
  const [unit] = c.privacyReport().units;
  assert.ok(unit.reports === 1 && unit.spent >= 1 && unit.spent < 1 + 1e-12, JSON.stringify(unit));
  c.close();
});
