/**
 * scrypt (RFC 7914) and PBKDF2-HMAC-SHA256, synchronous and dependency-free: the
 * browser's scrypt for the install proof of work (``pow.ts``; Node uses
 * ``node:crypto``'s, ``scrypt-node.ts``).  Written against RFC 7914's vectors
 * (test/pow-vectors.json, checked in test/pow.test.ts); about 3x the time of
 * OpenSSL's per evaluation in V8 (12 ms against 4 ms at N=2048, r=8 on the 2-core
 * build machine, 2026-12-04), with no package added to the bundle.
 *
 * @example
 *   toHex(scrypt(new Uint8Array(0), new Uint8Array(0), 16, 1, 1, 8))  // "77d6576238657b20"
 */

import { hmacSha256 } from "./sha256.js";

/** PBKDF2-HMAC-SHA256(password, salt, c, dkLen) (RFC 8018 §5.2). */
export function pbkdf2Sha256(password: Uint8Array, salt: Uint8Array, c: number, dkLen: number): Uint8Array {
  const out = new Uint8Array(dkLen);
  const block = new Uint8Array(salt.length + 4);
  block.set(salt);
  for (let i = 1, at = 0; at < dkLen; i++, at += 32) {
    block[salt.length] = i >>> 24; block[salt.length + 1] = i >>> 16;
    block[salt.length + 2] = i >>> 8; block[salt.length + 3] = i;
    let u = hmacSha256(password, block);
    const t = u.slice();
    for (let j = 1; j < c; j++) {
      u = hmacSha256(password, u);
      for (let k = 0; k < 32; k++) t[k] ^= u[k];
    }
    out.set(t.subarray(0, Math.min(32, dkLen - at)), at);
  }
  return out;
}

const R = (a: number, b: number): number => (a << b) | (a >>> (32 - b));

/** Salsa20/8 core (RFC 7914 §3) of the 16 words at ``B[b..b+16)``, into ``out[o..o+16)``. */
function salsa8(B: Uint32Array, b: number, out: Uint32Array, o: number): void {
  const j0 = B[b], j1 = B[b + 1], j2 = B[b + 2], j3 = B[b + 3], j4 = B[b + 4], j5 = B[b + 5];
  const j6 = B[b + 6], j7 = B[b + 7], j8 = B[b + 8], j9 = B[b + 9], j10 = B[b + 10];
  const j11 = B[b + 11], j12 = B[b + 12], j13 = B[b + 13], j14 = B[b + 14], j15 = B[b + 15];
  let x0 = j0, x1 = j1, x2 = j2, x3 = j3, x4 = j4, x5 = j5, x6 = j6, x7 = j7;
  let x8 = j8, x9 = j9, x10 = j10, x11 = j11, x12 = j12, x13 = j13, x14 = j14, x15 = j15;
  for (let i = 0; i < 8; i += 2) {
    x4 ^= R(x0 + x12 | 0, 7); x8 ^= R(x4 + x0 | 0, 9); x12 ^= R(x8 + x4 | 0, 13); x0 ^= R(x12 + x8 | 0, 18);
    x9 ^= R(x5 + x1 | 0, 7); x13 ^= R(x9 + x5 | 0, 9); x1 ^= R(x13 + x9 | 0, 13); x5 ^= R(x1 + x13 | 0, 18);
    x14 ^= R(x10 + x6 | 0, 7); x2 ^= R(x14 + x10 | 0, 9); x6 ^= R(x2 + x14 | 0, 13); x10 ^= R(x6 + x2 | 0, 18);
    x3 ^= R(x15 + x11 | 0, 7); x7 ^= R(x3 + x15 | 0, 9); x11 ^= R(x7 + x3 | 0, 13); x15 ^= R(x11 + x7 | 0, 18);
    x1 ^= R(x0 + x3 | 0, 7); x2 ^= R(x1 + x0 | 0, 9); x3 ^= R(x2 + x1 | 0, 13); x0 ^= R(x3 + x2 | 0, 18);
    x6 ^= R(x5 + x4 | 0, 7); x7 ^= R(x6 + x5 | 0, 9); x4 ^= R(x7 + x6 | 0, 13); x5 ^= R(x4 + x7 | 0, 18);
    x11 ^= R(x10 + x9 | 0, 7); x8 ^= R(x11 + x10 | 0, 9); x9 ^= R(x8 + x11 | 0, 13); x10 ^= R(x9 + x8 | 0, 18);
    x12 ^= R(x15 + x14 | 0, 7); x13 ^= R(x12 + x15 | 0, 9); x14 ^= R(x13 + x12 | 0, 13); x15 ^= R(x14 + x13 | 0, 18);
  }
  out[o] = x0 + j0; out[o + 1] = x1 + j1; out[o + 2] = x2 + j2; out[o + 3] = x3 + j3;
  out[o + 4] = x4 + j4; out[o + 5] = x5 + j5; out[o + 6] = x6 + j6; out[o + 7] = x7 + j7;
  out[o + 8] = x8 + j8; out[o + 9] = x9 + j9; out[o + 10] = x10 + j10; out[o + 11] = x11 + j11;
  out[o + 12] = x12 + j12; out[o + 13] = x13 + j13; out[o + 14] = x14 + j14; out[o + 15] = x15 + j15;
}

/** scryptBlockMix (RFC 7914 §4): ``B`` (2r 16-word blocks) -> ``Y``; ``X`` is scratch. */
function blockMix(B: Uint32Array, Y: Uint32Array, X: Uint32Array, r: number): void {
  X.set(B.subarray((2 * r - 1) * 16, 2 * r * 16));
  for (let i = 0; i < 2 * r; i++) {
    for (let k = 0; k < 16; k++) X[k] ^= B[i * 16 + k];
    // Y_0, Y_2, ... first, then Y_1, Y_3, ...
    const o = ((i & 1) * r + (i >>> 1)) * 16;
    salsa8(X, 0, Y, o);
    X.set(Y.subarray(o, o + 16));
  }
}

/** scryptROMix (RFC 7914 §5) of the 32r words ``B`` in place. */
function roMix(B: Uint32Array, n: number, r: number): void {
  const words = 32 * r;
  const V = new Uint32Array(words * n);
  const Y = new Uint32Array(words);
  const X = new Uint32Array(16);
  for (let i = 0; i < n; i++) {
    V.set(B, i * words);
    blockMix(B, Y, X, r);
    B.set(Y);
  }
  for (let i = 0; i < n; i++) {
    const j = B[words - 16] & (n - 1);   // Integerify: the last block's first word (N <= 2^32)
    for (let k = 0, v = j * words; k < words; k++) B[k] ^= V[v + k];
    blockMix(B, Y, X, r);
    B.set(Y);
  }
}

/** scrypt(password, salt, N, r, p, dkLen) (RFC 7914 §6); throws naming a bad parameter. */
export function scrypt(password: Uint8Array, salt: Uint8Array, n: number, r: number, p: number, dkLen = 32): Uint8Array {
  if (!Number.isInteger(n) || n < 2 || n > 2 ** 24 || (n & (n - 1)) !== 0) throw new RangeError(`scrypt N must be a power of two in [2, 2^24], got ${n}`);
  if (!Number.isInteger(r) || r < 1 || r > 64) throw new RangeError(`scrypt r must be in [1, 64], got ${r}`);
  if (!Number.isInteger(p) || p < 1 || p > 64) throw new RangeError(`scrypt p must be in [1, 64], got ${p}`);
  const bytes = pbkdf2Sha256(password, salt, 1, p * 128 * r);
  const words = 32 * r;
  const B = new Uint32Array(words);
  for (let i = 0; i < p; i++) {
    const base = i * 128 * r;
    for (let k = 0; k < words; k++) {
      const a = base + 4 * k;
      B[k] = bytes[a] | (bytes[a + 1] << 8) | (bytes[a + 2] << 16) | (bytes[a + 3] << 24);
    }
    roMix(B, n, r);
    for (let k = 0; k < words; k++) {
      const a = base + 4 * k, w = B[k];
      bytes[a] = w; bytes[a + 1] = w >>> 8; bytes[a + 2] = w >>> 16; bytes[a + 3] = w >>> 24;
    }
  }
  return pbkdf2Sha256(password, bytes, 1, dkLen);
}
