/**
 * The device's token stock, as ``client_sdk._tokens.TokenManager``: a spooled
 * report is sent only with a blind-signed token of its unit, an epoch of one
 * length (its metric's period "hour" | "day", and its epoch).  ``ready(waiting)``,
 * called by the Client before each batch:
 *
 * 1. gives each waiting report the stock token of its unit (the store writes
 *    the token into the report, so a retry resends the same token and the
 *    collector answers ``duplicate``); one token goes on one report of each
 *    metric version of that period and epoch (the collector spends it once per
 *    metric; a second report of a metric version is dropped as ``token_limit``
 *    before it leaves) and stays in the stock while its epoch can get reports;
 * 2. for units still without one, asks the issuer (``POST /v1/tokens``,
 *    ``LDP-Install-Key`` = base64url(HMAC-SHA256(secret, "ldp-install-key-v1"))),
 *    and also for the next epoch of each such period, so a report's token is
 *    usually fetched an epoch before it is spent and offline epochs have one;
 * 3. stores each blinded request (nonce, blinded message, inverse) *before*
 *    sending it: a lost answer is asked again with the same blinded message,
 *    which the issuer signs again (a new one would be ``token_limit``);
 * 4. deletes stock of epochs before ``firstEpoch(period)`` (the clock's epoch:
 *    no new report can have an earlier one) once no report waits for it.
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
import { StaleState, type Store } from "./store.js";
import { keyFromJson, prepare, TokenError, unb64url, b64url, wireToken, type PublicKey } from "./tokens.js";
import { fromHex, toHex } from "./sha256.js";
import type { Row } from "./wire.js";

/** One token asked for (``token`` null: the answer has not come) or in stock. */
export interface TokenEntry {
  period: string;
  epoch: number;
  /** hex; never leaves the device until spent (inside the token). */
  nonce: string;
  /** base64url: what the issuer sees. */
  blinded: string;
  /** hex of r^-1 mod n; never leaves the device. */
  inv: string;
  token: string | null;
  /** "name:version" of each metric version whose report holds the token (one each). */
  given?: string[];
}

export interface Answer { status: number; body: string; retryAfter: string | null }
export type Http = (method: string, path: string, body?: string, headers?: Record<string, string>) => Promise<Answer>;

/** Per-unit refusals of the issuer that are final: the unit's waiting reports are dropped. */
export const FINAL = new Set(["token_limit", "epoch_expired", "epoch_in_future", "bad_unit",
  "bad_blinded", "unit_retired", "epoch_v1_only"]);
/** Units asked in one ``POST /v1/tokens`` (the collector's default limit). */
export const MAX_UNITS = 256;

const unitOf = (p: string, e: number): string => `${p}|${e}`;
/** The store key of an entry: one per unit. */
export const entryKey = (t: { period: string; epoch: number }): string => unitOf(t.period, t.epoch);
/** Whether a stored entry is of this protocol (version-1 entries held metric and version). */
export const isEntry = (t: unknown): t is TokenEntry =>
  typeof (t as TokenEntry)?.period === "string" && Number.isSafeInteger((t as TokenEntry)?.epoch);

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

  readonly #store: Store;
  readonly #http: Http;
  readonly #install: () => string;
  readonly #ahead: boolean;
  readonly #firstEpoch: (period: string) => number | null;
  readonly #allow: (keyId: string) => boolean;
  readonly #periodOf: (metric: string) => string | null;

  constructor(
    store: Store,
    http: Http,
    install: () => string,
    /** Also ask for the next epoch of each period. */
    ahead = true,
    /** The first epoch a new report of ``period`` can have (older stock is dead). */
    firstEpoch: (period: string) => number | null = () => null,
    /** Whether the issuer key with this id (hex) may be used (pinned, or no pin). */
    allow: (keyId: string) => boolean = () => true,
    /** The period of a row spooled without one (an older SDK): its metric's, or null. */
    periodOf: (metric: string) => string | null = () => null,
  ) {
    this.#store = store; this.#http = http; this.#install = install; this.#ahead = ahead;
    this.#firstEpoch = firstEpoch; this.#allow = allow; this.#periodOf = periodOf;
  }

  /** Stock tokens onto ``waiting`` rows (token ""), fetching missing ones; rows to drop by code. */
  async ready(waiting: Row[]): Promise<Map<string, Row[]>> {
    this.failed = null;
    this.progress = false;
    const again: Row[] = [];
    const out = await this.#ready(waiting, again);
    const live = new Set(out.get("token_limit") ?? []);
    const extra = again.filter((r) => !live.has(r));
    if (extra.length) out.set("token_limit", [...live, ...extra]);
    return out;
  }

  async #ready(waiting: Row[], again: Row[]): Promise<Map<string, Row[]>> {
    const missing = await this.#assign(waiting, again);
    if (!missing.size) return new Map();
    const dropped = new Set(again);
    try {
      return await this.#fetch(missing, waiting.filter((r) => !dropped.has(r)));
    } catch (e) {
      if (e instanceof StaleState) throw e;   // another tab changed the stock: the Client reloads
      if (e instanceof Refused) return new Map([[e.code, waiting.filter((r) => !r.token && !dropped.has(r))]]);
      this.failed = e instanceof Busy ? e.answer : (e as Error);
      return new Map();
    } finally {
      await this.#assign(waiting.filter((r) => !dropped.has(r)), again);
    }
  }

  #period(row: Row): string | null {
    return row.period ?? this.#periodOf(row.metric);
  }

  /** Copy stock tokens into waiting rows (one per metric version; a second goes to
   * ``again``), delete dead stock; the units still without one, oldest row first. */
  async #assign(waiting: Row[], again: Row[]): Promise<Map<string, [string, number]>> {
    const moves: Row[] = [];
    const changed = new Map<string, TokenEntry>();
    const missing = new Map<string, [string, number]>();
    const needed = new Set<string>();
    for (const row of waiting) {
      if (row.token) continue;
      const period = this.#period(row);
      if (period === null) continue;   // its metric unknown yet: it waits
      const u = unitOf(period, row.epoch);
      const entry = changed.get(u) ?? this.entries.get(u);
      if (!entry?.token) {
        missing.set(u, [period, row.epoch]);
        needed.add(u);
        continue;
      }
      const use = `${row.metric}:${row.version}`;
      if (entry.given?.includes(use)) {
        if (!again.includes(row)) again.push(row);
        continue;
      }
      changed.set(u, { ...entry, given: [...entry.given ?? [], use] });
      row.token = entry.token;
      row.period = period;
      moves.push(row);
    }
    const dead = [...this.entries.values()].filter((t) => !needed.has(entryKey(t))
      && t.epoch < (this.#firstEpoch(t.period) ?? -Infinity));
    if (moves.length || dead.length) {
      try {
        await this.#store.assign(moves, dead.map(entryKey), [...changed.values()]);
      } catch (e) {
        // Not stored: the rows wait again, so that the token's uses stay what is recorded
        // (else a row would be sent with a token the stock still gives to another report).
        for (const row of moves) row.token = "";
        throw e;
      }
      for (const t of changed.values()) this.entries.set(entryKey(t), t);
      for (const t of dead) this.entries.delete(entryKey(t));
    }
    return missing;
  }

  async #publicKey(): Promise<PublicKey> {
    if (!this.#key) {
      const a = await this.#http("GET", "/v1/tokens/key");
      check(a, "GET /v1/tokens/key");
      const key = keyFromJson(JSON.parse(a.body)), id = toHex(key.keyId);
      if (!this.#allow(id)) throw new TokenError("unpinned");
      this.#key = key;
    }
    return this.#key;
  }

  async #fetch(missing: Map<string, [string, number]>, waiting: Row[]): Promise<Map<string, Row[]>> {
    const key = await this.#publicKey();
    const asked = new Map<string, TokenEntry>();   // unit -> entry asked before (answer lost)
    for (const [u, t] of this.entries) if (t.token === null) asked.set(u, t);
    const wanted = new Map(missing);
    if (this.#ahead) {
      const latest = new Map<string, number>();
      for (const [p, e] of missing.values()) latest.set(p, Math.max(e, latest.get(p) ?? e));
      for (const [p, e] of latest) {
        const u = unitOf(p, e + 1);
        if (!this.entries.has(u)) wanted.set(u, [p, e + 1]);
      }
    }
    for (const [u, t] of asked) if (!wanted.has(u)) wanted.set(u, [t.period, t.epoch]);
    const fresh: TokenEntry[] = [];
    for (const [u, [p, e]] of wanted) {
      if (asked.has(u)) continue;
      const pt = prepare(key, p, e);
      const t = { period: p, epoch: e, nonce: toHex(pt.nonce), blinded: b64url(pt.blinded), inv: pt.inv.toString(16), token: null };
      asked.set(u, t);
      fresh.push(t);
    }
    if (fresh.length) {   // kept before asking: a lost answer is asked again, same blinded message
      await this.#store.saveTokens(fresh, []);
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
    const body = JSON.stringify({ units: chunk.map((t) => ({ period: t.period, epoch: t.epoch, blinded: t.blinded })) });
    const a = await this.#http("POST", "/v1/tokens", body, { "LDP-Install-Key": this.#install() });
    check(a, "POST /v1/tokens");
    const results = (JSON.parse(a.body) as { results?: unknown }).results;
    if (!Array.isArray(results) || results.length !== chunk.length) throw new TokenError("POST /v1/tokens answered another number of results");
    const put: TokenEntry[] = [], del: string[] = [];
    chunk.forEach((t, i) => {
      const r = results[i] as { status?: unknown; blind_sig?: unknown; code?: unknown };
      if (r?.status === "issued" && typeof r.blind_sig === "string") {
        const p = { period: t.period, epoch: t.epoch, nonce: fromHex(t.nonce), blinded: unb64url(t.blinded), inv: BigInt(`0x${t.inv}`) };
        put.push({ ...t, token: wireToken(key, p, unb64url(r.blind_sig)) });
      } else if (typeof r?.code === "string" && FINAL.has(r.code)) {
        del.push(entryKey(t));
        const u = entryKey(t);
        if (missing.has(u)) {
          const gone = waiting.filter((w) => !w.token && this.#period(w) === t.period && w.epoch === t.epoch);
          drop.set(r.code, [...(drop.get(r.code) ?? []), ...gone]);
        }
      }
    });
    if (put.length || del.length) {
      await this.#store.saveTokens(put, del);
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
