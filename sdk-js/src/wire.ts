/**
 * The wire format of ``ldp_core.wire``: the per-epoch device token and the
 * columnar batch JSON (same bytes as Python's ``batch_json``).
 *
 * @example
 *   batchJson([{metric: "m", version: 1, epoch: 5, reportId: "00".repeat(16), token: "11".repeat(32), payload: "[3,1]"}])
 *   // '{"metric":["m"],"version":[1],"epoch":[5],"report_id":["00…"],"token":["11…"],"payload":[[3,1]]}'
 */
import { hmacSha256, toHex, utf8 } from "./sha256.js";
import { pyJsonString } from "./pyjson.js";

/** The largest batch the collector accepts. */
export const MAX_BATCH = 1000;

/**
 * One spooled report: what routes it and its payload as JSON text; never a
 * true value.  ``token`` is "" until a blind-signed token of its unit is
 * attached (``stock.ts``); ``charge`` is the epsilon it cost (refunded if it
 * is dropped before it leaves the device).
 */
export interface Row {
  reportId: string;
  metric: string;
  version: number;
  epoch: number;
  token: string;
  payload: string;
  charge?: number;
  /** The epoch length of the metric ("hour" | "day"): the token's unit (not sent). */
  period?: string;
}

/** HMAC-SHA256(secret, "metric|version|epoch"), hex (``ldp_core.wire.device_token``; the
 * collector now counts a report only with a blind-signed token, see ``tokens.ts``). */
export function deviceToken(secret: Uint8Array, metric: string, version: number, epoch: number): string {
  return toHex(hmacSha256(secret, utf8(`${metric}|${version}|${epoch}`)));
}

/** The compact columnar batch JSON of ``rows`` (``ldp_core.wire.batch_json``). */
export function batchJson(rows: readonly Row[]): string {
  const col = (f: (r: Row) => string) => "[" + rows.map(f).join(",") + "]";
  return `{"metric":${col((r) => pyJsonString(r.metric))},"version":${col((r) => String(r.version))},`
    + `"epoch":${col((r) => String(r.epoch))},"report_id":${col((r) => pyJsonString(r.reportId))},`
    + `"token":${col((r) => pyJsonString(r.token))},"payload":${col((r) => r.payload)}}`;
}
