// The e2e plan shared by the Node script and the browser page: device i holds
// DOMAIN[pick(i)], with shares 8/20, 6/20, 4/20, 2/20 over every block of 20.
export const DOMAIN = ["free", "basic", "pro", "team"];
export const METRICS = ["js.plan", "js.theme"];
/** Numeric metrics ("auto": Hybrid at eps 2, the memoised Piecewise mean with
 * epsilon_inf): device i holds amount(i) in [0, 100]. */
export const NUMERIC = ["js.latency", "js.session"];
export function amount(i: number): number {
  return ((i * 37) % 100) + 0.5;
}
export function pick(i: number): number {
  const r = i % 20;
  return r < 8 ? 0 : r < 14 ? 1 : r < 18 ? 2 : 3;
}
