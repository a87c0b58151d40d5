// The ledger's refund (a report dropped before it left the device): one
// report's cost off its unit, rounded outward -- the smallest double not below
// the exact difference -- checked with exact integer arithmetic on the doubles.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Ledger, type Charge } from "../src/ledger.js";
import { DrbgRng } from "../src/rng.js";
import { utf8 } from "../src/sha256.js";

/** x * 2**1074 exactly (every finite double is an integer multiple of 2**-1074). */
function scaled(x: number): bigint {
  const v = new DataView(new ArrayBuffer(8));
  v.setFloat64(0, x);
  const bits = v.getBigUint64(0);
  const ex = Number((bits >> 52n) & 0x7ffn), frac = bits & ((1n << 52n) - 1n);
  const mag = ex === 0 ? frac : (frac | (1n << 52n)) << BigInt(ex - 1);
  return bits >> 63n ? -mag : mag;
}

function nextDown(x: number): number {
  const v = new DataView(new ArrayBuffer(8));
  v.setFloat64(0, x);
  v.setBigUint64(0, v.getBigUint64(0) - 1n);   // x > 0 here
  return v.getFloat64(0);
}

const charge = (cost: number, refund?: true): Charge => ({
  metric: "m", version: 1, fingerprint: "f", epoch: 7, period: 86400, cost, valueKey: null, epsilonInf: 0, refund,
});

test("a refund leaves the smallest double not below the exact remaining spend", () => {
  const rng = new DrbgRng(utf8("ledger-refund"));
  let rounded = 0;
  // 53-bit mantissas: spent in [1, 16), cost a few binades below it (inexact differences),
  // and every other sample a sum of charges as a device makes them (often exact).
  const mantissa = () => (2 ** 52 + rng.getrandbits(26) * 2 ** 26 + rng.getrandbits(26)) / 2 ** 52;
  for (let i = 0; i < 5000; i++) {
    const cost = i % 2 ? mantissa() / 2 ** rng.randrange(30) : [0.1, 0.5, 1, 1.0986122886681098][i % 8 >> 1];
    const spent = i % 2 ? mantissa() * 2 ** rng.randrange(4) : cost * 3 + 0.2;
    const l = new Ledger({ versions: {}, high: {}, budget: { "m|7": [spent, 3] }, lifetime: {} });
    l.apply(charge(cost, true));
    const [left, reports] = l.state.budget["m|7"];
    const exact = scaled(spent) - scaled(cost);
    assert.equal(reports, 2);
    assert.ok(scaled(left) >= exact, `${spent} - ${cost} -> ${left} is below the exact difference`);
    assert.ok(scaled(nextDown(left)) < exact, `${spent} - ${cost} -> ${left} is not the tightest`);
    if (scaled(left) !== exact) rounded++;
  }
  assert.ok(rounded > 100, `only ${rounded} inexact differences: the check saw too few`);
});

test("the last report's refund empties its unit; the lifetime charge stays; an epoch never moves back", () => {
  const l = new Ledger();
  l.apply({ ...charge(1.5), valueKey: "k", epsilonInf: 4 });
  assert.deepEqual(l.state.budget["m|7"], [1.5, 1]);
  l.apply(charge(1.5, true));
  assert.equal(l.state.budget["m|7"], undefined);
  assert.deepEqual(l.state.lifetime, { m: { k: 4 } });
  assert.equal(l.state.high.m, 7 * 86400);
  const again = l.decide({ metric: "m", version: 1, fingerprint: "f", period: 86400, now: 0, charge: 1.5, budget: 1.5,
    valueKey: null, epsilonInf: 0, lifetimeBudget: null });
  assert.ok(!("status" in again) && again.epoch === 7, JSON.stringify(again));
});
