/**
 * SHA-256 and HMAC-SHA256, synchronous and dependency-free (FIPS 180-4, RFC 2104).
 *
 * WebCrypto's HMAC is asynchronous; the device path (tokens, permanent seeds,
 * HMAC_DRBG) needs many small synchronous MACs, so they are computed here.
 *
 * @example
 *   toHex(sha256(utf8("abc")))  // "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
 */

import { K as K64, PRIMES, digest, fractions } from "./sha384.js";

// FIPS 180-4 §4.2.2 and §5.3.3: SHA-256's constants are the first 32 fractional bits of the
// cube roots of the first 64 primes and of the square roots of the first 8, the high words
// of the 64-bit ones SHA-384 derives (``sha384.ts``): derived, not transcribed.
const K = K64.filter((_, i) => i % 2 === 0 && i < 128);
const IV = fractions(PRIMES.slice(0, 8), 2n).filter((_, i) => i % 2 === 0);
const W = new Uint32Array(64);

function compress(state: Uint32Array, data: Uint8Array, offset: number): void {
  for (let i = 0; i < 16; i++) {
    const j = offset + 4 * i;
    W[i] = (data[j] << 24) | (data[j + 1] << 16) | (data[j + 2] << 8) | data[j + 3];
  }
  for (let i = 16; i < 64; i++) {
    const a = W[i - 15], b = W[i - 2];
    const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
    const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
    W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
  }
  let a = state[0], b = state[1], c = state[2], d = state[3];
  let e = state[4], f = state[5], g = state[6], h = state[7];
  for (let i = 0; i < 64; i++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
  }
  state[0] += a; state[1] += b; state[2] += c; state[3] += d;
  state[4] += e; state[5] += f; state[6] += g; state[7] += h;
}

/** SHA-256 of the concatenation of ``parts``. */
export function sha256(...parts: Uint8Array[]): Uint8Array {
  return digest(parts, IV.slice(), 64, 8, compress);
}

/** HMAC-SHA256(key, concatenation of ``parts``). */
export function hmacSha256(key: Uint8Array, ...parts: Uint8Array[]): Uint8Array {
  const k = key.length > 64 ? sha256(key) : key;
  const ipad = new Uint8Array(64).fill(0x36);
  const opad = new Uint8Array(64).fill(0x5c);
  for (let i = 0; i < k.length; i++) { ipad[i] ^= k[i]; opad[i] ^= k[i]; }
  return sha256(opad, sha256(ipad, ...parts));
}

const ENCODER = new TextEncoder();

/** UTF-8 bytes of a string. */
export function utf8(text: string): Uint8Array {
  return ENCODER.encode(text);
}

/** Lower-case hex of bytes. */
export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (let i = 0; i < bytes.length; i++) out += (bytes[i] < 16 ? "0" : "") + bytes[i].toString(16);
  return out;
}

/** Bytes of a hex string (even length, [0-9a-fA-F]); throws naming the bad text. */
export function fromHex(hex: string): Uint8Array {
  if (hex.length % 2 || /[^0-9a-fA-F]/.test(hex)) throw new Error(`not a hex string: ${JSON.stringify(hex.slice(0, 80))}`);
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}
