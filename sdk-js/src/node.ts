/**
 * Node: a file store with the durability promise of the Python SDK: a charge
 * and its report are appended to a journal and fsync'ed before ``record``
 * answers "queued"; a report leaves the journal only after the collector
 * answered for it.  The folder is private (0700, files 0600); the secret is 32
 * CSPRNG bytes written once.  Journal lines: {"c":charge,"r":row} (a record),
 * {"d":[ids]} (answered), {"s":ledger} (a compaction snapshot); a torn last
 * line (a crash mid-append) is ignored: that record never answered "queued".
 *
 * @example
 *   import { Client, FileStore } from "@ldp-telemetry/sdk/node";
 *   const client = await Client.open({ url, apiKey, store: new FileStore(".ldp") });
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Charge, LedgerState } from "./ledger.js";
import type { Spec } from "./mechanisms.js";
import type { Loaded, Store } from "./store.js";
import type { Row } from "./wire.js";

export * from "./index.js";

export class FileStore implements Store {
  private fd = -1;
  readonly dir: string;

  constructor(dir: string) {
    this.dir = dir;
  }

  private file(name: string): string {
    return path.join(this.dir, name);
  }

  async open(newSecret: () => Uint8Array): Promise<Loaded> {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    fs.chmodSync(this.dir, 0o700);
    const secretPath = this.file("secret");
    try {
      const fd = fs.openSync(secretPath, "wx", 0o600);
      fs.writeSync(fd, newSecret());
      fs.fsyncSync(fd);
      fs.closeSync(fd);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    const secret = new Uint8Array(fs.readFileSync(secretPath));
    if (secret.length !== 32) throw new Error(`device secret ${secretPath} is corrupt (${secret.length} bytes)`);
    let ledger: LedgerState | null = null;
    const charges: Charge[] = [];
    const rows = new Map<string, Row>();
    let text = "";
    try { text = fs.readFileSync(this.file("journal"), "utf8"); } catch { /* first run */ }
    for (const line of text.split("\n")) {
      if (!line) continue;
      let entry: { c?: Charge; r?: Row; d?: string[]; s?: LedgerState };
      try { entry = JSON.parse(line); } catch { continue; }   // a torn last line
      if (entry.s) { ledger = entry.s; charges.length = 0; }
      if (entry.c) charges.push(entry.c);
      if (entry.r) rows.set(entry.r.reportId, entry.r);
      for (const id of entry.d ?? []) rows.delete(id);
    }
    let catalog: Spec[] | null = null;
    try { catalog = JSON.parse(fs.readFileSync(this.file("metrics.json"), "utf8")); } catch { /* none yet */ }
    this.fd = fs.openSync(this.file("journal"), "a", 0o600);
    return { secret, ledger, charges, rows: [...rows.values()], catalog };
  }

  private append(entry: object): void {
    fs.writeSync(this.fd, JSON.stringify(entry) + "\n");
    fs.fsyncSync(this.fd);
  }

  commit(charge: Charge, row: Row): void {
    this.append({ c: charge, r: row });
  }

  remove(reportIds: string[]): void {
    this.append({ d: reportIds });
  }

  /** Rewrite the journal as a snapshot plus the pending rows (atomic rename). */
  snapshot(ledger: LedgerState, rows: Row[]): void {
    const tmp = this.file("journal.tmp");
    const fd = fs.openSync(tmp, "w", 0o600);
    fs.writeSync(fd, JSON.stringify({ s: ledger }) + "\n" + rows.map((r) => JSON.stringify({ r }) + "\n").join(""));
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(tmp, this.file("journal"));
    const dfd = fs.openSync(this.dir, "r");
    fs.fsyncSync(dfd);
    fs.closeSync(dfd);
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = fs.openSync(this.file("journal"), "a", 0o600);
  }

  saveCatalog(specs: Spec[]): void {
    const tmp = this.file("metrics.json.tmp");
    fs.writeFileSync(tmp, JSON.stringify(specs), { mode: 0o600 });
    fs.renameSync(tmp, this.file("metrics.json"));
  }
}
