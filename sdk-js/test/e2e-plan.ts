// The e2e plan shared by the Node script and the browser page: device i holds
// DOMAIN[pick(i)], with shares 8/20, 6/20, 4/20, 2/20 over every block of 20.
export const DOMAIN = ["free", "basic", "pro", "team"];
export const METRICS = ["js.plan", "js.theme"];
export function pick(i: number): number {
  const r = i % 20;
  return r < 8 ? 0 : r < 14 ? 1 : r < 18 ? 2 : 3;
}
