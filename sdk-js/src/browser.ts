/**
 * Browsers: an IndexedDB store (one transaction holds a charge and its report,
 * or reports and the stock token they take; "strict" durability where
 * supported) and delivery on page hide with fetch keepalive.
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
import { entryKey, type TokenEntry } from "./stock.js";
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
  #db!: IDBDatabase;
  constructor(private readonly name = "ldp-telemetry") {}

  #tx(stores: string[], mode: IDBTransactionMode): IDBTransaction {
    return (this.#db.transaction as (s: string[], m: IDBTransactionMode, o?: object) => IDBTransaction)(
      stores, mode, { durability: "strict" });
  }

  async open(newSecret: () => Uint8Array): Promise<Loaded> {
    const req = indexedDB.open(this.name, 2);
    req.onupgradeneeded = (ev) => {
      const db = req.result;
      if (ev.oldVersion < 1) {
        db.createObjectStore("state");
        db.createObjectStore("rows", { keyPath: "reportId" });
        db.createObjectStore("charges", { autoIncrement: true });
      }
      if (ev.oldVersion < 2) db.createObjectStore("tokens");   // version 1 rows wait for a token like new ones
    };
    this.#db = (await done(req)) as IDBDatabase;
    const t = this.#tx(["state", "rows", "charges", "tokens"], "readwrite");
    const st = t.objectStore("state");
    const optedOut = ((await done(st.get("optedOut"))) as boolean | undefined) ?? false;
    let secret = ((await done(st.get("secret"))) as Uint8Array | undefined) ?? new Uint8Array(0);
    if (!optedOut && secret.length !== 32) { secret = newSecret(); st.put(secret, "secret"); }
    const ledger = ((await done(st.get("ledger"))) as LedgerState | undefined) ?? null;
    const catalog = ((await done(st.get("catalog"))) as Spec[] | undefined) ?? null;
    const rows = (await done(t.objectStore("rows").getAll())) as Row[];
    const charges = (await done(t.objectStore("charges").getAll())) as Charge[];
    const tokens = (await done(t.objectStore("tokens").getAll())) as TokenEntry[];
    await done(t);
    return { secret, optedOut, tokens, ledger, charges, rows, catalog };
  }

  async commit(charge: Charge, row: Row): Promise<void> {
    const t = this.#tx(["rows", "charges"], "readwrite");
    t.objectStore("charges").add(charge);
    t.objectStore("rows").add(row);
    await done(t);
  }

  async remove(ids: string[]): Promise<void> {
    const t = this.#tx(["rows"], "readwrite");
    const rows = t.objectStore("rows");
    for (const id of ids) rows.delete(id);
    await done(t);
  }

  async drop(ids: string[], refunds: Charge[]): Promise<void> {
    const t = this.#tx(["rows", "charges"], "readwrite");
    for (const id of ids) t.objectStore("rows").delete(id);
    for (const c of refunds) t.objectStore("charges").add(c);
    await done(t);
  }

  async assign(rows: Row[], dead: string[], put: TokenEntry[]): Promise<void> {
    const t = this.#tx(["rows", "tokens"], "readwrite");
    for (const row of rows) t.objectStore("rows").put(row);
    for (const e of put) t.objectStore("tokens").put(e, entryKey(e));
    for (const k of dead) t.objectStore("tokens").delete(k);
    await done(t);
  }

  async saveTokens(put: TokenEntry[], del: string[]): Promise<void> {
    const t = this.#tx(["tokens"], "readwrite");
    for (const e of put) t.objectStore("tokens").put(e, entryKey(e));
    for (const k of del) t.objectStore("tokens").delete(k);
    await done(t);
  }

  async optOut(): Promise<void> {
    const t = this.#tx(["state", "rows", "tokens"], "readwrite");
    t.objectStore("state").put(true, "optedOut");
    t.objectStore("state").delete("secret");
    t.objectStore("rows").clear();
    t.objectStore("tokens").clear();
    await done(t);
  }

  async optIn(secret: Uint8Array): Promise<void> {
    const t = this.#tx(["state"], "readwrite");
    t.objectStore("state").put(secret, "secret");
    t.objectStore("state").delete("optedOut");
    await done(t);
  }

  async snapshot(ledger: LedgerState): Promise<void> {
    const t = this.#tx(["state", "charges"], "readwrite");
    t.objectStore("state").put(ledger, "ledger");
    t.objectStore("charges").clear();
    await done(t);
  }

  async saveCatalog(specs: Spec[]): Promise<void> {
    const t = this.#tx(["state"], "readwrite");
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
