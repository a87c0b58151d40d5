/**
 * Browsers: an IndexedDB store (one transaction holds a charge and its report;
 * "strict" durability where supported) and delivery on page hide with fetch
 * keepalive.
 *
 * @example
 *   <script type="module">
 *     import { openBrowserClient } from "./ldp-sdk.min.js";
 *     const client = await openBrowserClient({ url: "https://collector.example", apiKey: "…" });
 *     client.record("app.theme", "dark");
 *   </script>
 */
import { Client, type ClientOptions } from "./client.js";
import type { Charge, LedgerState } from "./ledger.js";
import type { Spec } from "./mechanisms.js";
import type { Loaded, Store } from "./store.js";
import type { Row } from "./wire.js";

export * from "./index.js";

function done(req: IDBRequest | IDBTransaction): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if ("oncomplete" in req) {
      req.oncomplete = () => resolve(undefined);
      req.onabort = req.onerror = () => reject(req.error ?? new Error("IndexedDB transaction aborted"));
    } else {
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    }
  });
}

export class IndexedDbStore implements Store {
  private db!: IDBDatabase;
  private ledger: LedgerState | null = null;
  constructor(private readonly name = "ldp-telemetry") {}

  private tx(stores: string[], mode: IDBTransactionMode): IDBTransaction {
    return (this.db.transaction as (s: string[], m: IDBTransactionMode, o?: object) => IDBTransaction)(
      stores, mode, { durability: "strict" });
  }

  async open(newSecret: () => Uint8Array): Promise<Loaded> {
    const req = indexedDB.open(this.name, 1);
    req.onupgradeneeded = () => {
      req.result.createObjectStore("state");
      req.result.createObjectStore("rows", { keyPath: "reportId" });
      req.result.createObjectStore("charges", { autoIncrement: true });
    };
    this.db = (await done(req)) as IDBDatabase;
    const t = this.tx(["state", "rows", "charges"], "readwrite");
    const st = t.objectStore("state");
    let secret = (await done(st.get("secret"))) as Uint8Array | undefined;
    if (!secret) { secret = newSecret(); st.put(secret, "secret"); }
    const ledger = ((await done(st.get("ledger"))) as LedgerState | undefined) ?? null;
    const catalog = ((await done(st.get("catalog"))) as Spec[] | undefined) ?? null;
    const rows = (await done(t.objectStore("rows").getAll())) as Row[];
    const charges = (await done(t.objectStore("charges").getAll())) as Charge[];
    await done(t);
    return { secret, ledger, charges, rows, catalog };
  }

  async commit(charge: Charge, row: Row): Promise<void> {
    const t = this.tx(["rows", "charges"], "readwrite");
    t.objectStore("charges").add(charge);
    t.objectStore("rows").add(row);
    await done(t);
  }

  async remove(ids: string[]): Promise<void> {
    const t = this.tx(["rows"], "readwrite");
    const rows = t.objectStore("rows");
    for (const id of ids) rows.delete(id);
    await done(t);
  }

  async snapshot(ledger: LedgerState): Promise<void> {
    const t = this.tx(["state", "charges"], "readwrite");
    t.objectStore("state").put(ledger, "ledger");
    t.objectStore("charges").clear();
    await done(t);
    this.ledger = ledger;
  }

  async saveCatalog(specs: Spec[]): Promise<void> {
    const t = this.tx(["state"], "readwrite");
    t.objectStore("state").put(specs, "catalog");
    await done(t);
  }
}

/** A Client over IndexedDB that also delivers when the page is hidden or left. */
export async function openBrowserClient(opts: ClientOptions): Promise<Client> {
  const client = await Client.open({ store: new IndexedDbStore(), keepalive: true, ...opts });
  const bye = () => { void client.deliver(); };
  addEventListener("pagehide", bye);
  addEventListener("visibilitychange", () => { if (document.visibilityState === "hidden") bye(); });
  return client;
}
