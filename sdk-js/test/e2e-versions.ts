// One ledger across SDK versions (tests/sdk_js/test_sdk_js.py, headless Chromium): raw
// IndexedDB connections in this page stand for the tabs of other SDK versions, as
// separate connections to the database behave as separate tabs do.
//
// 1. An older SDK's tab holds the database open at version 2 and has no versionchange
//    handler (the SDKs before this one).  This SDK's Client opens anyway (no throw, no
//    hang), its records answer storage_error and write nothing; once that connection
//    closes, the upgrade to version 3 runs and the next record is queued.
// 2. An older SDK opening the database later is refused (VersionError): it cannot write.
// 3. A newer SDK opens version 4: its upgrade is not blocked (this store closes its
//    connection), and this Client's later records answer storage_error, also after the
//    newer connection closed (never reopened at the old version); its flush sends nothing
//    (the newer SDK delivers the spool) and answers false at once.
// 4. This SDK loaded after the newer one: Client.open still resolves, records answer
//    storage_error.
// The page posts what it saw to /done.
import { Client, IndexedDbStore, type Spec } from "../src/browser.js";

const DB = "ldp-versions";
const SPEC = {
  name: "m", version: 1, kind: "categorical", epsilon: 1, mechanism: "grr", epoch: "day", domain: ["a", "b"],
  params: { mechanism: "grr", epsilon: 1, domain_size: 2, keep: 3139872685 },
} as Spec;
const STORES = ["state", "rows", "charges", "tokens"];

const sleep = (ms: number): Promise<"timeout"> => new Promise((r) => setTimeout(() => r("timeout"), ms));
const within = <T>(p: Promise<T>, ms = 5000): Promise<T | "timeout"> => Promise.race([p, sleep(ms)]);

/** A raw connection at ``version`` (the stores of version 2 created on a new database), as
 * another SDK opens it; no versionchange handler. */
function rawOpen(version: number, onblocked = (): void => {}): Promise<IDBDatabase> {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, version);
    req.onupgradeneeded = (ev) => {
      if (ev.oldVersion < 1) {
        const db = req.result;
        db.createObjectStore("state");
        db.createObjectStore("rows", { keyPath: "reportId" });
        db.createObjectStore("charges", { autoIncrement: true });
        db.createObjectStore("tokens");
      }
    };
    req.onblocked = onblocked;
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

/** How many entries each object store holds, read through ``db``. */
async function counts(db: IDBDatabase): Promise<Record<string, number>> {
  const t = db.transaction(STORES, "readonly");
  const out: Record<string, number> = {};
  await Promise.all(STORES.map((s) => new Promise<void>((resolve, reject) => {
    const r = t.objectStore(s).count();
    r.onsuccess = () => resolve(void (out[s] = r.result));
    r.onerror = () => reject(r.error);
  })));
  return out;
}

/** Requests the Clients made (their fetch, counted). */
let requests = 0;

const open = (): Promise<Client> => Client.open({
  url: location.origin, apiKey: "k", store: new IndexedDbStore(DB), metrics: [SPEC],
  fetchMetrics: false, interval: 0, budgets: { m: 100 },
  fetch: (...a: Parameters<typeof fetch>) => (requests++, fetch(...a)),
});

/** What the page saw, filled as it goes (a failure posts what was seen before it). */
const seen: Record<string, unknown> = { ok: false };

async function run(): Promise<Record<string, unknown>> {
  const old = await rawOpen(2);
  const client = await within(open());
  if (client === "timeout") throw new Error("Client.open hung while an older SDK held the database");
  const whileHeld = seen.whileHeld = [] as string[];
  for (let i = 0; i < 3; i++) whileHeld.push((await client.record("m", "a")).status);
  seen.writtenWhileHeld = await counts(old);
  seen.heldAt = old.version;
  old.close();
  let afterClose = "storage_error", tries = 0;
  while (afterClose === "storage_error" && tries++ < 100) {
    await sleep(50);
    afterClose = (await client.record("m", "a")).status;
  }
  seen.afterClose = afterClose;
  seen.reports = client.privacyReport().units.map((u) => u.reports);

  seen.oldLater = await rawOpen(2).then((db) => (db.close(), "opened"), (e: Error) => e.name);

  seen.newerBlocked = false;
  const newer = await within(rawOpen(4, () => { seen.newerBlocked = true; }));
  if (newer === "timeout") throw new Error("the raw open at version 4 never succeeded");
  seen.afterUpgrade = (await client.record("m", "a")).status;
  const before = requests, flushed = await within(client.flush(5), 1000);
  seen.retiredFlush = { answer: flushed, requests: requests - before };
  seen.newerSees = await counts(newer);
  seen.newerVersion = newer.version;
  newer.close();
  await sleep(100);
  seen.afterNewerClosed = (await client.record("m", "a")).status;

  const late = await within(open());
  if (late === "timeout") throw new Error("Client.open hung on a database a newer SDK upgraded");
  seen.lateAnswer = (await late.record("m", "a")).status;
  return { ...seen, ok: true };
}

run().catch((e) => ({ ...seen, error: String(e?.stack ?? e) })).then((result) =>
  fetch("/done", { method: "POST", body: JSON.stringify(result) }));
