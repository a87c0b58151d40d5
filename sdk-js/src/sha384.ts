/**
 * SHA-384 (FIPS 180-4 §6.5: SHA-512's compression, other initial values, 48
 * bytes out), synchronous and dependency-free, for the blind RSA tokens
 * (EMSA-PSS and MGF1 with SHA-384).  The 64-bit words are BigInts (the state
 * between blocks is (hi, lo) pairs of 32-bit integers).  The round constants are derived, not transcribed: K[i] is
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
const M = (1n << 64n) - 1n;
const K64 = Array.from({ length: 80 }, (_, i) => (BigInt(K[2 * i]) << 32n) | BigInt(K[2 * i + 1]));
const rotr = (x: bigint, n: bigint): bigint => ((x >> n) | (x << (64n - n))) & M;

/** One block (the state stays [hi, lo] words for ``digest``); tokens hash a few blocks, BigInt is fast enough. */
function compress(h: Uint32Array, data: Uint8Array, off: number): void {
  const view = new DataView(data.buffer, data.byteOffset + off, 128);
  const w: bigint[] = [];
  for (let i = 0; i < 80; i++) {
    const a = w[i - 15], b = w[i - 2];
    w[i] = i < 16 ? view.getBigUint64(8 * i)
      : ((rotr(a, 1n) ^ rotr(a, 8n) ^ (a >> 7n)) + (rotr(b, 19n) ^ rotr(b, 61n) ^ (b >> 6n)) + w[i - 16] + w[i - 7]) & M;
  }
  const s = Array.from({ length: 8 }, (_, i) => (BigInt(h[2 * i]) << 32n) | BigInt(h[2 * i + 1]));
  let [a, b, c, d, e, f, g, hh] = s;
  for (let i = 0; i < 80; i++) {
    const t1 = hh + (rotr(e, 14n) ^ rotr(e, 18n) ^ rotr(e, 41n)) + ((e & f) ^ (~e & g)) + K64[i] + w[i];
    const t2 = (rotr(a, 28n) ^ rotr(a, 34n) ^ rotr(a, 39n)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g; g = f; f = e; e = (d + t1) & M; d = c; c = b; b = a; a = (t1 + t2) & M;
  }
  [a, b, c, d, e, f, g, hh].forEach((x, i) => {
    const y = (s[i] + x) & M;
    h[2 * i] = Number(y >> 32n);
    h[2 * i + 1] = Number(y & 0xffffffffn);
  });
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
