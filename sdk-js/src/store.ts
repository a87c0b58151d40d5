/**
 * Where a device keeps its state: the secret, the ledger, the catalog, the
 * spool of randomised reports and the token stock.  ``commit`` stores a charge
 * and its report together and durably before ``record`` answers "queued"; a
 * report is removed only after the collector answered for it, or ``drop``ped
 * with the refund of its charge when it never left the device.  ``assign``
 * writes a stock token into its reports in one step.  ``MemoryStore`` keeps
 * nothing across restarts (tests, short-lived scripts).
 *
 * One store, several Clients (browser tabs of one origin over one IndexedDB): a
 * write that decides from state read earlier (``commit``: the ledger; ``drop``,
 * ``assign``, ``saveTokens``: the spool and the stock; ``snapshot``) rejects with
 * ``StaleState``, writing nothing, when another context wrote that state since this
 * store's last ``open``; the Client then reloads (``open`` again) and decides anew, as
 * ``client_sdk`` does in one sqlite transaction.  A store no other context can share
 * (``FileStore``: a lock file; ``MemoryStore``) never rejects.
 */
import type { Charge, LedgerState } from "./ledger.js";
import type { Spec } from "./mechanisms.js";
import type { TokenEntry } from "./stock.js";
import type { Row } from "./wire.js";

export interface Loaded {
  /** Empty when opted out (the secret was deleted). */
  secret: Uint8Array;
  optedOut: boolean;
  tokens: TokenEntry[];
  ledger: LedgerState | null;
  /** Charges committed after the ledger snapshot, in order. */
  charges: Charge[];
  rows: Row[];
  catalog: Spec[] | null;
}

/** Another context wrote the state this write decided from: reload and decide again. */
export class StaleState extends Error {}

export interface Store {
  /** Load the state (again: ``ledgerOnly`` re-reads what ``record`` decides from, the
   * rows and tokens stay this store's view). */
  open(newSecret: () => Uint8Array, ledgerOnly?: boolean): Promise<Loaded>;
  /** Durably store the charge and its report (both or neither). */
  commit(charge: Charge, row: Row): Promise<void> | void;
  /** Forget reports the collector answered for. */
  remove(reportIds: string[]): Promise<void> | void;
  /** Forget reports that never left the device and write the refunds of their charges. */
  drop(reportIds: string[], refunds: Charge[]): Promise<void> | void;
  /** Rows now holding their epoch's stock token (it stays in the stock, ``put`` with the
   * metric versions it was given to); ``dead`` stock keys go. */
  assign(rows: Row[], dead: string[], put: TokenEntry[]): Promise<void> | void;
  /** Add or replace token entries, delete others (by entry key). */
  saveTokens(put: TokenEntry[], del: string[]): Promise<void> | void;
  saveCatalog(specs: Spec[]): Promise<void> | void;
  /** Opt out (persisted): delete the secret, the spool and the tokens; keep the ledger. */
  optOut(): Promise<void> | void;
  /** Opt in again with a new secret. */
  optIn(secret: Uint8Array): Promise<void> | void;
  /** A compaction point: the current ledger, the rows still pending, the token stock. */
  snapshot?(ledger: LedgerState, rows: Row[], tokens: TokenEntry[]): Promise<void> | void;
  /** Let another Client open the state (``FileStore``: its lock). */
  close?(): void;
  /** True once another SDK version took the state for good (IndexedDB: a newer SDK's
   * upgrade closed this connection): that SDK delivers the spool, this Client sends nothing. */
  readonly retired?: boolean;
}

export class MemoryStore implements Store {
  #secret: Uint8Array | null = null;

  async open(newSecret: () => Uint8Array): Promise<Loaded> {
    this.#secret ??= newSecret();
    return { secret: this.#secret, optedOut: false, tokens: [], ledger: null, charges: [], rows: [], catalog: null };
  }

  commit(): void {}

  remove(): void {}

  drop(): void {}

  assign(): void {}

  saveTokens(): void {}

  saveCatalog(): void {}

  optOut(): void {
    this.#secret = null;
  }

  optIn(secret: Uint8Array): void {
    this.#secret = secret;
  }
}
