/**
 * The device's token stock, as ``client_sdk._tokens.TokenManager``: a spooled
 * report is sent only with a blind-signed token of its unit (metric, version,
 * epoch).  ``ready(waiting)``, called by the Client before each batch:
 *
 * 1. gives each waiting report a stock token of its unit (the store moves the
 *    token into the report and out of the stock in one step, so a retry
 *    resends the same token and the collector answers ``duplicate``);
 * 2. for units still without one, asks the issuer (``POST /v1/tokens``,
 *    ``LDP-Install-Key`` = base64url(HMAC-SHA256(secret, "ldp-install-key-v1"))),
 *    and also for the next epoch of each such metric, so a report's token is
 *    usually fetched an epoch before it is spent and offline epochs have one;
 * 3. stores each blinded request (nonce, blinded message, inverse) *before*
 *    sending it: a lost answer is asked again with the same blinded message,
 *    which the issuer signs again (a new one would be ``token_limit``).
 *
 * The issuer's key is used only if ``allow(keyId)`` (the app's pins, ``pins.ts``):
 * otherwise no token is asked or spent with it, the reports wait and the key is
 * asked again at the next try (``failed``, the Client backs off).
 *
 * A unit the issuer refuses for good (``FINAL``) gives back its waiting
 * reports, to be dropped by the Client under that code (they never left the
 * device: their epsilon is refunded).  Without network they wait.
 *
 * @example
 *   const { drop } = await stock.ready(waitingRows);   // drop: Map<code, Row[]>
 */
import type { Store } from "./store.js";
import { keyFromJson, prepare, TokenError, unb64url, b64url, wireToken, type PublicKey } from "./tokens.js";
import { fromHex, toHex } from "./sha256.js";
import type { Row } from "./wire.js";

/** One token asked for (``token`` null: the answer has not come) or in stock. */
export interface TokenEntry {
  metric: string;
  version: number;
  epoch: number;
  /** hex; never leaves the device until spent (inside the token). */
  nonce: string;
  /** base64url: what the issuer sees. */
  blinded: string;
  /** hex of r^-1 mod n; never leaves the device. */
  inv: string;
  token: string | null;
}

export interface Answer { status: number; body: string; retryAfter: string | null }
export type Http = (method: string, path: string, body?: string, headers?: Record<string, string>) => Promise<Answer>;

/** Per-unit refusals of the issuer that are final: the unit's waiting reports are dropped. */
export const FINAL = new Set(["token_limit", "epoch_expired", "epoch_in_future", "unknown_metric",
  "unknown_version", "bad_unit", "bad_blinded"]);
/** Units asked in one ``POST /v1/tokens`` (the collector's default limit). */
export const MAX_UNITS = 256;

export const entryKey = (t: TokenEntry): string => `${t.metric}|${t.version}|${t.epoch}|${t.nonce}`;
const unitOf = (m: string, v: number, e: number): string => JSON.stringify([m, v, e]);

/** A retryable answer (408, 425, 429, 5xx) or a refused key (401/403: kept, retried). */
export class Busy extends Error {
  constructor(readonly answer: Answer, message: string) { super(message); }
}

/** A final refusal of a whole request: every waiting report is dropped under ``code``. */
export class Refused extends Error {
  constructor(readonly code: string) { super(code); }
}

export function problemCode(body: string): string | null {
  try {
    const code = (JSON.parse(body) as { code?: unknown }).code;
    return typeof code === "string" && /^[A-Za-z0-9_]{1,64}$/.test(code) ? code : null;
  } catch {
    return null;
  }
}

function check(a: Answer, what: string): void {
  if (a.status === 200) return;
  if (a.status >= 400 && a.status < 500 && ![401, 403, 408, 425, 429].includes(a.status)) {
    throw new Refused(problemCode(a.body) ?? `http_${a.status}`);
  }
  throw new Busy(a, `${what} answered ${a.status}`);
}

export class TokenStock {
  readonly entries = new Map<string, TokenEntry>();
  #key: PublicKey | null = null;
  /** The last ``ready`` tried to fetch tokens and failed (the Client backs off). */
  failed: Answer | Error | null = null;
  /** The last ``ready`` got at least one token (the Client's backoff resets). */
  progress = false;

  constructor(
    private readonly store: Store,
    private readonly http: Http,
    private readonly install: () => string,
    /** Also ask for the next epoch of each metric. */
    private readonly ahead = true,
    /** The first epoch a new report of ``metric`` can have (older stock is dead), or null. */
    private readonly firstEpoch: (metric: string) => number | null = () => null,
    /** Whether the issuer key with this id (hex) may be used (pinned, or no pin). */
    private readonly allow: (keyId: string) => boolean = () => true,
  ) {}

  /** Stock tokens onto ``waiting`` rows (token ""), fetching missing ones; rows to drop by code. */
  async ready(waiting: Row[]): Promise<Map<string, Row[]>> {
    this.failed = null;
    this.progress = false;
    const missing = await this.#assign(waiting);
    if (!missing.size) return new Map();
    try {
      return await this.#fetch(missing, waiting);
    } catch (e) {
      if (e instanceof Refused) return new Map([[e.code, waiting.filter((r) => !r.token)]]);
      this.failed = e instanceof Busy ? e.answer : (e as Error);
      return new Map();
    } finally {
      await this.#assign(waiting);
    }
  }

  /** Move stock tokens into waiting rows; the units still without one, oldest row first. */
  async #assign(waiting: Row[]): Promise<Map<string, [string, number, number]>> {
    const stock = new Map<string, TokenEntry[]>();
    for (const t of this.entries.values()) {
      if (t.token === null) continue;
      const u = unitOf(t.metric, t.version, t.epoch);
      if (!stock.has(u)) stock.set(u, []);
      stock.get(u)!.push(t);
    }
    const moves: { row: Row; entry: TokenEntry }[] = [];
    const missing = new Map<string, [string, number, number]>();
    for (const row of waiting) {
      if (row.token) continue;
      const u = unitOf(row.metric, row.version, row.epoch);
      const entry = stock.get(u)?.pop();
      if (entry) moves.push({ row, entry });
      else missing.set(u, [row.metric, row.version, row.epoch]);
    }
    const dead = [...this.entries.values()].filter((t) => t.token !== null && !missing.has(unitOf(t.metric, t.version, t.epoch))
      && t.epoch < (this.firstEpoch(t.metric) ?? -Infinity) && !moves.some((m) => m.entry === t));
    if (moves.length || dead.length) {
      await this.store.assign(moves.map(({ row, entry }) => ({ row: { ...row, token: entry.token! }, stock: entryKey(entry) })),
        dead.map(entryKey));
      for (const { row, entry } of moves) { row.token = entry.token!; this.entries.delete(entryKey(entry)); }
      for (const t of dead) this.entries.delete(entryKey(t));
    }
    return missing;
  }

  async #publicKey(): Promise<PublicKey> {
    if (!this.#key) {
      const a = await this.http("GET", "/v1/tokens/key");
      check(a, "GET /v1/tokens/key");
      const key = keyFromJson(JSON.parse(a.body)), id = toHex(key.keyId);
      if (!this.allow(id)) throw new TokenError("unpinned");
      this.#key = key;
    }
    return this.#key;
  }

  async #fetch(missing: Map<string, [string, number, number]>, waiting: Row[]): Promise<Map<string, Row[]>> {
    const key = await this.#publicKey();
    const asked = new Map<string, TokenEntry>();   // unit -> entry asked before (answer lost)
    const stocked = new Set<string>();
    for (const t of this.entries.values()) {
      const u = unitOf(t.metric, t.version, t.epoch);
      stocked.add(u);
      if (t.token === null) asked.set(u, t);
    }
    const wanted = new Map(missing);
    if (this.ahead) {
      const latest = new Map<string, [string, number, number]>();
      for (const [m, v, e] of missing.values()) {
        const k = JSON.stringify([m, v]);
        if (!latest.has(k) || latest.get(k)![2] < e) latest.set(k, [m, v, e]);
      }
      for (const [m, v, e] of latest.values()) {
        const u = unitOf(m, v, e + 1);
        if (!stocked.has(u)) wanted.set(u, [m, v, e + 1]);
      }
    }
    for (const [u, t] of asked) if (!wanted.has(u)) wanted.set(u, [t.metric, t.version, t.epoch]);
    const fresh: TokenEntry[] = [];
    for (const [u, [m, v, e]] of wanted) {
      if (asked.has(u)) continue;
      const p = prepare(key, m, v, e);
      const t = { metric: m, version: v, epoch: e, nonce: toHex(p.nonce), blinded: b64url(p.blinded), inv: p.inv.toString(16), token: null };
      asked.set(u, t);
      fresh.push(t);
    }
    if (fresh.length) {   // kept before asking: a lost answer is asked again, same blinded message
      await this.store.saveTokens(fresh, []);
      for (const t of fresh) this.entries.set(entryKey(t), t);
    }
    const drop = new Map<string, Row[]>();
    const units = [...wanted.keys()];
    for (let lo = 0; lo < units.length; lo += MAX_UNITS) {
      const chunk = units.slice(lo, lo + MAX_UNITS).map((u) => asked.get(u)!);
      await this.#ask(key, chunk, missing, waiting, drop);
    }
    return drop;
  }

  async #ask(key: PublicKey, chunk: TokenEntry[], missing: Map<string, unknown>, waiting: Row[],
    drop: Map<string, Row[]>): Promise<void> {
    const body = JSON.stringify({ units: chunk.map((t) => ({ metric: t.metric, version: t.version, epoch: t.epoch, blinded: t.blinded })) });
    const a = await this.http("POST", "/v1/tokens", body, { "LDP-Install-Key": this.install() });
    check(a, "POST /v1/tokens");
    const results = (JSON.parse(a.body) as { results?: unknown }).results;
    if (!Array.isArray(results) || results.length !== chunk.length) throw new TokenError("POST /v1/tokens answered another number of results");
    const put: TokenEntry[] = [], del: string[] = [];
    chunk.forEach((t, i) => {
      const r = results[i] as { status?: unknown; blind_sig?: unknown; code?: unknown };
      if (r?.status === "issued" && typeof r.blind_sig === "string") {
        const p = { metric: t.metric, version: t.version, epoch: t.epoch, nonce: fromHex(t.nonce), blinded: unb64url(t.blinded), inv: BigInt(`0x${t.inv}`) };
        put.push({ ...t, token: wireToken(key, p, unb64url(r.blind_sig)) });
      } else if (typeof r?.code === "string" && FINAL.has(r.code)) {
        del.push(entryKey(t));
        const u = unitOf(t.metric, t.version, t.epoch);
        if (missing.has(u)) {
          const gone = waiting.filter((w) => !w.token && unitOf(w.metric, w.version, w.epoch) === u);
          drop.set(r.code, [...(drop.get(r.code) ?? []), ...gone]);
        }
      }
    });
    if (put.length || del.length) {
      await this.store.saveTokens(put, del);
      for (const t of put) this.entries.set(entryKey(t), t);
      for (const k of del) this.entries.delete(k);
      if (put.length) this.progress = true;
    }
  }

  /** Forget every token (opt-out: a new install asks for its own). */
  clear(): void {
    this.entries.clear();
  }
}
