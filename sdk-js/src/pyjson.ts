/**
 * Python's JSON text, byte for byte: ``json.dumps`` string escaping
 * (``ensure_ascii``), ``repr(float)``, ``float.hex()``; and the canonical
 * parameters of a mechanism whose sha256 is the Python SDK's fingerprint.
 *
 * @example
 *   pyFloatRepr(1) === "1.0"; pyFloatRepr(1e-5) === "1e-05"; pyFloatHex(12.5) === "0x1.9000000000000p+3"
 */

/** ``json.dumps(text)`` (ensure_ascii: every char outside space..~ escaped). */
export function pyJsonString(text: string): string {
  return JSON.stringify(text).replace(/[\u007f-\uffff]/g,
    (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

/** ``repr(x)`` of a finite Python float. */
export function pyFloatRepr(x: number): string {
  if (!Number.isFinite(x)) throw new RangeError(`not a finite number: ${x}`);
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const [mant, e] = x.toExponential().split("e");
  const exp = Number(e);
  const neg = mant.startsWith("-");
  const digits = mant.replace("-", "").replace(".", "");
  let s: string;
  if (exp < -4 || exp >= 16) {
    const rest = digits.length > 1 ? "." + digits.slice(1) : "";
    s = digits[0] + rest + "e" + (exp < 0 ? "-" : "+") + String(Math.abs(exp)).padStart(2, "0");
  } else if (exp >= 0) {
    s = digits.length <= exp + 1
      ? digits + "0".repeat(exp + 1 - digits.length) + ".0"
      : digits.slice(0, exp + 1) + "." + digits.slice(exp + 1);
  } else {
    s = "0." + "0".repeat(-exp - 1) + digits;
  }
  return (neg ? "-" : "") + s;
}

/** ``float.hex(x)`` of a finite number. */
export function pyFloatHex(x: number): string {
  if (!Number.isFinite(x)) throw new RangeError(`not a finite number: ${x}`);
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const sign = view.getUint32(0) >>> 31 ? "-" : "";
  const biased = (view.getUint32(0) >>> 20) & 0x7ff;
  const hi = view.getUint32(0) & 0xfffff;
  const lo = view.getUint32(4);
  const frac = hi.toString(16).padStart(5, "0") + lo.toString(16).padStart(8, "0");
  if (biased === 0 && hi === 0 && lo === 0) return `${sign}0x0.0p+0`;
  if (biased === 0) return `${sign}0x0.${frac}p-1022`;
  const exp = biased - 1023;
  return `${sign}0x1.${frac}p${exp < 0 ? "-" : "+"}${Math.abs(exp)}`;
}

/** The fields of ``Mechanism.describe()`` that Python holds as floats. */
export const FLOAT_KEYS = new Set([
  "epsilon", "epsilon_actual", "p_star", "q_star", "epsilon_requested", "epsilon_inf",
  "epsilon_inf_actual", "instantaneous_keep", "lo", "hi", "permanent_lo", "permanent_hi",
  "permanent_epsilon", "permanent_p_star", "permanent_q_star", "alpha",
]);

/** One JSON value as Python writes it; numbers are floats if ``float`` (else ints). */
export function pyJsonValue(value: unknown, float: boolean): string {
  if (value === null || value === undefined) return "null";
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "string") return pyJsonString(value);
  if (typeof value === "number") {
    if (float || !Number.isInteger(value)) return pyFloatRepr(value);
    return String(value);
  }
  if (Array.isArray(value)) return "[" + value.map((v) => pyJsonValue(v, float)).join(",") + "]";
  // A nested object (the hierarchy's ``levels``): its keys sorted too, as ``sort_keys``.
  if (typeof value === "object") return canonicalJson(value as Record<string, unknown>);
  throw new TypeError(`cannot write ${typeof value} as canonical JSON`);
}

/** ``json.dumps(obj, sort_keys=True, separators=(",", ":"))`` of an object (nested ones too). */
export function canonicalJson(obj: Record<string, unknown>): string {
  const keys = Object.keys(obj).sort();
  return "{" + keys.map((k) => pyJsonString(k) + ":" + pyJsonValue(obj[k], FLOAT_KEYS.has(k))).join(",") + "}";
}
