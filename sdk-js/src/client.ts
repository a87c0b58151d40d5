/**
 * The device Client: ``record(name, value)`` never throws at the app; it
 * answers a status (``strict: true`` rejects a value outside the domain
 * instead, for tests).  It mirrors ``client_sdk.Client``: a spec catalog
 * fetched from the collector (``GET /v1/metrics``, ingest key as Bearer), the
 * budget ledger, memoisation of two-level metrics, a durable spool, report
 * tokens fetched ahead of time (``stock.ts``: a report waits for its token,
 * never goes without one), gzip batches with retries (capped exponential
 * backoff, full jitter, Retry-After honoured).  A wrong ingest key (401/403)
 * is a configuration error: logged with the URL, counted in
 * ``counters.configErrors``, reports kept and retried, ``flush`` false.  So
 * is a token issuer key the app has not pinned (``issuerKeys``, the bundled
 * catalog's ``issuer_keys``; ``pins.ts``): logged once per key, counted in
 * ``configErrors.issuer_key_unpinned``, no token asked or spent with it, the
 * reports wait for an issuer with a pinned key.  A
 * report dropped before it left the device (its unit refused by the token
 * issuer) has its epsilon refunded.  ``optOut()`` purges the spool, the stock
 * and the secret and keeps the ledger, so an ``optIn()`` cannot reset budgets.
 *
 * @example
 *   const client = await Client.open({ url: "https://collector.example", apiKey: "…", store });
 *   await client.record("app.theme", "dark");   // { status: "queued", ok: true }
 */
import { checkLifetime, LIFETIME_MULTIPLE, Ledger, lifetimeCap, type Ask, type Charge } from "./ledger.js";
import { buildMechanism, FormNotLoaded, isTwoLevel, type Mechanism, type Spec, type Value } from "./mechanisms.js";
import { memoContext, mechanismFingerprint, valueKey } from "./context.js";
import { SystemRng } from "./rng.js";
import { hmacSha256, toHex, utf8 } from "./sha256.js";
import { entryKey, isEntry, problemCode, TokenStock, type Answer } from "./stock.js";
import { ConfigError, issuerPins } from "./pins.js";
import { MemoryStore, StaleState, type Loaded, type Store } from "./store.js";
import { b64url } from "./tokens.js";
import { batchJson, MAX_BATCH, type Row } from "./wire.js";

export type Status =
  | "queued" | "held" | "over_budget" | "over_lifetime_budget" | "spec_conflict" | "unknown_metric"
  | "invalid_value" | "storage_error" | "closed" | "opted_out" | "form_not_loaded";

export interface UnitSpend { metric: string; epoch: number; spent: number; reports: number }

export interface RecordResult { status: Status; ok: boolean; epoch?: number; clamped?: boolean }

export interface ClientOptions {
  url: string;
  apiKey: string;
  store?: Store;
  /** Specs bundled with the app (used until the collector's arrive), or the catalog file's object. */
  metrics?: Spec[] | Bundle;
  /** Key ids (SHA-256 hex) of the token issuer keys the app accepts; none pinned: any, warned. */
  issuerKeys?: string[];
  /**
   * For an issuer that knows devices by the app's accounts (``LDP_DEVICE_AUTH=jwt``): the
   * app's current login token (a JWT), sent with token requests only.  Throwing or giving
   * none is counted (``configErrors.device_token_unavailable``) and retried later; a token
   * the issuer refuses, ``configErrors.device_token_refused``; the reports wait either way.
   */
  deviceToken?: () => string | null | undefined | Promise<string | null | undefined>;
  budgets?: Record<string, number>;
  /** Lifetime epsilon cap of chosen memoised names (``Infinity``: none); default below. */
  lifetimeBudgets?: Record<string, number>;
  /** Default lifetime cap of a memoised name: this x the epsilon_inf of its first draw (4, >= 1). */
  lifetimeMultiple?: number;
  batchSize?: number;
  /** Seconds between background deliveries (0: only on flush). */
  interval?: number;
  backoffBase?: number;
  backoffMax?: number;
  retryAfterMax?: number;
  requestTimeout?: number;
  fetch?: typeof fetch;
  clock?: () => number;
  /** Use fetch keepalive (browsers: delivery survives page unload). */
  keepalive?: boolean;
  /** Fetch the catalog at open (default true; false: bundled ``metrics`` only). */
  fetchMetrics?: boolean;
  /** Reject (throw) for a value outside the domain instead of answering a status (tests). */
  strict?: boolean;
  /** Compress batches (Content-Encoding: gzip) where CompressionStream exists (default true). */
  gzip?: boolean;
  /** Report tokens kept for the next k epochs, topped up at a random moment of each epoch
   * (true, the default: 2; false: only what is sent, no hold; ``stock.ts``). */
  tokensAhead?: boolean | number;
  /** Seconds: after a token request, reports wait a random [delay, 2 delay) before they
   * leave, except the install's first epoch (default 600). */
  tokenDelay?: number;
  logger?: Logger;
}

/** A catalog file shipped with the app: ``{"metrics": [...], "issuer_keys": [...]}``. */
export interface Bundle { metrics?: Spec[]; issuer_keys?: string[] }

export type Logger = Pick<Console, "warn" | "info"> & Partial<Pick<Console, "error">>;

/** ``record`` with ``strict: true``: the value is outside the metric's domain. */
export class InvalidValueError extends RangeError {
  override name = "InvalidValueError";
}

interface Known { spec: Spec; m: Mechanism; fingerprint: string; context: string; index?: Map<string, number> }

const PERIOD = { hour: 3600, day: 86400 } as const;
const RETRYABLE = new Set([408, 425, 429]);
const HOLD_MAX = 100, HOLD_MS = 60_000, HOLD_WAIT_MS = 2000;

/** What ``close()`` left: reports spooled for the next run, values held and lost now. */
export interface CloseResult { queued: number; lost: number }

/** Resolves when ``p`` settles or after ``ms`` (its timer then cleared), whichever is first. */
const within = (p: Promise<unknown>, ms: number): Promise<void> => new Promise((done) => {
  const t = setTimeout(done, Math.max(0, ms));
  void p.finally(() => { clearTimeout(t); done(); });
});

type Options = Required<Omit<ClientOptions, "store" | "metrics" | "fetch" | "logger" | "fetchMetrics" | "issuerKeys" | "deviceToken">>;

export class Client {
  readonly #o: Options;
  readonly #pins: Set<string>;
  readonly #store: Store;
  readonly #fetchFn: typeof fetch;
  readonly #log: Logger;
  readonly #rng = new SystemRng();
  readonly #stock: TokenStock;
  #secret: Uint8Array = new Uint8Array(32);
  #install = "";
  #optedOutNow = false;
  #keyRejected: string | null = null;
  #ledger = new Ledger();
  readonly #specs = new Map<string, Known>();
  readonly #conflicts = new Map<string, number>();
  /** Metrics whose mechanism form is not registered (``forms.ts``): their records are refused. */
  readonly #unloaded = new Set<string>();
  #fetched = false;
  /** The catalog fetch under way (``refreshMetrics``), then its held values recorded. */
  #refresh: Promise<boolean> | null = null;
  /** A record of a metric not known yet waits (once, bounded) for the first catalog fetch. */
  #first: Promise<void> = Promise.resolve();
  #pending: Row[] = [];
  readonly #inflight = new Set<string>();
  #held: { name: string; value: unknown; at: number }[] = [];
  #lock: Promise<unknown> = Promise.resolve();
  #sending: Promise<boolean> | null = null;
  #attempt = 0;
  #backoffUntil = 0;
  #sendLimit = MAX_BATCH;
  #timer: ReturnType<typeof setInterval> | null = null;
  #closed = false;
  /** The store did not open (``Client.open``): each record tries again first. */
  #unopened = false;
  readonly #warned = new Set<string>();
  readonly counters = { sent: 0, duplicates: 0, retries: 0, batches: 0, clamped: 0,
    dropped: {} as Record<string, number>, refused: {} as Record<string, number>,
    /** Configuration errors by kind (``invalid_key``: answers 401/403; ``issuer_key_unpinned``;
     * reports kept). */
    configErrors: {} as Record<string, number> };

  private constructor(opts: ClientOptions) {
    const o: Record<string, unknown> = { budgets: {}, lifetimeBudgets: {}, lifetimeMultiple: LIFETIME_MULTIPLE, batchSize: 100, interval: 30, backoffBase: 0.5,
      backoffMax: 60, retryAfterMax: 300, requestTimeout: 10, clock: () => Date.now() / 1000, keepalive: false,
      strict: false, gzip: true, tokensAhead: true, tokenDelay: 600 };
    // Like ``opts.x ?? default`` for each option (the others ride along unused).
    for (const [k, v] of Object.entries(opts)) if (v != null) o[k] = v;
    this.#o = { ...o, url: opts.url.replace(/\/+$/, "") } as Options;
    this.#store = opts.store ?? new MemoryStore();
    this.#fetchFn = opts.fetch ?? ((...a: Parameters<typeof fetch>) => globalThis.fetch(...a));
    this.#log = opts.logger ?? console;
    if (!/^https:\/\//.test(this.#o.url) && !/^http:\/\/(127\.0\.0\.1|localhost|\[::1\])(:|\/|$)/.test(this.#o.url)) {
      throw new ConfigError(`collector url must be https (or http on loopback), got ${opts.url}`);
    }
    checkLifetime(this.#o.lifetimeBudgets, this.#o.lifetimeMultiple);
    const ahead = this.#o.tokensAhead, delay = this.#o.tokenDelay;
    if (typeof ahead !== "boolean" && !(Number.isInteger(ahead) && ahead >= 2 && ahead <= 1000)) {
      throw new ConfigError(`tokensAhead must be true, false or an integer in [2, 1000], got ${ahead}`);
    }
    if (!(typeof delay === "number" && Number.isFinite(delay) && delay >= 0)) throw new ConfigError(`tokenDelay must be a finite number >= 0, got ${delay}`);
    // [x].flat(): a lone string or object in issuer_keys is checked as one (bad) pin.
    this.#pins = issuerPins([...opts.issuerKeys ?? [], ...[bundle(opts).issuer_keys ?? []].flat()]);
    this.#stock = new TokenStock(this.#store, (m, p, b, h) => this.#call(m, p, b, h), () => this.#install,
      this.#o.tokensAhead, (period) => Math.floor(this.#o.clock() / ((PERIOD as Record<string, number>)[period] ?? 86400)),
      (id) => this.#allowKey(id), (metric) => this.#specs.get(metric)?.spec.epoch ?? null,
      opts.deviceToken ? () => this.#loginToken(opts.deviceToken!) : null,
      { delay: this.#o.tokenDelay, clock: this.#o.clock });
  }

  /** The app's login token, or a rejection (counted, warned once): never a throw at the app. */
  async #loginToken(app: NonNullable<ClientOptions["deviceToken"]>): Promise<string> {
    let why = "gave no token";
    try {
      const token = (await app())?.trim();
      if (token && /^[\x21-\x7e]+$/.test(token)) return token;
    } catch (e) {
      why = `threw ${(e as Error)?.name ?? "error"}`;
    }
    bump(this.counters.configErrors, "device_token_unavailable");
    this.#warnOnce("device_token", `deviceToken ${why}: no token request now, reports kept`);
    throw new Error(`deviceToken ${why}`);
  }

  /**
   * A ready Client: state loaded, bundled specs known, the catalog fetch started.  Rejects
   * only for a ``ConfigError``: a store that does not open (IndexedDB held by another SDK
   * version's tab) gives a Client whose records open it first, answering ``storage_error``
   * until it does.
   */
  static async open(opts: ClientOptions): Promise<Client> {
    const c = new Client(opts);
    c.#learn(bundle(opts).metrics ?? [], false);
    try {
      const loaded = c.#load(await c.#store.open(() => c.#rng.bytes(32)));
      if (loaded.catalog) c.#learn(loaded.catalog, false);
      // Stock of per-metric (version-1) tokens is void: waiting rows ask for their epoch's.
      const legacy = loaded.tokens.filter((t) => !isEntry(t)) as unknown as Record<string, unknown>[];
      if (legacy.length) await c.#store.saveTokens([], legacy.map((t) => `${t.metric}|${t.version}|${t.epoch}|${t.nonce}`));
      if (c.#store.snapshot) await c.#store.snapshot(c.#ledger.state, c.#pending, [...c.#stock.entries.values()]);
    } catch (e) {
      // StaleState: another tab wrote since the load, its state is the newer one, compaction
      // waits.  A store that does not open (IndexedDB: another SDK version's tab, see browser.ts)
      // is opened again by each record, which answers storage_error (logged) until it opens.
      if (e instanceof ConfigError) throw e;
      c.#unopened = !(e instanceof StaleState);
    }
    if (opts.fetchMetrics ?? true) c.#first = within(c.refreshMetrics(), HOLD_WAIT_MS);
    else c.#fetched = true;
    if (c.#o.interval > 0) {
      c.#timer = setInterval(() => {
        if (c.#pending.length) void c.deliver();
        else if (c.#stock.due()) void c.#topUp();   // the token top-up, at its own moment
        if (c.#held.length) void c.refreshMetrics();   // the catalog failed: try again
      }, c.#o.interval * 1000);
      (c.#timer as { unref?: () => void }).unref?.();
    }
    return c;
  }

  /**
   * Take the store's state: the secret, opt-out and the ledger; with ``all`` also the
   * spool and the token stock (at open, and between delivery passes).
   */
  #load(l: Loaded, all = true): Loaded {
    this.#useSecret(l.secret);
    this.#optedOutNow = l.optedOut;
    this.#ledger = new Ledger(l.ledger ?? undefined);
    for (const ch of l.charges) this.#ledger.apply(ch);
    if (all) {
      // A row spooled by an SDK without blind tokens holds a 64-hex HMAC token the
      // collector refuses: it waits for a real token like a new report.
      this.#pending = l.rows.map((r) => (r.token.length <= 64 ? { ...r, token: "" } : r));
      this.#stock.entries.clear();
      for (const t of l.tokens) if (isEntry(t)) this.#stock.entries.set(entryKey(t), t);
    }
    return l;
  }

  /** Re-read the store after another tab wrote (``all``: also the spool and the stock). */
  async #reload(all?: boolean): Promise<void> {
    this.#load(await this.#store.open(() => this.#rng.bytes(32), !all), !!all);
  }

  /** Run ``fn`` after this Client's earlier records (they read and write the ledger). */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#lock.then(fn);
    this.#lock = run.catch(() => undefined);
    return run;
  }

  #useSecret(secret: Uint8Array): void {
    this.#secret = secret;
    // What the token issuer knows this install by (never sent with a report).
    this.#install = secret.length ? b64url(hmacSha256(secret, utf8("ldp-install-key-v1"))) : "";
  }

  /** May the issuer key ``id`` be used: pinned, or no pin at all (then warned once per key). */
  #allowKey(id: string): boolean {
    const pins = this.#pins, ok = !pins.size;
    if (pins.has(id)) return true;
    if (!ok) bump(this.counters.configErrors, "issuer_key_unpinned");
    this.#warnOnce(`key:${id}`, ok ? `issuer key ${id} used without a pin (issuerKeys)`
      : `${this.#o.url}: issuer key ${id} not pinned (issuerKeys): configuration error, reports kept`, ok ? "warn" : "error");
    return ok;
  }

  #learn(specs: unknown[], fromCollector: boolean): number {
    let n = 0;
    for (const raw of specs) {
      try {
        const spec = raw as Spec;
        if (typeof spec?.name !== "string" || typeof spec.version !== "number") continue;
        const old = this.#specs.get(spec.name);
        if (old && old.spec.version > spec.version) continue;
        const m = buildMechanism(spec);
        const fingerprint = mechanismFingerprint(spec);
        if (old && old.spec.version === spec.version && old.fingerprint !== fingerprint) {
          this.#conflicts.set(spec.name, spec.version);
          this.#warnOnce(`conflict:${spec.name}`, `metric ${spec.name} v${spec.version} changed under its version: refused`);
          continue;
        }
        const index = spec.kind === "categorical" ? new Map((spec.domain ?? []).map((c, i) => [c, i])) : undefined;
        this.#specs.set(spec.name, { spec, m, fingerprint, context: memoContext(spec, fingerprint), index });
        if ((this.#conflicts.get(spec.name) ?? Infinity) < spec.version) this.#conflicts.delete(spec.name);
        this.#unloaded.delete(spec.name);
        n++;
      } catch (e) {
        const name = String((raw as Spec)?.name);
        if (e instanceof FormNotLoaded && !this.#specs.has(name)) this.#unloaded.add(name);
        this.#warnOnce(`spec:${name}`, `${e instanceof FormNotLoaded ? `metric ${name}` : "unusable metric spec"}: ${(e as Error).message}`);
      }
    }
    if (fromCollector) this.#fetched = true;
    return n;
  }

  #warnOnce(key: string, message: string, level: "warn" | "error" = "warn"): void {
    if (this.#warned.has(key)) return;
    this.#warned.add(key);
    this.#say(message, level);
  }

  /** Log one line at ``level`` (``warn`` if the logger has no ``error``), as a method call. */
  #say(message: string, level: "warn" | "error" = "warn"): void {
    const log = this.#log;
    (log[level] ?? log.warn).call(log, `[ldp-telemetry] ${message}`);
  }

  #refuse(status: Status, epoch?: number): RecordResult {
    bump(this.counters.refused, status);
    return { status, ok: false, epoch };
  }

  /** The mechanism input of a user value, or why it is refused (counted, warned once). */
  #input(k: Known, value: unknown): { x: Value; clamped: boolean } | string {
    const s = k.spec;
    if (s.kind === "string") {
      const x = k.m.input?.(value) ?? "no string form";
      return typeof x === "string" ? x : { x, clamped: false };
    }
    if (s.kind === "categorical") {
      const i = typeof value === "string" ? k.index!.get(value) : undefined;
      return i === undefined ? `not one of the ${k.index!.size} categories (case matters)` : { x: i, clamped: false };
    }
    if (s.kind === "boolean") {
      if (value === true || value === 1) return { x: 1, clamped: false };
      if (value === false || value === 0) return { x: 0, clamped: false };
      return "not a boolean";
    }
    if (typeof value !== "number" || !Number.isFinite(value)) return "not a finite number";
    const lo = s.lo as number, hi = s.hi as number;
    const x = Math.min(hi, Math.max(lo, value));
    return { x, clamped: x !== value };
  }

  /**
   * Randomise and queue one value; never throws, answers a status.  With
   * ``strict``, the promise rejects with ``InvalidValueError`` for a value
   * outside the domain (a number outside [lo, hi] included).
   */
  record(name: string, value: unknown): Promise<RecordResult> {
    return this.#serial(() => this.#recordNow(name, value)).catch((e) => {
      if (e instanceof InvalidValueError) throw e;
      this.#say(`record failed: ${(e as Error)?.name ?? "error"}`);
      return this.#refuse("storage_error");
    });
  }

  async #recordNow(name: string, value: unknown): Promise<RecordResult> {
    if (this.#closed) return this.#refuse("closed");
    if (this.#unopened) {
      await this.#reload(true);   // throws while the store does not open: storage_error
      this.#unopened = false;
    }
    // The first run: the catalog fetch started at open usually answers within a moment.
    if (!this.#fetched && !this.#specs.has(name)) await this.#first;
    if (this.#optedOutNow) return this.#refuse("opted_out");
    if (this.#conflicts.has(name)) return this.#refuse("spec_conflict");
    if (this.#unloaded.has(name)) return this.#refuse("form_not_loaded");
    const k = this.#specs.get(name);
    if (!k) {
      this.#expire();
      if (!this.#fetched && this.#held.length < HOLD_MAX) {
        // No catalog yet (the collector is slow or down): held in memory only (never on
        // disk), bounded; recorded when it arrives, counted and logged if it never does.
        if (!this.#held.length) this.#log.info?.(`[ldp-telemetry] metric specs not fetched from ${this.#o.url} yet: values held in memory`);
        this.#held.push({ name, value, at: Date.now() });
        return { status: "held", ok: true };
      }
      this.#warnOnce(`unknown:${name}`, `unknown metric ${name}`);
      return this.#refuse("unknown_metric");
    }
    const inp = this.#input(k, value);
    if (this.#o.strict && (typeof inp === "string" || inp.clamped)) {
      // A string metric's value is never quoted (no true string in a log or an error).
      const shown = k.spec.kind === "string" ? "the value" : JSON.stringify(value) ?? String(value);
      throw new InvalidValueError(`metric ${name}: ${shown} is ${typeof inp === "string" ? inp : `outside [${k.spec.lo}, ${k.spec.hi}]`}`);
    }
    if (typeof inp === "string") {
      this.#warnOnce(`invalid:${name}`, `metric ${name} refused a value (${inp}): counted in counters.refused.invalid_value`);
      return this.#refuse("invalid_value");
    }
    if (inp.clamped) this.counters.clamped++;
    const m = k.m, s = k.spec;
    const two = isTwoLevel(m);  // two levels: a number, or a string's symbols (forms.ts)
    for (let tries = 0; ; tries++) {
      if (this.#optedOutNow) return this.#refuse("opted_out");   // after a reload: another tab opted out
      const memo = two ? m.memoKey(inp.x as number, this.#secret, k.context) : null;
      const ask: Ask = {
        metric: s.name, version: s.version, fingerprint: k.fingerprint, period: PERIOD[s.epoch] ?? 86400,
        now: this.#o.clock(), charge: m.epsilon, budget: this.#o.budgets[s.name] ?? m.epsilon,
        valueKey: memo ? valueKey(this.#secret, s.name, k.fingerprint, memo.key, memo.numeric) : null,
        epsilonInf: two ? m.epsilonInf : 0, lifetimeBudget: this.#o.lifetimeBudgets[s.name] ?? null,
        lifetimeMultiple: this.#o.lifetimeMultiple,
      };
      const charge = this.#ledger.decide(ask);
      if ("status" in charge) return this.#refuse(charge.status, charge.epoch ?? undefined);
      const report = two ? m.instant(m.permanent(inp.x as number, this.#secret, k.context), this.#rng) : m.perturb(inp.x, this.#rng);
      const row: Row = {
        reportId: toHex(this.#rng.bytes(16)), metric: s.name, version: s.version, epoch: charge.epoch,
        token: "", payload: m.encode(report), charge: m.epsilon, period: s.epoch,
      };
      try {
        await this.#store.commit(charge, row);
      } catch (e) {
        // Another tab charged (or opted out) since this one read the ledger: nothing was
        // written, this report is discarded unsent; decide again from the store's ledger.
        if (e instanceof StaleState && tries < 9) {
          await this.#reload();
          continue;
        }
        this.#say(`ledger or spool write failed: ${(e as Error)?.name}`);
        return this.#refuse("storage_error");
      }
      this.#ledger.apply(charge);
      this.#pending.push(row);
      if (this.#pending.length - this.#inflight.size >= this.#o.batchSize) void this.deliver();
      return { status: "queued", ok: true, epoch: charge.epoch, clamped: inp.clamped || undefined };
    }
  }

  /** Reports spooled and not yet answered for. */
  get queued(): number {
    return this.#pending.length;
  }

  /** Values held before the catalog arrived (``record`` answered "held"), not yet recorded. */
  get held(): number {
    return this.#held.length;
  }

  /** Count and log ``n`` held values that will never be recorded, as ``refused[code]``. */
  #lose(code: string, n: number): void {
    if (!n) return;
    bump(this.counters.refused, code, n);
    this.#say(`${n} held value(s) lost, metric specs not fetched from ${this.#o.url}: counted in counters.refused.${code}`);
  }

  /** Drop held values older than HOLD_MS (``hold_expired``). */
  #expire(): void {
    const now = Date.now(), live = this.#held.filter((h) => now - h.at <= HOLD_MS);
    this.#lose("hold_expired", this.#held.length - live.length);
    this.#held = live;
  }

  /** GET /v1/metrics (one at a time); true if the catalog was updated.  Held values are
   * then recorded before it resolves. */
  refreshMetrics(): Promise<boolean> {
    return this.#refresh ??= this.#fetchCatalog().then(async (ok) => {
      this.#expire();
      if (this.#fetched) {
        const held = this.#held;
        this.#held = [];
        await Promise.all(held.map((h) => this.record(h.name, h.value).catch(() => this.#refuse("invalid_value"))));
      }
      return ok;
    }).finally(() => { this.#refresh = null; });
  }

  async #fetchCatalog(): Promise<boolean> {
    let ok = false;
    try {
      const r = await this.#call("GET", "/v1/metrics");
      if (r.status === 200) {
        const data = JSON.parse(r.body) as { metrics?: unknown };
        if (Array.isArray(data.metrics)) {
          this.#learn(data.metrics, true);
          ok = true;
          await this.#store.saveCatalog([...this.#specs.values()].map((k) => k.spec));
        }
      } else {
        this.#warnOnce(`metrics:${r.status}`, `GET ${this.#o.url}/v1/metrics answered ${r.status}`);
      }
    } catch (e) {
      this.#log.info?.(`[ldp-telemetry] metric specs not fetched (${(e as Error)?.name})`);
    }
    return ok;
  }

  async #request(method: string, path: string, body?: string | Uint8Array,
    extra: Record<string, string> = {}): Promise<Answer> {
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(), this.#o.requestTimeout * 1000);
    try {
      const headers: Record<string, string> = { Authorization: `Bearer ${this.#o.apiKey}`, ...extra };
      if (body !== undefined) headers["Content-Type"] = "application/json";
      const size = typeof body === "string" ? body.length : body?.byteLength ?? 0;
      const r = await this.#fetchFn(this.#o.url + path, {
        method, headers, body: body as BodyInit | undefined, signal: ctl.signal, redirect: "error",
        keepalive: this.#o.keepalive && body !== undefined && size < 60_000,
      });
      return { status: r.status, body: await r.text(), retryAfter: r.headers.get("retry-after") };
    } finally {
      clearTimeout(t);
    }
  }

  /** ``request``, with a refused key (401/403) logged once per reason and counted. */
  async #call(method: string, path: string, body?: string | Uint8Array,
    extra: Record<string, string> = {}): Promise<Answer> {
    const a = await this.#request(method, path, body, extra);
    if (a.status === 401 && "LDP-Device-Token" in extra && problemCode(a.body) === "invalid_device") {
      // The app's login token (expired, signed out ...), not the key: kept, retried.
      bump(this.counters.configErrors, "device_token_refused");
      this.#warnOnce("device_token_refused", `${this.#o.url}${path}: the device token (the app's login token) was refused; reports kept, retried`);
    } else if ((a.status === 401 || a.status === 403) && problemCode(a.body) !== "install_unregistered") {
      const reason = `${a.status} ${problemCode(a.body) ?? "refused"}`;
      bump(this.counters.configErrors, "invalid_key");
      if (this.#keyRejected !== reason) {
        this.#say(`${method} ${this.#o.url}${path}: ${reason}: ingest or install key refused; reports kept, retried`, "error");
      }
      this.#keyRejected = reason;
    } else {
      this.#keyRejected = null;
    }
    return a;
  }

  /** Deliver what is spooled, and what is held once the specs arrive (fetched again
   * meanwhile); true when nothing is left (bounded by ``timeout`` seconds; false at once
   * when a newer SDK version took the store: that one delivers). */
  async flush(timeout = 10): Promise<boolean> {
    const deadline = Date.now() + timeout * 1000;
    while (this.#held.length && Date.now() < deadline) {
      await within(this.refreshMetrics(), deadline - Date.now());
      // Not fetched (the collector is down): pause, then try again.
      if (this.#held.length) await within(new Promise(() => undefined), Math.min(500, deadline - Date.now()));
    }
    await this.#lock;
    if (!this.#pending.length && this.#stock.due()) await this.#topUp();
    while (this.#pending.length && Date.now() < deadline && !this.#store.retired) {
      const wait = this.#backoffUntil - Date.now();
      if (wait > 0) {
        if (Date.now() + wait > deadline) break;
        await new Promise((r) => setTimeout(r, wait));
      }
      await this.deliver();
      if (this.#stock.heldFor() > 0) break;   // held after a token request: a later flush sends
    }
    return !this.#pending.length && !this.#held.length;
  }

  /** The token stock's top-up, sending nothing (``stock.ts``); a failure backs off. */
  #topUp(): Promise<boolean> {
    if (this.#sending || this.#store.retired || this.#optedOutNow || Date.now() < this.#backoffUntil) {
      return this.#sending ?? Promise.resolve(false);
    }
    this.#sending = this.#stock.topUp().then(() => {
      if (this.#stock.failed) this.#retry(null);
      return false;
    }).catch(async (e) => {
      if (e instanceof StaleState) await this.#serial(() => this.#reload(true)).catch(() => undefined);   // another tab's stock
      else {
        this.#say(`token top-up stopped: ${(e as Error)?.name ?? "error"}; will retry`);
        this.#retry(null);
      }
      return false;
    }).finally(() => { this.#sending = null; });
    return this.#sending;
  }

  /** One delivery pass (one batch at a time, until empty or a retry is scheduled). */
  deliver(): Promise<boolean> {
    if (!this.#sending) {
      // Never a rejection at the app (a timer or page-hide calls this unawaited): a store
      // failure is logged and retried later.
      this.#sending = this.#sendAll().catch((e) => {
        this.#say(`delivery stopped: ${(e as Error)?.name ?? "error"}; will retry`);
        this.#retry(null);
        return false;
      }).finally(() => { this.#sending = null; });
    }
    return this.#sending;
  }

  /** Delivery passes: one that finds the spool or the stock changed by another tab
   * (``StaleState``) re-reads them and starts over. */
  async #sendAll(): Promise<boolean> {
    for (let tries = 0; ; tries++) {
      try {
        return await this.#pass();
      } catch (e) {
        if (!(e instanceof StaleState) || tries > 8) throw e;
        await this.#serial(() => this.#reload(true));
      }
    }
  }

  async #pass(): Promise<boolean> {
    // A newer SDK version took the store: its Client delivers the spool (resent from here,
    // each would be answered duplicate, every backoff, for as long as this tab stays open).
    if (this.#store.retired) return false;
    while (this.#pending.length && Date.now() >= this.#backoffUntil && !this.#optedOutNow) {
      const free = this.#pending.filter((r) => !this.#inflight.has(r.reportId));
      const waiting = free.filter((r) => !r.token);
      if (waiting.length) {
        const drop = await this.#stock.ready(waiting, free.some((r) => r.token));
        if (this.#stock.progress) this.#attempt = 0;
        for (const [code, rows] of drop) await this.#dropUnsent(code, rows);
      }
      const live = new Set(this.#pending);
      const batch = free.filter((r) => r.token && live.has(r)).slice(0, Math.min(this.#sendLimit, this.#o.batchSize * 10));
      if (!batch.length) {
        if (!free.some((r) => !r.token && live.has(r))) break;
        if (!this.#stock.failed && this.#stock.heldFor() > 0) return false;   // held, not failed
        // Reports wait for tokens: back off (Retry-After of a 429/503 honoured).
        const f = this.#stock.failed;
        if (f && !("status" in f)) this.#log.info?.(`[ldp-telemetry] tokens not fetched from ${this.#o.url} (${f.name}); will retry`);
        this.#retry(f && "status" in f && (f.status === 429 || f.status === 503) ? f.retryAfter : null);
        return false;
      }
      if ((await this.#sendBatch(batch)) !== "ok") return false;
    }
    return this.#pending.length === 0;
  }

  /** Drop reports that never left the device, refunding their epsilon (one store write). */
  async #dropUnsent(code: string, rows: Row[]): Promise<void> {
    if (!rows.length) return;
    const refunds: Charge[] = rows.map((r) => ({
      metric: r.metric, version: r.version, fingerprint: "", epoch: r.epoch, period: 0, cost: r.charge ?? 0,
      valueKey: null, epsilonInf: 0, refund: true,
    }));
    // Serial with records: a record's reload between the two would apply the refunds twice.
    await this.#serial(async () => {
      await this.#store.drop(rows.map((r) => r.reportId), refunds);
      for (const c of refunds) this.#ledger.apply(c);
    });
    const gone = new Set(rows);
    this.#pending = this.#pending.filter((r) => !gone.has(r));
    this.#drop(code, rows.length);
    this.#say(`the token issuer at ${this.#o.url} refused ${rows.length} report(s): ${code} (dropped before sending; epsilon refunded)`);
  }

  async #body(batch: Row[]): Promise<{ body: string | Uint8Array; headers: Record<string, string> }> {
    const text = batchJson(batch);
    const CS = (globalThis as { CompressionStream?: new (f: string) => TransformStream<Uint8Array, Uint8Array> }).CompressionStream;
    if (!this.#o.gzip || !CS) return { body: text, headers: {} };
    const stream = new Blob([text]).stream().pipeThrough(new CS("gzip"));
    return { body: new Uint8Array(await new Response(stream).arrayBuffer()), headers: { "Content-Encoding": "gzip" } };
  }

  async #sendBatch(batch: Row[]): Promise<"ok" | "retry"> {
    batch.forEach((r) => this.#inflight.add(r.reportId));
    try {
      let answer;
      try {
        const { body, headers } = await this.#body(batch);
        answer = await this.#call("POST", "/v1/reports", body, headers);
      } catch (e) {
        this.#log.info?.(`[ldp-telemetry] delivery to ${this.#o.url} failed (${(e as Error)?.name}); will retry`);
        return this.#retry(null);
      }
      const status = answer.status;
      if (status >= 200 && status < 300) {
        const results = parseResults(answer.body, batch.length);
        if (!results) return this.#retry(null);
        await this.#forget(batch, () => {
          for (const [kind, code] of results) {
            if (kind === "accepted") this.counters.sent++;
            else if (kind === "duplicate") this.counters.duplicates++;
            else this.#drop(code ?? "rejected", 1);
          }
        });
        this.counters.batches++;
        this.#attempt = 0;
        this.#sendLimit = Math.min(MAX_BATCH, this.#sendLimit * 2);
        return "ok";
      }
      if (RETRYABLE.has(status) || status === 401 || status === 403 || status >= 500 || status < 200 || (status >= 300 && status < 400)) {
        return this.#retry(status === 429 || status === 503 ? answer.retryAfter : null);
      }
      if (status === 413 && batch.length > 1) {
        this.#sendLimit = Math.max(1, batch.length >> 1);
        return "ok";
      }
      const code = problemCode(answer.body) ?? `http_${status}`;
      this.#say(`POST ${this.#o.url}/v1/reports refused a batch of ${batch.length}: ${status} ${code} (dropped)`);
      await this.#forget(batch, () => this.#drop(code, batch.length));
      return "ok";
    } finally {
      batch.forEach((r) => this.#inflight.delete(r.reportId));
    }
  }

  #drop(code: string, n: number): void {
    bump(this.counters.dropped, code, n);
  }

  /**
   * Forget answered reports: off the store first, then off the spool and into the
   * counters in one step (no await between), so whoever sees them gone (``queued``,
   * a ``flush``) sees them counted.  A failed store write counts nothing: they stay,
   * are resent and counted once (``duplicate``).
   */
  async #forget(batch: Row[], count: () => void): Promise<void> {
    const ids = new Set(batch.map((r) => r.reportId));
    await this.#store.remove([...ids]);
    this.#pending = this.#pending.filter((r) => !ids.has(r.reportId));
    count();
  }

  #retry(retryAfter: string | null): "retry" {
    this.counters.retries++;
    this.#attempt++;
    const ceiling = Math.min(this.#o.backoffMax, this.#o.backoffBase * 2 ** Math.min(this.#attempt - 1, 62));
    let delay = this.#rng.getrandbits(32) / 2 ** 32 * ceiling;   // full jitter
    const asked = retryAfterSeconds(retryAfter, this.#o.retryAfterMax);
    if (asked !== null) delay = Math.max(delay, asked);
    this.#backoffUntil = Date.now() + delay * 1000;
    return "retry";
  }

  /** Epsilon spent per unit (metric name, epoch) and per memoised lifetime (kept across opt-out),
   * with its cap (``budget``: the app's, else ``lifetimeMultiple`` x the first draw's epsilon_inf). */
  privacyReport(): { units: UnitSpend[]; lifetime: { metric: string; spent: number; values: number; budget: number }[] } {
    const s = this.#ledger.state;
    const units = Object.entries(s.budget).map(([key, [spent, reports]]) => {
      const at = key.lastIndexOf("|");
      return { metric: key.slice(0, at), epoch: Number(key.slice(at + 1)), spent, reports };
    });
    const lifetime = Object.entries(s.lifetime).map(([metric, drawn]) => ({
      metric, spent: Object.values(drawn).reduce((a, b) => a + b, 0), values: Object.keys(drawn).length,
      budget: lifetimeCap({ lifetimeBudget: this.#o.lifetimeBudgets[metric] ?? null, lifetimeMultiple: this.#o.lifetimeMultiple,
        epsilonInf: 0 }, s.first?.[metric]) }));
    return { units, lifetime };
  }

  /** True after ``optOut()`` (persisted: a later Client on the same store stays out). */
  get optedOut(): boolean {
    return this.#optedOutNow;
  }

  /**
   * Stop collecting: forget held values, purge the spool and the token stock,
   * delete the device secret.  The ledger (epsilon spent, HMAC keys: no value)
   * is kept, so an ``optIn()`` cannot reset budgets or lifetime charges.
   */
  async optOut(): Promise<void> {
    if (this.#optedOutNow) return;
    this.#optedOutNow = true;
    bump(this.counters.refused, "opted_out", this.#held.length);
    this.#held = [];
    await this.#lock;
    await this.#sending;
    await this.#store.optOut();
    if (this.#pending.length) this.#drop("opt_out", this.#pending.length);
    this.#pending = [];
    this.#stock.clear();
    this.#useSecret(new Uint8Array(0));
    try {
      await this.#store.snapshot?.(this.#ledger.state, [], []);
    } catch (e) {
      if (!(e instanceof StaleState)) throw e;   // another tab charged since: compaction waits
    }
  }

  /** Collect again with a new secret (new install key, new memoisation; charged on top). */
  async optIn(): Promise<void> {
    if (!this.#optedOutNow) return;
    const secret = this.#rng.bytes(32);
    await this.#store.optIn(secret);
    this.#useSecret(secret);
    this.#optedOutNow = false;
  }

  /**
   * Stop the timer and refuse further records.  Spooled reports stay for the next run
   * (``queued``); values still held (the specs never arrived) are lost: counted in
   * ``counters.refused.hold_dropped``, logged, and answered as ``lost``.
   * Call ``await flush()`` first to deliver them.
   */
  close(): CloseResult {
    this.#closed = true;
    const lost = this.#held.length;
    this.#held = [];
    this.#lose("hold_dropped", lost);
    if (this.#timer) clearInterval(this.#timer);
    this.#store.close?.();
    return { queued: this.#pending.length, lost };
  }
}

/** Add ``n`` to the counter ``key`` of ``counts``. */
function bump(counts: Record<string, number>, key: string, n = 1): void {
  counts[key] = (counts[key] ?? 0) + n;
}

/** The ``metrics`` option as a catalog file's object. */
const bundle = (o: ClientOptions): Bundle => Array.isArray(o.metrics) ? { metrics: o.metrics } : o.metrics ?? {};

/** Seconds to wait from a Retry-After header (seconds or HTTP date), clamped; null if absent/bad. */
export function retryAfterSeconds(header: string | null, max: number): number | null {
  if (header === null) return null;
  const text = header.trim();
  let s: number | null = null;
  if (/^\d+$/.test(text)) s = Number(text);
  else {
    const t = Date.parse(text);
    if (!Number.isNaN(t)) s = Math.max(0, (t - Date.now()) / 1000);
  }
  return s === null ? null : Math.min(max, s);
}

function parseResults(body: string, expected: number): [string, string | null][] | null {
  try {
    const results = (JSON.parse(body) as { results?: unknown }).results;
    if (!Array.isArray(results) || results.length !== expected) return null;
    const out: [string, string | null][] = [];
    for (const item of results as { status?: unknown; code?: unknown }[]) {
      if (item?.status !== "accepted" && item?.status !== "duplicate" && item?.status !== "rejected") return null;
      out.push([item.status, typeof item.code === "string" ? item.code : null]);
    }
    return out;
  } catch {
    return null;
  }
}


