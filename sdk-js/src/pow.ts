/**
 * The install proof of work, the device half (mirrors ``ldp_core/pow.py``; the spec is
 * docs/token-protocol.md "Install registration"; checked against test/pow-vectors.json).
 *
 *   message = lp(DOMAIN) || lp(challenge) || lp(SHA-256(install key)) || lp(nonce, 8 bytes BE)
 *   out     = scrypt(message, DOMAIN, N, r, p, 32);  a solution has ``bits`` leading zero bits
 *
 * ``lp(x)`` is x's length as 4 bytes big-endian, then x.  The scrypt is pluggable:
 * ``scrypt.ts`` (pure TypeScript, the browser's; it runs on the calling thread, so
 * ``solvePow`` yields to the event loop every ``yieldEvery`` evaluations) or Node's
 * ``nodeScrypt`` (``scrypt-node.ts``: OpenSSL in libuv's thread pool, off the event loop).
 *
 * @example
 *   const digest = installDigest(installKeyBytes);
 *   const nonce = await solvePow(challenge, digest, { n: 2048, r: 8, p: 1, bits: 8 });
 *   // POST /v1/installs {"challenge": <base64url>, "nonce": nonce}
 */

import { scrypt } from "./scrypt.js";
import { sha256, utf8 } from "./sha256.js";

/** scrypt's N (a power of two), r, p, and the leading zero bits a solution needs. */
export interface PowParams { n: number; r: number; p: number; bits: number }

/** An scrypt: synchronous (``scrypt.ts``) or asynchronous (``nodeScrypt``). */
export type ScryptFn = (password: Uint8Array, salt: Uint8Array, n: number, r: number, p: number,
  dkLen: number) => Uint8Array | Promise<Uint8Array>;

export const DOMAIN = utf8("ldp-install-pow/1");
/** Largest nonce sent: JSON numbers are exact below 2^53. */
export const MAX_NONCE = 2 ** 53 - 1;

/** The params, checked as ``ldp_core.pow.PowParams`` checks them; throws naming the bad one. */
export function checkParams(p: PowParams): PowParams {
  const { n, r, bits } = p;
  if (!Number.isInteger(n) || n < 2 || n > 2 ** 20 || (n & (n - 1)) !== 0) throw new RangeError(`scrypt N must be a power of two in [2, 2^20], got ${n}`);
  if (!Number.isInteger(r) || r < 1 || r > 32) throw new RangeError(`scrypt r must be in [1, 32], got ${r}`);
  if (!Number.isInteger(p.p) || p.p < 1 || p.p > 16) throw new RangeError(`scrypt p must be in [1, 16], got ${p.p}`);
  if (!Number.isInteger(bits) || bits < 0 || bits > 40) throw new RangeError(`bits must be in [0, 40], got ${bits}`);
  return p;
}

/** SHA-256 of the install key's 32 raw bytes: what a proof is bound to. */
export function installDigest(installKey: Uint8Array): Uint8Array {
  return sha256(installKey);
}

function lp(out: Uint8Array, at: number, part: Uint8Array): number {
  const n = part.length;
  out[at] = n >>> 24; out[at + 1] = n >>> 16; out[at + 2] = n >>> 8; out[at + 3] = n;
  out.set(part, at + 4);
  return at + 4 + n;
}

/** The scrypt password of one guess. */
export function powMessage(challenge: Uint8Array, digest: Uint8Array, nonce: number): Uint8Array {
  if (!Number.isSafeInteger(nonce) || nonce < 0) throw new RangeError(`nonce must be an integer in [0, 2^53), got ${nonce}`);
  const nonceBytes = new Uint8Array(8);
  let rest = nonce;
  for (let i = 7; i >= 0; i--) { nonceBytes[i] = rest % 256; rest = Math.floor(rest / 256); }
  const out = new Uint8Array(16 + DOMAIN.length + challenge.length + digest.length + 8);
  lp(out, lp(out, lp(out, lp(out, 0, DOMAIN), challenge), digest), nonceBytes);
  return out;
}

/** Zero bits before the first one bit, most significant bit of bytes[0] first. */
export function leadingZeroBits(bytes: Uint8Array): number {
  let bits = 0;
  for (const b of bytes) {
    if (b === 0) { bits += 8; continue; }
    return bits + Math.clz32(b) - 24;
  }
  return bits;
}

/** The 32-byte scrypt output of one guess. */
export async function powHash(challenge: Uint8Array, digest: Uint8Array, nonce: number, params: PowParams,
  fn: ScryptFn = scrypt): Promise<Uint8Array> {
  const { n, r, p } = checkParams(params);
  return await fn(powMessage(challenge, digest, nonce), DOMAIN, n, r, p, 32);
}

/** Whether ``nonce`` solves the challenge for this install digest (one evaluation). */
export async function verifyPow(challenge: Uint8Array, digest: Uint8Array, nonce: number, params: PowParams,
  fn: ScryptFn = scrypt): Promise<boolean> {
  return leadingZeroBits(await powHash(challenge, digest, nonce, params, fn)) >= params.bits;
}

export interface SolveOptions {
  /** The scrypt to use (default: the pure TypeScript one). */
  scrypt?: ScryptFn;
  /** First nonce tried (default 0). */
  start?: number;
  /** Give up (null) after this many guesses (default: no limit below 2^53). */
  maxTries?: number;
  /** Yield to the event loop after this many evaluations (default 4: ~40 ms in a browser). */
  yieldEvery?: number;
}

/** The first nonce from ``start`` whose hash has ``bits`` leading zero bits, or null. */
export async function solvePow(challenge: Uint8Array, digest: Uint8Array, params: PowParams,
  options: SolveOptions = {}): Promise<number | null> {
  const fn = options.scrypt ?? scrypt;
  const start = options.start ?? 0;
  const end = Math.min(MAX_NONCE + 1, start + (options.maxTries ?? MAX_NONCE + 1));
  const every = Math.max(1, options.yieldEvery ?? 4);
  checkParams(params);
  for (let nonce = start, k = 1; nonce < end; nonce++, k++) {
    if (await verifyPow(challenge, digest, nonce, params, fn)) return nonce;
    if (k % every === 0) await new Promise((resolve) => setTimeout(resolve, 0));
  }
  return null;
}
