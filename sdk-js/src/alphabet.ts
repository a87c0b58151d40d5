/**
 * A string metric's alphabet on the device (``ldp_core.mechanisms._alphabet``):
 * NFC, then case-folded when the spec says so (Python's ``casefold``, see
 * ``casefold.ts``), then NFC again; each symbol numbered from 1 (0 marks the end).
 * ``"bytes"`` numbers the UTF-8 bytes of the normalised text (byte + 1).  The
 * symbols are the prefix levels' digits; the string itself is never kept.
 *
 * @example
 *   const a = alphabet("a-z", 6, true);
 *   symbols(a, "Hé")   // a reason (é is outside a-z), never quoting the value
 *   symbols(a, "Ab")   // Uint16Array [1, 2, 0, 0, 0, 0]
 */
import { FOLD_MULTI, FOLD_RUNS } from "./casefold.js";

export interface Alphabet { spec: string; maxLength: number; casefold: boolean; base: number; index: Map<string, number> | null }

/** The symbols of a spec such as "a-z0-9_" (Python ``_expand``: "x-y" with x <= y is a range). */
function expand(spec: string): string[] {
  const cps = Array.from(spec), out: string[] = [];
  for (let i = 0; i < cps.length;) {
    if (cps[i + 1] === "-" && i + 2 < cps.length && cps[i].codePointAt(0)! <= cps[i + 2].codePointAt(0)!) {
      for (let c = cps[i].codePointAt(0)!; c <= cps[i + 2].codePointAt(0)!; c++) out.push(String.fromCodePoint(c));
      i += 3;
    } else out.push(cps[i++]);
  }
  if (new Set(out).size !== out.length) throw new Error(`alphabet ${JSON.stringify(spec)} names a symbol twice`);
  return out;
}

/** The alphabet of a spec's params (``alphabet``, ``max_length``, ``casefold``). */
export function alphabet(spec: unknown, maxLength: unknown, casefold: unknown): Alphabet {
  if (typeof spec !== "string" || !spec) throw new Error(`alphabet must be a string, got ${JSON.stringify(spec)}`);
  if (!Number.isInteger(maxLength) || (maxLength as number) < 1 || (maxLength as number) > 62) {
    throw new Error(`max_length must be an integer in [1, 62], got ${maxLength}`);
  }
  const symbols = spec === "bytes" ? null : expand(spec);
  const index = symbols && new Map(symbols.map((s, i) => [s, i + 1]));
  return { spec, maxLength: maxLength as number, casefold: casefold === true, base: symbols ? symbols.length + 1 : 257, index };
}

let folds: Map<number, string> | null = null;

/** Python's ``casefold`` of one code point. */
function foldOne(ch: string): string {
  if (!folds) {
    folds = new Map();
    for (let i = 0; i < FOLD_RUNS.length; i += 3) {
      for (let c = FOLD_RUNS[i]; c < FOLD_RUNS[i] + FOLD_RUNS[i + 1]; c++) folds.set(c, String.fromCodePoint(c + FOLD_RUNS[i + 2]));
    }
    for (const entry of FOLD_MULTI.split("\0")) if (entry) folds.set(entry.codePointAt(0)!, Array.from(entry).slice(1).join(""));
  }
  return folds.get(ch.codePointAt(0)!) ?? ch.toLowerCase();
}

/** NFC, then (casefold, NFC) if the alphabet folds: ``Alphabet.normalise``. */
export function normalise(a: Alphabet, value: string): string {
  const text = value.normalize("NFC");
  return a.casefold ? Array.from(text, foldOne).join("").normalize("NFC") : text;
}

/** The value's symbols padded with 0 to max_length, or why it is refused (never quoting it). */
export function symbols(a: Alphabet, value: unknown): Uint16Array | string {
  if (typeof value !== "string") return `not a string (a ${typeof value})`;
  const text = normalise(a, value);
  const syms = a.index ? Array.from(text, (ch) => a.index!.get(ch) ?? 0) : Array.from(new TextEncoder().encode(text), (b) => b + 1);
  const why = `not a string of at most ${a.maxLength} symbols of ${a.spec} after NFC${a.casefold ? ", casefold" : ""}`;
  if (syms.includes(0) || syms.length > a.maxLength) return why;
  const out = new Uint16Array(a.maxLength);
  out.set(syms);
  return out;
}
