/**
 * SHA-384 (FIPS 180-4 §6.5: SHA-512's compression, other initial values, 48
 * bytes out), synchronous and dependency-free, for the blind RSA tokens
 * (EMSA-PSS and MGF1 with SHA-384).  64-bit words are (hi, lo) pairs of
 * 32-bit integers, added as exact doubles (the carry is the quotient by 2**32).  The round constants are derived, not transcribed: K[i] is
 * the first 64 fractional bits of the cube root of the i-th prime, and the
 * initial values those of the square roots of the 9th to 16th primes.
 *
 * @example
 *   toHex(sha384(utf8("abc"))).slice(0, 16)  // "cb00753f45a35e8b"
 */

function primes(count: number): bigint[] {
  const out: bigint[] = [];
  for (let n = 2; out.length < count; n++) if (out.every((p) => BigInt(n) % p !== 0n)) out.push(BigInt(n));
  return out;
}

/** floor(x ** (1/k)) for a bigint x >= 1 (Newton's method from above). */
function iroot(x: bigint, k: bigint): bigint {
  let y = 1n << BigInt(Math.ceil(x.toString(2).length / Number(k)) + 1);
  for (;;) {
    const z = ((k - 1n) * y + x / y ** (k - 1n)) / k;
    if (z >= y) return y;
    y = z;
  }
}

/** First 64 fractional bits of the k-th root of each prime, as [hi, lo, hi, lo, ...]. */
export function fractions(ps: bigint[], k: bigint): Uint32Array {
  const out = new Uint32Array(2 * ps.length);
  ps.forEach((p, i) => {
    const f = BigInt.asUintN(64, iroot(p << (64n * k), k));
    out[2 * i] = Number(f >> 32n);
    out[2 * i + 1] = Number(f & 0xffffffffn);
  });
  return out;
}

export const PRIMES = primes(80);
/** SHA-512/384's round constants; SHA-256's are their high words (``sha256.ts``). */
export const K = fractions(PRIMES, 3n);
const H384 = fractions(PRIMES.slice(8, 16), 2n);
const W = new Uint32Array(160);

/** The high word of rotr((h, l), n) for 0 < n < 64, n != 32; its low word is ``rh(l, h, n)``. */
const rh = (h: number, l: number, n: number): number =>
  n < 32 ? (h >>> n) | (l << (32 - n)) : (l >>> (n - 32)) | (h << (64 - n));

/** A word of rotr(a) ^ rotr(b) ^ rotr(c), or ^ shr(c) (the high word: ``shr``); the low word swaps h and l. */
const sig = (h: number, l: number, a: number, b: number, c: number, shr?: 1): number =>
  rh(h, l, a) ^ rh(h, l, b) ^ (shr ? h >>> c : rh(h, l, c));

/** Store the 64-bit sum hi * 2**32 + lo (exact doubles) at words [j, j + 1], mod 2**64. */
function put(dst: Uint32Array, j: number, hi: number, lo: number): void {
  dst[j + 1] = lo;
  dst[j] = hi + Math.floor(lo / 0x100000000);
}

function compress(h: Uint32Array, data: Uint8Array, off: number): void {
  const view = new DataView(data.buffer, data.byteOffset + off, 128);
  for (let i = 0; i < 32; i++) W[i] = view.getUint32(4 * i);
  for (let j = 32; j < 160; j += 2) {       // word j / 2: w[i-15] at j - 30, w[i-2] at j - 4
    const ah = W[j - 30], al = W[j - 29], bh = W[j - 4], bl = W[j - 3];
    put(W, j, sig(ah, al, 1, 8, 7, 1) + sig(bh, bl, 19, 61, 6, 1) + W[j - 32] + W[j - 14],
      (sig(al, ah, 1, 8, 7) >>> 0) + (sig(bl, bh, 19, 61, 6) >>> 0) + W[j - 31] + W[j - 13]);
  }
  const s = h.slice();                      // a..h as (hi, lo) pairs
  for (let j = 0; j < 160; j += 2) {
    const ah = s[0], al = s[1], eh = s[8], el = s[9];
    const t1h = s[14] + sig(eh, el, 14, 18, 41) + ((eh & s[10]) ^ (~eh & s[12])) + K[j] + W[j];
    const t1l = s[15] + (sig(el, eh, 14, 18, 41) >>> 0) + (((el & s[11]) ^ (~el & s[13])) >>> 0) + K[j + 1] + W[j + 1];
    const t2h = sig(ah, al, 28, 34, 39) + ((ah & s[2]) ^ (ah & s[4]) ^ (s[2] & s[4]));
    const t2l = (sig(al, ah, 28, 34, 39) >>> 0) + (((al & s[3]) ^ (al & s[5]) ^ (s[3] & s[5])) >>> 0);
    s.copyWithin(2, 0, 14);                 // h = g, ..., e = d, ..., b = a
    put(s, 8, s[8] + t1h, s[9] + t1l);
    put(s, 0, t1h + t2h, t1l + t2l);
  }
  for (let j = 0; j < 16; j += 2) put(h, j, h[j] + s[j], h[j + 1] + s[j + 1]);
}

/** SHA-384 of the concatenation of ``parts``. */
export function sha384(...parts: Uint8Array[]): Uint8Array {
  return digest(parts, H384.slice(), 128, 12, compress);
}

/**
 * FIPS 180-4 §5.1 padding and the Merkle-Damgard loop, shared with SHA-256: ``block`` bytes per
 * block (its length field is block / 8 bytes), ``words`` 32-bit words of ``state`` out.
 */
export function digest(parts: Uint8Array[], state: Uint32Array, block: number, words: number,
                       step: (h: Uint32Array, data: Uint8Array, off: number) => void): Uint8Array {
  let total = 0;
  for (const p of parts) total += p.length;
  const padded = (total + 1 + block / 8 + block - 1) & -block;
  const buf = new Uint8Array(padded);
  let at = 0;
  for (const p of parts) { buf.set(p, at); at += p.length; }
  buf[total] = 0x80;
  const view = new DataView(buf.buffer);
  view.setUint32(padded - 8, Math.floor(total / 0x20000000));
  view.setUint32(padded - 4, (total << 3) >>> 0);
  for (let off = 0; off < padded; off += block) step(state, buf, off);
  const out = new Uint8Array(4 * words);
  const ov = new DataView(out.buffer);
  for (let i = 0; i < words; i++) ov.setUint32(4 * i, state[i]);
  return out;
}
