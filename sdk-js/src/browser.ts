/**
 * Browsers: an IndexedDB store (one transaction holds a charge and its report,
 * or reports and the stock token they take; "strict" durability where
 * supported) and delivery on page hide with fetch keepalive.  Tabs of one origin
 * share the database: every write also bumps a generation and a write that decided
 * from state another tab has since changed aborts (``StaleState``, see store.ts);
 * IndexedDB runs overlapping readwrite transactions one at a time, across tabs too.
 * One SDK version writes at a time: the database is at version 3, which an older SDK
 * cannot open (VersionError) and whose upgrade waits while an older SDK's tab holds
 * version 2 open (``open`` rejects meanwhile: the Client answers ``storage_error``); a
 * newer SDK's upgrade closes this store's connection for good (``storage_error`` too).
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
import { StaleState, type Loaded, type Store } from "./store.js";
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
  #db?: IDBDatabase;
  #conn?: Promise<void>;
  #retired = false;

  get retired(): boolean {
    return this.#retired;
  }

  /** The generations (ledger, spool) this store last read or wrote. */
  readonly #gen = [0, 0];
  constructor(private readonly name = "ldp-telemetry") {}

  #tx(stores: string[], mode: IDBTransactionMode): IDBTransaction {
    return (this.#db!.transaction as (s: string[], m: IDBTransactionMode, o?: object) => IDBTransaction)(
      stores, mode, { durability: "strict" });
  }

  async open(newSecret: () => Uint8Array, ledgerOnly?: boolean): Promise<Loaded> {
    // Once: a rejected open stays rejected (VersionError: a newer SDK upgraded), as does one
    // blocked by an older SDK's tab; the blocked request goes on and sets #db when it succeeds.
    this.#db ?? await (this.#conn ??= new Promise((resolve, reject) => {
      const req = indexedDB.open(this.name, 3);
      req.onupgradeneeded = (ev) => {
        const db = req.result;
        if (ev.oldVersion < 1) {
          db.createObjectStore("state");
          db.createObjectStore("rows", { keyPath: "reportId" });
          db.createObjectStore("charges", { autoIncrement: true });
        }
        if (ev.oldVersion < 2) db.createObjectStore("tokens");   // version 1 rows wait for a token like new ones
        // Version 3 changes no data: an SDK older than the generations (version 2) can no longer
        // open the database, nor keep it open past our upgrade, so it cannot write the ledger.
      };
      req.onblocked = () => reject(new DOMException("", "BlockedError"));
      req.onerror = () => reject(req.error);
      req.onsuccess = () => {
        // A newer SDK's upgrade: step aside (never reopen); every later operation fails.
        (this.#db = req.result).onversionchange = () => { this.#retired = true; this.#db!.close(); };
        resolve();
      };
    }));
    const t = this.#tx(["state", "rows", "charges", "tokens"], "readwrite");
    const st = t.objectStore("state");
    const optedOut = ((await done(st.get("optedOut"))) as boolean | undefined) ?? false;
    let secret = ((await done(st.get("secret"))) as Uint8Array | undefined) ?? new Uint8Array(0);
    if (!optedOut && secret.length !== 32) { secret = newSecret(); st.put(secret, "secret"); }
    const ledger = ((await done(st.get("ledger"))) as LedgerState | undefined) ?? null;
    const catalog = ((await done(st.get("catalog"))) as Spec[] | undefined) ?? null;
    const gen = ((await done(st.get("gen"))) as number[] | undefined) ?? [0, 0];
    const rows = (await done(t.objectStore("rows").getAll())) as Row[];
    const charges = (await done(t.objectStore("charges").getAll())) as Charge[];
    const tokens = (await done(t.objectStore("tokens").getAll())) as TokenEntry[];
    await done(t);
    this.#gen[0] = gen[0];
    if (!ledgerOnly) this.#gen[1] = gen[1];
    return { secret, optedOut, tokens, ledger, charges, rows, catalog };
  }

  /**
   * One readwrite transaction: ``fill`` writes to ``stores``; the generations in ``bump``
   * (0: ledger, secret and opt-out; 1: spool and stock) go up by one.  If one in
   * ``check`` is not the one this store last read or wrote (another tab wrote it), the
   * transaction aborts and the write rejects with ``StaleState``.
   */
  async #write(stores: string[], fill: (t: IDBTransaction) => void, bump: number[], check = bump): Promise<void> {
    const t = this.#tx([...stores, "state"], "readwrite"), st = t.objectStore("state"), mine = this.#gen;
    const get = st.get("gen");
    let stale = false;
    get.onsuccess = () => {
      const g = (get.result as number[] | undefined) ?? [0, 0], next = [...g];
      if (check.some((i) => g[i] !== mine[i])) return void (stale = true, t.abort());
      for (const i of bump) {
        if (g[i] === mine[i]) mine[i]++;   // else still stale: the next checked write reloads
        next[i]++;
      }
      st.put(next, "gen");
    };
    fill(t);
    try {
      await done(t);
    } catch (e) {
      throw stale ? new StaleState() : e;
    }
  }

  commit(charge: Charge, row: Row): Promise<void> {
    return this.#write(["rows", "charges"], (t) => {
      t.objectStore("charges").add(charge);
      t.objectStore("rows").add(row);
    }, [0]);
  }

  remove(ids: string[]): Promise<void> {
    return this.#write(["rows"], (t) => { for (const id of ids) t.objectStore("rows").delete(id); }, [1], []);
  }

  drop(ids: string[], refunds: Charge[]): Promise<void> {
    return this.#write(["rows", "charges"], (t) => {
      for (const id of ids) t.objectStore("rows").delete(id);
      for (const c of refunds) t.objectStore("charges").add(c);
    }, [0, 1], [1]);
  }

  assign(rows: Row[], dead: string[], put: TokenEntry[]): Promise<void> {
    return this.#write(["rows", "tokens"], (t) => {
      for (const row of rows) t.objectStore("rows").put(row);
      this.#tokens(t, put, dead);
    }, [1]);
  }

  #tokens(t: IDBTransaction, put: TokenEntry[], del: string[]): void {
    for (const e of put) t.objectStore("tokens").put(e, entryKey(e));
    for (const k of del) t.objectStore("tokens").delete(k);
  }

  saveTokens(put: TokenEntry[], del: string[]): Promise<void> {
    return this.#write(["tokens"], (t) => this.#tokens(t, put, del), [1]);
  }

  optOut(): Promise<void> {
    return this.#write(["rows", "tokens"], (t) => {
      t.objectStore("state").put(true, "optedOut");
      t.objectStore("state").delete("secret");
      t.objectStore("rows").clear();
      t.objectStore("tokens").clear();
    }, [0, 1], []);
  }

  optIn(secret: Uint8Array): Promise<void> {
    return this.#write([], (t) => {
      t.objectStore("state").put(secret, "secret");
      t.objectStore("state").delete("optedOut");
    }, [0, 1], []);
  }

  snapshot(ledger: LedgerState): Promise<void> {
    return this.#write(["charges"], (t) => {
      t.objectStore("state").put(ledger, "ledger");
      t.objectStore("charges").clear();
    }, [0]);
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
