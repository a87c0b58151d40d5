/**
 * The memoisation context and ledger keys, aligned with the Python SDK
 * (``client_sdk._device``): context = "<name>|<fingerprint>", fingerprint =
 * sha256 hex of the canonical JSON of the spec's params minus the descriptive
 * fields, plus the spec's ``lo`` and ``hi``.  Change only here to re-align.
 *
 * @example
 *   memoContext(spec)  // "app.theme|3f2a…"
 */
import { canonicalJson, pyFloatRepr } from "./pyjson.js";
import { hmacSha256, sha256, toHex, utf8 } from "./sha256.js";
import type { Spec } from "./mechanisms.js";

/** Fields of ``describe()`` that only restate the channel (``client_sdk._device.DESCRIPTIVE``). */
export const DESCRIPTIVE = new Set(["epsilon_actual", "epsilon_inf_actual", "epsilon_requested"]);

/** ``mechanism_fingerprint(spec)``. */
export function mechanismFingerprint(spec: Spec): string {
  const params: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(spec.params ?? {})) if (!DESCRIPTIVE.has(k)) params[k] = v;
  params.lo = spec.kind === "numeric" ? spec.lo ?? null : null;
  params.hi = spec.kind === "numeric" ? spec.hi ?? null : null;
  return toHex(sha256(utf8(canonicalJson(params))));
}

/** ``memo_context(spec)``: the permanent-response context of a memoised metric. */
export function memoContext(spec: Spec, fingerprint?: string): string {
  return `${spec.name}|${fingerprint ?? mechanismFingerprint(spec)}`;
}

/** ``DeviceState.value_key``: HMAC(secret, "lifetime|name|fingerprint|repr(value)"), hex. */
export function valueKey(secret: Uint8Array, metric: string, fingerprint: string, value: number, numeric: boolean): string {
  const text = numeric ? pyFloatRepr(value) : String(value);
  return toHex(hmacSha256(secret, utf8(`lifetime|${metric}|${fingerprint}|${text}`)));
}
