/**
 * Where a device keeps its state: the secret, the ledger, the catalog and the
 * spool of randomised reports.  ``commit`` stores a charge and its report
 * together and durably before ``record`` answers "queued"; a report is removed
 * only after the collector answered for it.  ``MemoryStore`` keeps nothing
 * across restarts (tests, short-lived scripts).
 */
import type { Charge, LedgerState } from "./ledger.js";
import type { Spec } from "./mechanisms.js";
import type { Row } from "./wire.js";

export interface Loaded {
  secret: Uint8Array;
  ledger: LedgerState | null;
  /** Charges committed after the ledger snapshot, in order. */
  charges: Charge[];
  rows: Row[];
  catalog: Spec[] | null;
}

export interface Store {
  open(newSecret: () => Uint8Array): Promise<Loaded>;
  /** Durably store the charge and its report (both or neither). */
  commit(charge: Charge, row: Row): Promise<void> | void;
  /** Forget reports the collector answered for. */
  remove(reportIds: string[]): Promise<void> | void;
  saveCatalog(specs: Spec[]): Promise<void> | void;
  /** A compaction point: the current ledger, the rows still pending. */
  snapshot?(ledger: LedgerState, rows: Row[]): Promise<void> | void;
}

export class MemoryStore implements Store {
  private secret: Uint8Array | null = null;

  async open(newSecret: () => Uint8Array): Promise<Loaded> {
    this.secret ??= newSecret();
    return { secret: this.secret, ledger: null, charges: [], rows: [], catalog: null };
  }

  commit(): void {}

  remove(): void {}

  saveCatalog(): void {}
}
