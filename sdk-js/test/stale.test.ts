// The Client's side of the stale-write contract (src/store.ts): a store shared with
// another context (IndexedDB: another tab) rejects a write that decided from state the
// other context has since changed, with ``StaleState``, writing nothing.  The real store
// is exercised by two Chromium tabs (test_two_tabs_spend_one_ledger); this store plays
// "the other tab" at a chosen write, which two real tabs cannot do deterministically:
//
// 1. ``record``: the other tab charged the unit between this Client's load and its
//    commit.  The Client re-reads the LEDGER only (``open(_, true)``) and answers
//    over_budget; its spool view stays (a reload of the spool in the middle of a
//    delivery pass would hand the pass rows it did not choose).
// 2. a delivery pass: the other tab gave the stock token to the waiting report first.
//    The Client re-reads the spool and the stock and sends the report with that token;
//    nothing is dropped or refunded (a drop would refund a unit whose report was sent).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "../src/client.js";
import type { Charge } from "../src/ledger.js";
import type { TokenEntry } from "../src/stock.js";
import { StaleState, type Loaded, type Store } from "../src/store.js";
import type { Spec } from "../src/mechanisms.js";
import { mechanismFingerprint } from "../src/context.js";
import type { Row } from "../src/wire.js";

const EPOCH = 20000, clock = (): number => EPOCH * 86400 + 5;
const SPEC = {
  name: "m", version: 1, kind: "categorical", epsilon: 1, mechanism: "grr", epoch: "day", domain: ["a", "b"],
  params: { mechanism: "grr", epsilon: 1, domain_size: 2, keep: 3139872685 },
} as Spec;
const charge = (metric: string): Charge => ({ metric, version: 1, fingerprint: mechanismFingerprint(SPEC), epoch: EPOCH, period: 86400, cost: 1,
  valueKey: null, epsilonInf: 0 });
const row = (id: string, token: string): Row => ({ reportId: id.padStart(32, "0"), metric: "other", version: 1,
  epoch: EPOCH, period: "day", token, payload: "1", charge: 1 });
const TOKEN = "T".repeat(90);

/** The shared state, and the other tab: ``before[kind]`` runs once just before this Client's
 * next write of that kind (the other tab wrote first) and marks the state it changed as
 * unread here, as the generations do; a write deciding from unread state rejects with
 * StaleState until ``open`` re-reads it (the ledger always; the spool and stock unless
 * ``ledgerOnly``).  ``loads`` records each open's ``ledgerOnly``. */
class Shared implements Store {
  loads: (boolean | undefined)[] = [];
  unread = { ledger: false, spool: false };
  before: { commit?: () => void; assign?: () => void } = {};
  sent: string[] = [];
  dropped: string[] = [];
  constructor(public state: { charges: Charge[]; rows: Row[]; tokens: TokenEntry[] }) {}
  async open(_: () => Uint8Array, ledgerOnly?: boolean): Promise<Loaded> {
    this.loads.push(ledgerOnly);
    this.unread.ledger = false;
    if (!ledgerOnly) this.unread.spool = false;
    const s = structuredClone(this.state);
    return { secret: new Uint8Array(32).fill(7), optedOut: false, ledger: null, catalog: null, ...s };
  }
  #other(kind: "commit" | "assign"): void {
    const other = this.before[kind];
    delete this.before[kind];
    other?.();
  }
  async commit(c: Charge, r: Row): Promise<void> {
    this.#other("commit");
    if (this.unread.ledger) throw new StaleState();
    this.state.charges.push(c);
    this.state.rows.push(r);
  }
  async assign(rows: Row[], _: string[], put: TokenEntry[]): Promise<void> {
    this.#other("assign");
    if (this.unread.spool) throw new StaleState();
    const byId = new Map(rows.map((r) => [r.reportId, r]));
    this.state.rows = this.state.rows.map((r) => byId.get(r.reportId) ?? r);
    this.state.tokens = put.length ? put : this.state.tokens;
  }
  async remove(ids: string[]): Promise<void> {
    this.sent.push(...ids);
    this.state.rows = this.state.rows.filter((r) => !ids.includes(r.reportId));
  }
  async drop(ids: string[]): Promise<void> {
    this.dropped.push(...ids);
  }
  saveTokens(): void {}
  saveCatalog(): void {}
  optOut(): void {}
  optIn(): void {}
}

const accept = (async (_: unknown, init?: RequestInit) => {
  const b = JSON.parse(String(init!.body)) as { report_id: string[]; token: string[] };
  assert.deepEqual(b.token, b.report_id.map(() => TOKEN));
  return { status: 200, text: async () => JSON.stringify({ results: b.report_id.map(() => ({ status: "accepted" })) }),
    headers: { get: () => null } } as unknown as Response;
}) as typeof fetch;

const open = (store: Store, fetchFn: typeof fetch = accept) => Client.open({ url: "http://127.0.0.1:9", apiKey: "k", store,
  metrics: [SPEC, { ...SPEC, name: "other" }], fetchMetrics: false, interval: 0, clock, gzip: false, backoffBase: 0,
  fetch: fetchFn, logger: { warn: () => undefined, info: () => undefined } });

test("a stale record re-reads the ledger only and answers over_budget; its spool view stays", async () => {
  const store = new Shared({ charges: [charge("other")], rows: [row("1", "")], tokens: [] });
  const c = await open(store);
  assert.equal(c.queued, 1);
  store.before.commit = () => {   // the other tab charges the unit and spools its report
    store.state.charges.push(charge("m"));
    store.state.rows.push({ ...row("2", ""), metric: "m" });
    store.unread.ledger = true;
  };
  assert.equal((await c.record("m", "a")).status, "over_budget");
  assert.deepEqual(store.loads, [undefined, true]);
  assert.equal(c.queued, 1);   // re-reading the spool here could change a delivery pass's rows under it
  assert.deepEqual(c.privacyReport().units.map((u) => [u.metric, u.reports]).sort(), [["m", 1], ["other", 1]]);
  c.close();
});

test("a stale delivery pass re-reads the spool and the stock and sends the other tab's token; nothing dropped", async () => {
  const stock: TokenEntry = { period: "day", epoch: EPOCH, nonce: "00", blinded: "AA", inv: "1", token: TOKEN };
  const store = new Shared({ charges: [charge("other")], rows: [row("1", "")], tokens: [stock] });
  const c = await open(store);
  store.before.assign = () => {   // the other tab gives the stock token to the waiting report
    store.state.rows = store.state.rows.map((r) => ({ ...r, token: TOKEN }));
    store.state.tokens = store.state.tokens.map((t) => ({ ...t, given: ["other:1"] }));
    store.unread.spool = true;
  };
  assert.equal(await c.flush(5), true);
  assert.deepEqual(store.loads, [undefined, false]);
  assert.deepEqual({ sent: c.counters.sent, dropped: c.counters.dropped }, { sent: 1, dropped: {} });
  assert.deepEqual([store.sent, store.dropped], [[row("1", "").reportId], []]);
  c.close();
});
