/**
 * Install registration, the device half (mirrors ``client_sdk/_register.py``; the spec is
 * docs/token-protocol.md "Install registration").  ``registerInstall`` makes sure an install
 * key is registered with the collector, paying the proof of work (``pow.ts``) only when the
 * collector does not know the install yet:
 *
 *   1. ``POST /v1/installs`` with no proof: 200 is registered already (no work);
 *   2. else (403 ``install_unregistered``) ``POST /v1/installs/challenge``, ``solvePow``, and
 *      ``POST /v1/installs`` with the nonce: 201 (or 200).  An expired or refused challenge
 *      is asked again once.
 *
 * Never throws: the outcome is ``registered``, ``busy`` (network, 429, 5xx: later, after
 * ``retryAfter`` if given) or ``refused`` (a final 4xx, or ``pow_too_costly``: more work
 * than ``MAX_BITS`` / ``MAX_MEMORY_BYTES``, which a device refuses to do).
 *
 * @example
 *   const r = await registerInstall(http, installKey, { scrypt: nodeScrypt });  // Node
 *   if (r.status === "registered") { ... POST /v1/tokens ... }
 */

import { checkParams, installDigest, solvePow, type PowParams, type ScryptFn } from "./pow.js";
import type { Answer, Http } from "./stock.js";
import { unb64url } from "./tokens.js";

/** The most work a device accepts: 2^20 evaluations of at most 64 MiB (as the Python SDK). */
export const MAX_BITS = 20;
export const MAX_MEMORY_BYTES = 64 * 2 ** 20;
const AGAIN = new Set(["challenge_expired", "challenge_invalid"]);

export interface Registration {
  status: "registered" | "busy" | "refused";
  code?: string;
  retryAfter?: number;
}

export interface RegisterOptions {
  /** The scrypt: ``nodeScrypt`` under Node, the pure TypeScript one by default. */
  scrypt?: ScryptFn;
  /** Replaces ``solvePow`` (tests count the solves). */
  solve?: (challenge: Uint8Array, digest: Uint8Array, params: PowParams) => Promise<number | null>;
}

function code(a: Answer): string | undefined {
  try {
    const c = (JSON.parse(a.body) as { code?: unknown }).code;
    return typeof c === "string" && c.length <= 64 ? c : undefined;
  } catch {
    return undefined;
  }
}

function notNow(a: Answer): Registration {
  const c = code(a) ?? `http_${a.status}`;
  if ([408, 425, 429].includes(a.status) || a.status >= 500) {
    const wait = Number(a.retryAfter);
    return { status: "busy", code: c, ...(a.retryAfter !== null && Number.isFinite(wait) ? { retryAfter: wait } : {}) };
  }
  return { status: "refused", code: c };
}

const JSON_TYPE = { "Content-Type": "application/json" };

/** Register ``install`` (the ``LDP-Install-Key`` value) through ``http``; see the module doc. */
export async function registerInstall(http: Http, install: string, options: RegisterOptions = {}): Promise<Registration> {
  try {
    let a = await http("POST", "/v1/installs", "{}", { ...JSON_TYPE, "LDP-Install-Key": install });
    if (a.status === 200 || a.status === 201) return { status: "registered" };
    if (a.status !== 403 || code(a) !== "install_unregistered") return notNow(a);
    const digest = installDigest(unb64url(install));
    const solve = options.solve ?? ((c, d, p) => solvePow(c, d, p, { scrypt: options.scrypt }));
    for (let round = 0; round < 2; round++) {
      a = await http("POST", "/v1/installs/challenge", "{}", JSON_TYPE);
      if (a.status !== 200) return notNow(a);
      const body = JSON.parse(a.body) as { challenge: string; pow: PowParams & { alg?: string } };
      const params = checkParams({ n: body.pow.n, r: body.pow.r, p: body.pow.p, bits: body.pow.bits });
      if (body.pow.alg !== "scrypt" || params.bits > MAX_BITS || 128 * params.n * params.r * params.p > MAX_MEMORY_BYTES) {
        return { status: "refused", code: "pow_too_costly" };
      }
      const nonce = await solve(unb64url(body.challenge), digest, params);
      if (nonce === null) return { status: "refused", code: "pow_unsolved" };
      a = await http("POST", "/v1/installs", JSON.stringify({ challenge: body.challenge, nonce }),
        { ...JSON_TYPE, "LDP-Install-Key": install });
      if (a.status === 200 || a.status === 201) return { status: "registered" };
      if (!AGAIN.has(code(a) ?? "")) return notNow(a);
    }
    return notNow(a);
  } catch (e) {
    return { status: "busy", code: (e as Error)?.name ?? "Error" };
  }
}
