// Two tabs of one origin, one device (tests/sdk_js/test_sdk_js.py, headless Chromium):
// the page (tab 1) opens itself again (tab 2); each tab opens its own Client over the
// same IndexedDB, both before either records, then both record the same metrics at
// once (a BroadcastChannel "go").  The device's privacy ledger must hold, across the
// tabs, what it holds in one: one report per (metric, epoch) and one permanent
// response within a lifetime budget of one.  Then both flush at once through the real
// collector and its token issuer (one token per unit for the install: the tabs must
// not ask for it with two blinded messages, the second refused as token_limit), and
// tab 2 opts out, after which tab 1's record must answer opted_out.  Tab 1 posts both
// tabs' answers and counters, and the ledger a third Client reads, to /done.
import { Client, IndexedDbStore, type RecordResult, type Spec } from "../src/browser.js";

const DB = "ldp-tabs";
const hash = new URLSearchParams(location.hash.slice(1));
const tab = hash.get("tab") ?? "1", url = hash.get("url")!, apiKey = hash.get("key")!;
// One clock for both tabs, read once by tab 1: a run across midnight UTC must not put
// the two tabs' records in two epochs (two reports where the ledger allows one).
const NOW = Number(hash.get("now") ?? Date.now() / 1000);
const channel = new BroadcastChannel("ldp-tabs");
/** What each metric is recorded with in tab 1 and in tab 2. */
const PLAN: [string, unknown, unknown][] = [
  ["t.plan", "free", "free"],      // one level, the same value
  ["t.same", "pro", "pro"],        // two levels, the same value (one permanent response)
  ["t.life", "free", "team"],      // two levels, two values, a lifetime budget of one value
];  // and "t.other": recorded in tab 1 after tab 2 opted out

function next(type: string): Promise<Record<string, unknown>> {
  return new Promise((resolve) => {
    const on = (ev: MessageEvent) => {
      if (ev.data?.type !== type) return;
      channel.removeEventListener("message", on);
      resolve(ev.data as Record<string, unknown>);
    };
    channel.addEventListener("message", on);
  });
}

async function open(specs: Spec[]): Promise<Client> {
  const life = specs.find((s) => s.name === "t.life")!;
  return Client.open({
    url, apiKey, store: new IndexedDbStore(DB), metrics: specs,
    fetchMetrics: false, interval: 0, clock: () => NOW,
    // t.life: a day's budget for both reports, a lifetime budget of exactly one permanent response.
    budgets: { "t.life": 10 }, lifetimeBudgets: { "t.life": Number(life.longitudinal?.epsilon_inf) },
  });
}

async function run(): Promise<void> {
  const specs = (await (await fetch("/tabs-specs.json")).json()) as Spec[];
  if (tab === "2") {
    const go = next("go");
    const client = await open(specs);
    channel.postMessage({ type: "ready" });
    await go;
    const answers = await Promise.all(PLAN.map(([name, , value]) => client.record(name, value)));
    channel.postMessage({ type: "answers", answers: answers.map((a) => a.status) });
    await next("flush");
    const flushed = await client.flush(30);
    channel.postMessage({ type: "flushed", flushed, counters: client.counters });
    await next("optOut");
    await client.optOut();
    channel.postMessage({ type: "out" });
    return;
  }
  const ready = next("ready"), theirs = next("answers");
  const client = await open(specs);
  const second = location.href.replace("tab=1", "tab=2") + `&now=${NOW}`;
  if (!window.open(second)) throw new Error("the second tab was not opened");
  await ready;
  channel.postMessage({ type: "go" });
  const mine: RecordResult[] = await Promise.all(PLAN.map(([name, value]) => client.record(name, value)));
  const other = (await theirs).answers as string[];
  const flushedThere = next("flushed");
  channel.postMessage({ type: "flush" });
  const [flushed, there] = await Promise.all([client.flush(30), flushedThere]);
  const counters = [client.counters, there.counters] as Client["counters"][];
  const out = next("out");
  channel.postMessage({ type: "optOut" });
  await out;
  const afterOptOut = (await client.record("t.other", "free")).status;
  client.close();
  const reader = await open(specs);
  const report = reader.privacyReport();
  const result = {
    ok: true,
    answers: Object.fromEntries(PLAN.map(([name], i) => [name, [mine[i].status, other[i]].sort()])),
    reports: Object.fromEntries(report.units.map((u) => [u.metric, u.reports])),
    permanent: Object.fromEntries(report.lifetime.map((l) => [l.metric, l.values])),
    flushed: [flushed, there.flushed],
    // Each report accepted once by the collector (a report both tabs sent: one "duplicate").
    accepted: counters[0].sent + counters[1].sent,
    dropped: { ...counters[0].dropped, ...counters[1].dropped },
    afterOptOut,
    optedOut: reader.optedOut,
  };
  await fetch("/done", { method: "POST", body: JSON.stringify(result) });
}

run().catch(async (e) => {
  if (tab === "1") await fetch("/done", { method: "POST", body: JSON.stringify({ ok: false, error: String(e?.stack ?? e) }) });
});
