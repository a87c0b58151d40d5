/**
 * The budget ledger, with the semantics of ``client_sdk._ledger``: per metric
 * name, epochs only move forward (high-water mark), a per-(name, epoch) budget
 * (default: one report's epsilon), a (name, version) keeps its first
 * fingerprint, and a memoised value whose permanent response is new costs
 * epsilon_inf within the name's lifetime budget: the app's (``lifetimeBudgets``,
 * ``Infinity``: none), else ``lifetimeMultiple`` (4) x the epsilon_inf of the
 * name's first draw on this device, which no later spec version moves (a cap that
 * follows the catalog's epsilon_inf would be no cap; see ``client_sdk._ledger``).
 * ``decide`` only decides; ``apply`` writes a decided charge (the Client persists
 * it with the report).
 *
 * @example
 *   const l = new Ledger(); const c = l.decide({...ask}); if ("epoch" in c && !c.status) l.apply(c);
 */

import { ConfigError } from "./pins.js";

/** One report's charge request (no value: a memoised value only by its HMAC key). */
export interface Ask {
  metric: string;
  version: number;
  fingerprint: string;
  period: number;
  now: number;
  charge: number;
  budget: number;
  valueKey: string | null;
  epsilonInf: number;
  /** The app's lifetime budget of the name (``Infinity``: none); null: the default. */
  lifetimeBudget: number | null;
  /** The default lifetime budget, in epsilon_inf of the name's first draw (``LIFETIME_MULTIPLE``). */
  lifetimeMultiple?: number;
}

/** A decided charge, ready to persist and apply (or, with ``refund``, to take back). */
export interface Charge {
  metric: string;
  version: number;
  fingerprint: string;
  epoch: number;
  period: number;
  cost: number;
  valueKey: string | null;
  epsilonInf: number;
  /** A refund: the report of this charge was dropped before it left the device. */
  refund?: true;
}

export interface Refusal { status: "spec_conflict" | "over_budget" | "over_lifetime_budget"; epoch: number | null }

const BUDGET_SLACK = 1e-9;
/** The default lifetime budget of a memoised name, in epsilon_inf of its first draw. */
export const LIFETIME_MULTIPLE = 4;

function nextUp(x: number): number {
  if (x === 0) return Number.MIN_VALUE;
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  view.setBigUint64(0, view.getBigUint64(0) + (x > 0 ? 1n : -1n));
  return view.getFloat64(0);
}

/** a - b rounded up (never below the exact difference): TwoSum gives the rounding error exactly. */
function subUp(a: number, b: number): number {
  const s = a - b, bb = s - a, err = (a - (s - bb)) + (-b - bb);
  return err > 0 ? nextUp(s) : s;
}

/**
 * ``a * b`` rounded down when inexact (never above the exact product; a, b > 0, finite):
 * Veltkamp's split gives the product's rounding error exactly (Dekker's TwoProduct).
 */
function mulDown(a: number, b: number): number {
  const p = a * b, c = 134217729 * a, ah = c - (c - a), al = a - ah, d = 134217729 * b, bh = d - (d - b), bl = b - bh;
  return ah * bh - p + ah * bl + al * bh + al * bl < 0 ? -nextUp(-p) : p;
}

/**
 * The lifetime budget of ``ask``'s name: the app's, else ``lifetimeMultiple`` x ``first``
 * (the epsilon_inf of the name's first draw; undefined: this ask's is), rounded down.
 */
export function lifetimeCap(ask: Pick<Ask, "lifetimeBudget" | "lifetimeMultiple" | "epsilonInf">, first: number | undefined): number {
  if (ask.lifetimeBudget !== null) return ask.lifetimeBudget;
  return mulDown(ask.lifetimeMultiple ?? LIFETIME_MULTIPLE, first ?? ask.epsilonInf);
}

/** The ledger state (plain JSON, persisted by the store). */
export interface LedgerState {
  versions: Record<string, string>;
  high: Record<string, number>;
  budget: Record<string, [number, number]>;
  lifetime: Record<string, Record<string, number>>;
  /** Per memoised name, the epsilon_inf of its first draw (a state saved before it
   * existed: the smallest draw stands in, never a larger cap). */
  first?: Record<string, number>;
}

export class Ledger {
  state: LedgerState;

  constructor(state?: LedgerState) {
    this.state = state ?? { versions: {}, high: {}, budget: {}, lifetime: {} };
    const first = (this.state.first ??= {});
    for (const [metric, drawn] of Object.entries(this.state.lifetime)) {
      const eps = Object.values(drawn);
      if (eps.length) first[metric] ??= Math.min(...eps);
    }
  }

  /** The charge ``ask`` would make, or why it is refused. */
  decide(ask: Ask): Charge | Refusal {
    const s = this.state;
    const known = s.versions[`${ask.metric}|${ask.version}`];
    if (known !== undefined && known !== ask.fingerprint) return { status: "spec_conflict", epoch: null };
    const high = s.high[ask.metric];
    const epoch = Math.floor((high === undefined ? ask.now : Math.max(ask.now, high)) / ask.period);
    const spent = s.budget[`${ask.metric}|${epoch}`]?.[0] ?? 0;
    if (!(spent + ask.charge <= ask.budget * (1 + BUDGET_SLACK))) return { status: "over_budget", epoch };
    const drawn = s.lifetime[ask.metric] ?? {};
    const newMemo = ask.valueKey !== null && !(ask.valueKey in drawn);
    if (newMemo) {
      const life = Object.values(drawn).reduce((a, b) => a + b, 0);
      const cap = lifetimeCap(ask, s.first![ask.metric]);
      if (!(life + ask.epsilonInf <= cap * (1 + BUDGET_SLACK))) return { status: "over_lifetime_budget", epoch };
    }
    return {
      metric: ask.metric, version: ask.version, fingerprint: ask.fingerprint, epoch, period: ask.period,
      cost: ask.charge, valueKey: newMemo ? ask.valueKey : null, epsilonInf: ask.epsilonInf,
    };
  }

  /**
   * Write a decided charge (also used to replay a journal).  A refund takes one
   * report's cost off its unit, rounded outward (never below the exact
   * difference), as ``client_sdk._store._refund``; the lifetime charge of a
   * memoised value stays (its permanent response stays drawn).
   */
  apply(c: Charge): void {
    const s = this.state;
    const key = `${c.metric}|${c.epoch}`;
    const [spent, reports] = s.budget[key] ?? [0, 0];
    if (c.refund) {
      if (reports <= 1) delete s.budget[key];
      else s.budget[key] = [Math.max(0, subUp(spent, c.cost)), reports - 1];
      return;
    }
    const total = spent + c.cost;
    s.budget[key] = [spent ? nextUp(total) : total, reports + 1];
    if (c.valueKey !== null) {
      (s.lifetime[c.metric] ??= {})[c.valueKey] = c.epsilonInf;
      s.first![c.metric] ??= c.epsilonInf;
    }
    const start = c.epoch * c.period;
    if (s.high[c.metric] === undefined || start > s.high[c.metric]) s.high[c.metric] = start;
    s.versions[`${c.metric}|${c.version}`] ??= c.fingerprint;
  }
}

/** The Client's lifetime options checked (a ``ConfigError`` names the bad value). */
export function checkLifetime(budgets: Record<string, number>, multiple: number): void {
  for (const [k, v] of [...Object.entries(budgets), ["lifetimeMultiple", multiple] as const]) {
    if (typeof v != "number" || !(k == "lifetimeMultiple" ? v >= 1 && v < Infinity : v > 0)) {
      throw new ConfigError(`lifetime budget ${k} must be ${k == "lifetimeMultiple" ? "finite, >= 1" : "> 0"}, got ${v}`);
    }
  }
}
