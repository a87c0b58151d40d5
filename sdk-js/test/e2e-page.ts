// End to end, browser side (bundled into page.js by the pytest module): the
// first device is an IndexedDB-backed Client with page-hide delivery, the
// others in-memory Clients; before them, a version-1 IndexedDB database is upgraded
// (legacy()); the result is POSTed back to the page's origin.
import { buildMechanism, Client, DrbgRng, IndexedDbStore, isTwoLevel, MemoryStore, openBrowserClient, type Spec } from "../src/browser.js";
import { registerAllForms } from "../src/forms.js";
import { alphabet, normalise } from "../src/alphabet.js";
import { fromHex } from "../src/sha256.js";
import { amount, pick, DOMAIN, METRICS, NUMERIC } from "./e2e-plan.js";

/** A version-1 database as the SDK before blind tokens left it (a report with an HMAC
 * token): after the upgrade the report waits for a blind-signed token and counts. */
async function legacy(url: string, apiKey: string, specs: Spec[]): Promise<boolean> {
  const epoch = Math.floor(Date.now() / 1000 / 86400);
  await new Promise((ok, no) => {
    const o = indexedDB.open("ldp-legacy", 1);
    o.onupgradeneeded = () => {
      for (const name of ["state", "charges"]) o.result.createObjectStore(name, name === "charges" ? { autoIncrement: true } : undefined);
      o.result.createObjectStore("rows", { keyPath: "reportId" });
      o.transaction!.objectStore("state").put(new Uint8Array(32).fill(9), "secret");
      o.transaction!.objectStore("rows").put({ reportId: "cd".repeat(16), metric: "js.legacy", version: 1, epoch, token: "11".repeat(32), payload: "1" });
    };
    o.onsuccess = () => { o.result.close(); ok(undefined); };
    o.onerror = () => no(o.error);
  });
  const c = await Client.open({ url, apiKey, store: new IndexedDbStore("ldp-legacy"), metrics: specs, fetchMetrics: false, interval: 0 });
  const delivered = c.queued === 1 && (await c.flush(20)) && c.counters.sent === 1;
  c.close();
  return delivered;
}

/**
 * The opt-in forms in this browser's engine (its own ICU: NFC and toLowerCase): the
 * shared vectors' casefold strings, string codings and reports of square_wave,
 * cms, hcms and prefix_olh (one and two levels), byte for byte.  Returns [checked, mismatches].
 */
async function formVectors(): Promise<[number, string[]]> {
  const V = await (await fetch("/vectors.json")).json();
  registerAllForms();
  const bytes = alphabet("bytes", 1, true), bad: string[] = [];
  let n = 0;
  const same = (got: unknown, want: unknown, what: string) => { n++; if (JSON.stringify(got) !== JSON.stringify(want)) bad.push(what); };
  for (const [text, want] of V.casefold as [string, string][]) same(normalise(bytes, text), want, `casefold ${JSON.stringify(text)}`);
  for (const c of V.mechanisms as { spec: Spec; context: string; strings?: [string, number[] | null][];
    draws: { value: number | string; seed: string; payload: string; secret?: string; permanent?: string }[] }[]) {
    if (!["square_wave", "cms", "hcms", "prefix_olh"].includes(c.spec.params.mechanism as string)) continue;
    const m = buildMechanism(c.spec);
    for (const [text, want] of c.strings ?? []) {
      const got = m.input!(text);
      same(typeof got === "string" ? null : Array.from(got as Uint16Array), want, `${c.spec.name} ${JSON.stringify(text)}`);
    }
    for (const d of c.draws) {
      const x = typeof d.value === "string" ? m.input!(d.value) as Uint16Array : d.value;
      if (isTwoLevel(m)) {  // a memoised string: the permanent response, then its instantaneous draw
        const perm = m.permanent(x as unknown as number, fromHex(d.secret!), c.context);
        same([m.encode(perm), m.encode(m.instant(perm, new DrbgRng(fromHex(d.seed))))], [d.permanent, d.payload], `${c.spec.name} draw`);
      } else same(m.encode(m.perturb(x, new DrbgRng(fromHex(d.seed)))), d.payload, `${c.spec.name} draw`);
    }
  }
  return [n, bad.slice(0, 10)];
}

async function main(): Promise<object> {
  const q = new URLSearchParams(location.hash.slice(1));
  const url = q.get("url")!, apiKey = q.get("key")!;
  const devices = Number(q.get("devices")), offset = Number(q.get("offset"));
  const first = await openBrowserClient({ url, apiKey, interval: 0 });
  if (!(await first.refreshMetrics())) throw new Error("catalog not fetched");
  const r = await fetch(`${url}/v1/metrics`, { headers: { Authorization: `Bearer ${apiKey}` } });
  const specs = ((await r.json()) as { metrics: Spec[] }).metrics;
  const [vectors, vectorErrors] = await formVectors();
  const totals = { queued: 0, sent: 0, dropped: 0, notQueued: [] as string[], idb: false, legacy: await legacy(url, apiKey, specs),
    vectors, vectorErrors };
  for (let i = 0; i < devices; i++) {
    const c = i === 0 ? first : await Client.open({ url, apiKey, metrics: specs, fetchMetrics: false, interval: 0, store: new MemoryStore() });
    for (const m of METRICS) {
      const res = await c.record(m, DOMAIN[pick(i + offset)]);
      if (res.status === "queued") totals.queued++; else totals.notQueued.push(res.status);
    }
    for (const m of NUMERIC) {
      const res = await c.record(m, amount(i + offset));
      if (res.status === "queued") totals.queued++; else totals.notQueued.push(res.status);
    }
    if (i === 0) {
      // The IndexedDB spool holds the device's reports until the collector answers.
      const db = await new Promise<IDBDatabase>((ok, no) => { const o = indexedDB.open("ldp-telemetry"); o.onsuccess = () => ok(o.result); o.onerror = () => no(o.error); });
      const n = await new Promise<number>((ok) => { const g = db.transaction("rows").objectStore("rows").count(); g.onsuccess = () => ok(g.result); });
      totals.idb = n === METRICS.length + NUMERIC.length;
      db.close();
    }
    if (!(await c.flush(20))) throw new Error(`device ${i} could not deliver`);
    totals.sent += c.counters.sent;
    totals.dropped += Object.values(c.counters.dropped).reduce((a, b) => a + b, 0);
    c.close();
  }
  return totals;
}

main().then(
  (t) => fetch("/done", { method: "POST", body: JSON.stringify({ ok: true, ...t }) }),
  (e) => fetch("/done", { method: "POST", body: JSON.stringify({ ok: false, error: String(e) }) }),
);
