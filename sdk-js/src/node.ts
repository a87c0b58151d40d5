/**
 * Node: a file store with the durability promise of the Python SDK: a charge
 * and its report are appended to a journal and fsync'ed before ``record``
 * answers "queued"; a report leaves the journal only after the collector
 * answered for it.  The folder is private (0700, files 0600); the secret is 32
 * CSPRNG bytes written once.  Journal lines: {"c":charge,"r":row} (a record),
 * {"d":[ids],"u":[refunds]} (answered, or dropped before leaving with the
 * refund of their charges), {"a":[rows],"t":[tokens],"x":[keys]} (rows given
 * their epoch's stock token, the token's uses; dead stock deleted),
 * {"t":[tokens],"x":[keys]} (token stock
 * changes), {"o":1} (opt-out: spool and stock purged), {"s":ledger} (a
 * compaction snapshot); a torn last line (a crash mid-append) is ignored: that
 * record never answered "queued".  ``opted_out`` marks an opt-out.
 *
 * One process at a time: the journal is each process's own view (no cross-process
 * transaction as the Python SDK's sqlite has), so ``open`` takes the folder's ``lock``
 * file (created with an atomic link, holding "pid nonce") and a second FileStore on
 * the folder, in this process or another live one, is refused with a ``ConfigError``
 * naming the holder; a lock whose process is gone (a crash) is taken over.  ``close``
 * (``Client.close``) lets it go.
 *
 * ``openNodeClient()`` reads ``LDP_COLLECTOR_URL``, ``LDP_API_KEY``,
 * ``LDP_STATE_DIR`` (else the platform's per-user state folder, as the Python
 * SDK) and ``LDP_ISSUER_KEYS`` (pinned issuer key ids, comma-separated, joined
 * with ``issuerKeys``).
 *
 * @example
 *   import { openNodeClient } from "@ldp-telemetry/sdk/node";
 *   const client = await openNodeClient();           // configuration from the environment
 *   await client.record("app.theme", "dark");
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { randomBytes } from "node:crypto";
import { Client, type ClientOptions } from "./client.js";
import { ConfigError } from "./pins.js";
import type { Charge, LedgerState } from "./ledger.js";
import { entryKey, type TokenEntry } from "./stock.js";
import type { Spec } from "./mechanisms.js";
import type { Loaded, Store } from "./store.js";
import type { Row } from "./wire.js";

export * from "./index.js";

/** Lock file contents held by this process ("pid nonce"). */
const HELD = new Set<string>();

/** Whether process ``pid`` (of this machine) is alive; our own pid only if ``mine``. */
function alive(pid: number, mine: boolean): boolean {
  if (pid === process.pid) return mine;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";   // alive, another user's
  }
}

export class FileStore implements Store {
  private fd = -1;
  private held = "";
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
    this.lock();   // also refuses a second open of this store (two Clients, one store object)
    const optedOut = fs.existsSync(this.file("opted_out"));
    let secret = new Uint8Array(0);
    if (!optedOut) {
      this.writeSecret(newSecret, "wx");
      secret = new Uint8Array(fs.readFileSync(this.file("secret")));
      if (secret.length !== 32) throw new Error(`device secret ${this.file("secret")} is corrupt (${secret.length} bytes)`);
    }
    let ledger: LedgerState | null = null;
    const charges: Charge[] = [];
    const rows = new Map<string, Row>();
    const tokens = new Map<string, TokenEntry>();
    let text = "";
    try { text = fs.readFileSync(this.file("journal"), "utf8"); } catch { /* first run */ }
    for (const line of text.split("\n")) {
      if (!line) continue;
      let entry: Journal;
      try { entry = JSON.parse(line); } catch { continue; }   // a torn last line
      if (entry.s) { ledger = entry.s; charges.length = 0; }
      if (entry.c) charges.push(entry.c);
      if (entry.r) rows.set(entry.r.reportId, entry.r);
      for (const r of entry.a ?? []) if (rows.has(r.reportId)) rows.set(r.reportId, r);
      for (const id of entry.d ?? []) rows.delete(id);
      charges.push(...(entry.u ?? []));
      for (const t of entry.t ?? []) tokens.set(entryKey(t), t);
      for (const k of entry.x ?? []) tokens.delete(k);
      if (entry.o) { rows.clear(); tokens.clear(); }
    }
    let catalog: Spec[] | null = null;
    try { catalog = JSON.parse(fs.readFileSync(this.file("metrics.json"), "utf8")); } catch { /* none yet */ }
    this.fd = fs.openSync(this.file("journal"), "a", 0o600);
    return { secret, optedOut, tokens: [...tokens.values()], ledger, charges, rows: [...rows.values()], catalog };
  }

  /** Take the folder's lock file, or throw ``ConfigError`` if a live process holds it. */
  private lock(): void {
    const lock = this.file("lock"), me = `${process.pid} ${randomBytes(8).toString("hex")}`;
    const tmp = `${lock}.${me.replace(" ", ".")}`;
    for (let tries = 0; tries < 5; tries++) {
      fs.writeFileSync(tmp, me, { mode: 0o600 });
      try {
        fs.linkSync(tmp, lock);   // atomic: fails if the lock exists
        this.held = me;
        HELD.add(me);
        return;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      } finally {
        fs.rmSync(tmp, { force: true });
      }
      let holder = "";
      try { holder = fs.readFileSync(lock, "utf8"); } catch { continue; }   // just let go
      const pid = Number(holder.split(" ")[0]);
      if (Number.isSafeInteger(pid) && pid > 0 && alive(pid, HELD.has(holder))) {
        throw new ConfigError(`state folder ${this.dir} is in use by process ${pid} (its lock file ${lock}): `
          + "one Client per state folder; give each process its own LDP_STATE_DIR");
      }
      // The holder is gone: move its lock aside (one process wins the rename) and try again.
      const aside = `${tmp}.stale`;
      try { fs.renameSync(lock, aside); } catch { continue; }
      // Not the lock read above (another process took over in between): put it back.
      if (fs.readFileSync(aside, "utf8") !== holder) try { fs.linkSync(aside, lock); } catch { /* taken again */ }
      fs.rmSync(aside, { force: true });
    }
    throw new ConfigError(`state folder ${this.dir}: its lock file ${lock} could not be taken`);
  }

  /** Close the journal and let another FileStore open the folder. */
  close(): void {
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = -1;
    const lock = this.file("lock");
    try {
      if (this.held && fs.readFileSync(lock, "utf8") === this.held) fs.rmSync(lock);
    } catch { /* already gone */ }
    HELD.delete(this.held);
    this.held = "";
  }

  private writeSecret(make: () => Uint8Array, flags: "wx" | "w"): void {
    try {
      const fd = fs.openSync(this.file("secret"), flags, 0o600);
      fs.writeSync(fd, make());
      fs.fsyncSync(fd);
      fs.closeSync(fd);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
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

  drop(reportIds: string[], refunds: Charge[]): void {
    this.append({ d: reportIds, u: refunds });
  }

  assign(rows: Row[], dead: string[], put: TokenEntry[]): void {
    this.append({ a: rows, t: put, x: dead });
  }

  saveTokens(put: TokenEntry[], del: string[]): void {
    this.append({ t: put, x: del });
  }

  optOut(): void {
    const fd = fs.openSync(this.file("opted_out"), "w", 0o600);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    this.append({ o: 1 });
    fs.rmSync(this.file("secret"), { force: true });
  }

  optIn(secret: Uint8Array): void {
    this.writeSecret(() => secret, "w");
    fs.rmSync(this.file("opted_out"), { force: true });
  }

  /** Rewrite the journal as a snapshot plus the pending rows and the stock (atomic rename). */
  snapshot(ledger: LedgerState, rows: Row[], tokens: TokenEntry[] = []): void {
    const tmp = this.file("journal.tmp");
    const fd = fs.openSync(tmp, "w", 0o600);
    fs.writeSync(fd, JSON.stringify({ s: ledger }) + "\n" + rows.map((r) => JSON.stringify({ r }) + "\n").join("")
      + (tokens.length ? JSON.stringify({ t: tokens }) + "\n" : ""));
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

interface Journal {
  c?: Charge; r?: Row; d?: string[]; u?: Charge[]; a?: Row[]; t?: TokenEntry[]; x?: string[]; o?: 1; s?: LedgerState;
}

/**
 * The per-user state folder, as ``client_sdk.default_state_dir``: Linux
 * ``$XDG_STATE_HOME/ldp-telemetry`` or ``~/.local/state/ldp-telemetry``, macOS
 * ``~/Library/Application Support/ldp-telemetry``, Windows ``%LOCALAPPDATA%\\ldp-telemetry``.
 */
export function defaultStateDir(platform: string = process.platform, env: NodeJS.ProcessEnv = process.env,
  home: string = os.homedir()): string {
  const join = platform === "win32" ? path.win32.join : path.posix.join;
  if (platform === "win32") return join(env.LOCALAPPDATA || join(home, "AppData", "Local"), "ldp-telemetry");
  if (platform === "darwin") return join(home, "Library", "Application Support", "ldp-telemetry");
  const xdg = env.XDG_STATE_HOME;
  return join(xdg && path.posix.isAbsolute(xdg) ? xdg : join(home, ".local", "state"), "ldp-telemetry");
}

/**
 * A Client over a FileStore, configured from the options, else the environment:
 * ``LDP_COLLECTOR_URL``, ``LDP_API_KEY``, ``LDP_STATE_DIR`` (else ``defaultStateDir()``);
 * ``LDP_ISSUER_KEYS`` is joined with ``issuerKeys``.  Throws (a configuration
 * error, never a data error) when no URL or key is found or a pin is not a key id.
 */
export async function openNodeClient(opts: Partial<ClientOptions> & { stateDir?: string } = {},
  env: NodeJS.ProcessEnv = process.env): Promise<Client> {
  const url = opts.url ?? env.LDP_COLLECTOR_URL, apiKey = opts.apiKey ?? env.LDP_API_KEY;
  if (!url) throw new Error("no collector URL: pass url or set LDP_COLLECTOR_URL");
  if (!apiKey) throw new Error("no ingest key: pass apiKey or set LDP_API_KEY");
  const store = opts.store ?? new FileStore(opts.stateDir ?? (env.LDP_STATE_DIR || defaultStateDir()));
  const issuerKeys = [...opts.issuerKeys ?? [], ...(env.LDP_ISSUER_KEYS ?? "").split(",")];
  return Client.open({ ...opts, url, apiKey, store, issuerKeys });
}
