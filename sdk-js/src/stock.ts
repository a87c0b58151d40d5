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
 * 2. keeps tokens for the next ``ahead`` epochs (k, default 2) of each period,
 *    topped up at a moment drawn (CSPRNG) uniformly within each epoch and kept
 *    in the store (a ``Schedule`` entry per period, ``"next:" + period``), so a
 *    restart does not redraw it; put off by [delay, 2 delay) while a report is
 *    ready to leave (``ready(rows, sending)``), so it never rides along with a send;
 * 3. after any token request, holds the reports for a random [delay, 2 delay)
 *    (``heldFor``): a report batch never follows the install's token request
 *    within ``delay`` seconds, except the install's first epoch (the earliest
 *    unit its very first request was for: first-run delivery stays at once);
 *    for units still without one (a new install, offline longer than k epochs)
 *    asks the issuer at once (``POST /v1/tokens``, ``LDP-Install-Key`` =
 *    base64url(HMAC-SHA256(secret, "ldp-install-key-v1"))), with the k ahead;
 * 3. stores each blinded request (nonce, blinded message, inverse) *before*
 *    sending it: a lost answer is asked again with the same blinded message,
 *    which the issuer signs again (a new one would be ``token_limit``);
 * 4. deletes stock of epochs before ``firstEpoch(period)`` (the clock's epoch:
 *    no new report can have an earlier one) once no report waits for it.
 *
 * With ``deviceToken`` (an issuer that knows devices by account, ``LDP_DEVICE_AUTH=jwt``)
 * each ``POST /v1/tokens`` also carries ``LDP-Device-Token``: the app's login token, never
 * sent with anything else; when it rejects (no token now) nothing is asked, the reports wait.
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
import { registerInstall } from "./register.js";
import { StaleState, type Store } from "./store.js";
import { keyFromJson, prepare, randomBytes, TokenError, unb64url, b64url, wireToken, type PublicKey } from "./tokens.js";
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
  /** A ``Schedule`` entry only (period "next:day", epoch 0, token ""). */
  schedule?: Schedule;
}

/** The top-up of one period, kept with the tokens: clock seconds. */
export interface Schedule {
  /** The next top-up moment (drawn within an epoch). */
  due: number;
  /** Reports wait until then (the last token request + [delay, 2 delay)). */
  hold: number;
  /** The epoch sent at once (the install's first request), or -1. */
  first: number;
}

/** Seconds of an epoch of each period. */
const EPOCH_SECONDS: Record<string, number> = { hour: 3600, day: 86400 };
const NEXT = "next:";
/** Whether an entry is a ``Schedule`` rather than a token. */
export const isSchedule = (t: TokenEntry): boolean => t.period.startsWith(NEXT);

/** A float in [0, 1) from the platform CSPRNG (53 bits). */
export function uniform(): number {
  const b = randomBytes(7);
  let x = 0;
  for (let i = 0; i < 7; i++) x = x * 256 + b[i];
  return Math.floor(x / 8) / 2 ** 53;
}

/** A moment (clock seconds) drawn uniformly within ``epoch`` of ``period``. */
export function drawInEpoch(period: string, epoch: number): number {
  return (epoch + uniform()) * EPOCH_SECONDS[period];
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
  readonly #ahead: number;
  readonly #delay: number;
  readonly #clock: () => number;
  #heldUntil = Infinity;
  readonly #firstEpoch: (period: string) => number | null;
  readonly #allow: (keyId: string) => boolean;
  readonly #periodOf: (metric: string) => string | null;
  readonly #deviceToken: (() => Promise<string>) | null;

  constructor(
    store: Store,
    http: Http,
    install: () => string,
    /** Tokens kept for the next k epochs (true: 2; false, 0: only what is sent, no hold). */
    ahead: boolean | number = true,
    /** The first epoch a new report of ``period`` can have (older stock is dead). */
    firstEpoch: (period: string) => number | null = () => null,
    /** Whether the issuer key with this id (hex) may be used (pinned, or no pin). */
    allow: (keyId: string) => boolean = () => true,
    /** The period of a row spooled without one (an older SDK): its metric's, or null. */
    periodOf: (metric: string) => string | null = () => null,
    /** The app's login token for ``LDP-Device-Token`` (rejects: none now); null: not sent. */
    deviceToken: (() => Promise<string>) | null = null,
    /** ``delay``: seconds a report waits after a token request (at least); ``clock``: seconds. */
    timing: { delay?: number; clock?: () => number } = {},
  ) {
    this.#store = store; this.#http = http; this.#install = install;
    this.#ahead = ahead === true ? 2 : ahead === false ? 0 : Math.max(0, Math.floor(ahead));
    this.#delay = timing.delay ?? 600;
    this.#clock = timing.clock ?? (() => Date.now() / 1000);
    this.#firstEpoch = firstEpoch; this.#allow = allow; this.#periodOf = periodOf;
    this.#deviceToken = deviceToken;
  }

  /** Stock tokens onto ``waiting`` rows (token ""), fetching missing ones (and a due top-up
   * unless ``sending``: reports ready to leave); rows to drop by code. */
  async ready(waiting: Row[], sending = false): Promise<Map<string, Row[]>> {
    this.failed = null;
    this.progress = false;
    const again: Row[] = [];
    const out = await this.#ready(waiting, again, sending);
    const live = new Set(out.get("token_limit") ?? []);
    const extra = again.filter((r) => !live.has(r));
    if (extra.length) out.set("token_limit", [...live, ...extra]);
    return out;
  }

  /** A due top-up only (nothing waits); never rejects but for ``StaleState``. */
  async topUp(): Promise<void> {
    this.failed = null;
    this.progress = false;
    await this.#ready([], [], false);
  }

  /** Whether a top-up is due now. */
  due(): boolean {
    const now = this.#clock();
    return this.#ahead > 0 && this.#schedules().some((t) => t.schedule!.due <= now);
  }

  /** Seconds until reports held after a token request may go (0: none held). */
  heldFor(): number {
    return this.#heldUntil === Infinity ? 0 : Math.max(0, this.#heldUntil - this.#clock());
  }

  #schedules(): TokenEntry[] {
    return [...this.entries.values()].filter((t) => isSchedule(t) && t.schedule);
  }

  async #ready(waiting: Row[], again: Row[], sending: boolean): Promise<Map<string, Row[]>> {
    const missing = await this.#assign(waiting, again);
    const dropped = new Set(again);
    try {
      const topups = await this.#dueTopUps(sending || waiting.some((r) => r.token && !dropped.has(r)));
      if (!missing.size && !topups.size) return new Map();
      return await this.#fetch(missing, waiting.filter((r) => !dropped.has(r)), topups);
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
    const now = this.#clock();
    const plans = this.#ahead ? this.#schedules() : [];
    const hold = Math.max(0, ...plans.map((t) => t.schedule!.hold));
    this.#heldUntil = Infinity;
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
      if (now < hold && this.entries.get(unitOf(NEXT + period, 0))?.schedule?.first !== row.epoch) {
        this.#heldUntil = Math.min(this.#heldUntil, hold);   // waits; never dropped
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
    const dead = [...this.entries.values()].filter((t) => !needed.has(entryKey(t)) && !isSchedule(t)
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

  /** The periods whose top-up moment has come and whose stock lacks one of the next k
   * epochs; put off by [delay, 2 delay) while reports are ready to leave (``sending``),
   * redrawn in the next epoch when nothing lacks. */
  async #dueTopUps(sending: boolean): Promise<Set<string>> {
    const now = this.#clock(), due = new Set<string>(), put: TokenEntry[] = [];
    for (const t of this.#ahead ? this.#schedules() : []) {
      const s = t.schedule!, period = t.period.slice(NEXT.length);
      if (s.due > now || !(period in EPOCH_SECONDS)) continue;
      const current = Math.floor(now / EPOCH_SECONDS[period]);
      const lacks = this.#ahead > [...this.entries.values()].filter((e) => e.period === period && e.token
        && e.epoch > current && e.epoch <= current + this.#ahead).length;
      if (lacks && !sending) due.add(period);
      else put.push({ ...t, schedule: { ...s, due: lacks ? now + this.#delay * (1 + uniform()) : drawInEpoch(period, current + 1) } });
    }
    if (put.length) {
      await this.#store.saveTokens(put, []);
      for (const t of put) this.entries.set(entryKey(t), t);
    }
    return due;
  }

  /** Before a request goes: hold the reports [delay, 2 delay) and draw the next top-up of
   * each period asked in the next epoch; the very first request frees the earliest missing
   * epoch of each period (first-run delivery), a later one none. */
  async #asking(periods: Set<string>, missing: Map<string, [string, number]>): Promise<void> {
    const now = this.#clock(), hold = now + this.#delay * (1 + uniform());
    const known = this.#schedules(), put: TokenEntry[] = known.map((t) => ({ ...t, schedule: { ...t.schedule!, hold } }));
    for (const period of periods) {
      const old = this.entries.get(unitOf(NEXT + period, 0))?.schedule;
      const earliest = Math.min(...[...missing.values()].filter(([p]) => p === period).map(([, e]) => e));
      const schedule = { due: drawInEpoch(period, Math.floor(now / EPOCH_SECONDS[period]) + 1), hold,
        first: old?.first ?? (known.length || earliest === Infinity ? -1 : earliest) };
      const i = put.findIndex((t) => t.period === NEXT + period);
      const entry: TokenEntry = { period: NEXT + period, epoch: 0, nonce: "", blinded: "", inv: "", token: "", schedule };
      if (i >= 0) put[i] = entry; else put.push(entry);
    }
    await this.#store.saveTokens(put, []);
    for (const t of put) this.entries.set(entryKey(t), t);
  }

  async #fetch(missing: Map<string, [string, number]>, waiting: Row[], topups: Set<string>): Promise<Map<string, Row[]>> {
    const key = await this.#publicKey();
    const asked = new Map<string, TokenEntry>();   // unit -> entry asked before (answer lost)
    for (const [u, t] of this.entries) if (t.token === null) asked.set(u, t);
    const wanted = new Map(missing);
    const periods = new Set(this.#ahead ? [...[...missing.values()].map(([p]) => p), ...topups] : []);
    const now = this.#clock();
    for (const p of periods) {
      if (!(p in EPOCH_SECONDS)) continue;
      const current = Math.floor(now / EPOCH_SECONDS[p]);
      for (let e = current + 1; e <= current + this.#ahead; e++) {
        const u = unitOf(p, e);
        if (!this.entries.has(u)) wanted.set(u, [p, e]);
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
    if (this.#ahead && wanted.size) await this.#asking(periods, missing);
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
    const headers: Record<string, string> = { "LDP-Install-Key": this.#install() };
    if (this.#deviceToken) headers["LDP-Device-Token"] = await this.#deviceToken();
    let a = await this.#http("POST", "/v1/tokens", body, headers);
    if (a.status === 403 && problemCode(a.body) === "install_unregistered") {
      // An issuer that requires registration (issue 34): the proof of work once, then again.
      if ((await registerInstall(this.#http, this.#install())).status === "registered") a = await this.#http("POST", "/v1/tokens", body, headers);
    }
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
    this.#heldUntil = Infinity;
  }
}
