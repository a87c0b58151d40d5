/**
 * The budget ledger, with the semantics of ``client_sdk._ledger``: per metric
 * name, epochs only move forward (high-water mark), a per-(name, epoch) budget
 * (default: one report's epsilon), a (name, version) keeps its first
 * fingerprint, and a memoised value whose permanent response is new costs
 * epsilon_inf within an optional lifetime budget.  ``charge`` only decides;
 * ``apply`` writes a decided charge (the Client persists it with the report).
 *
 * @example
 *   const l = new Ledger(); const c = l.decide({...ask}); if ("epoch" in c && !c.status) l.apply(c);
 */

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
  lifetimeBudget: number | null;
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

/** The ledger state (plain JSON, persisted by the store). */
export interface LedgerState {
  versions: Record<string, string>;
  high: Record<string, number>;
  budget: Record<string, [number, number]>;
  lifetime: Record<string, Record<string, number>>;
}

export class Ledger {
  state: LedgerState;

  constructor(state?: LedgerState) {
    this.state = state ?? { versions: {}, high: {}, budget: {}, lifetime: {} };
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
    if (newMemo && ask.lifetimeBudget !== null) {
      const life = Object.values(drawn).reduce((a, b) => a + b, 0);
      if (!(life + ask.epsilonInf <= ask.lifetimeBudget * (1 + BUDGET_SLACK))) return { status: "over_lifetime_budget", epoch };
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
    if (c.valueKey !== null) (s.lifetime[c.metric] ??= {})[c.valueKey] = c.epsilonInf;
    const start = c.epoch * c.period;
    if (s.high[c.metric] === undefined || start > s.high[c.metric]) s.high[c.metric] = start;
    s.versions[`${c.metric}|${c.version}`] ??= c.fingerprint;
  }
}
