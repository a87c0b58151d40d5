/**
 * SHA-384 (FIPS 180-4 §6.5: SHA-512's compression, other initial values, 48
 * bytes out), synchronous and dependency-free, for the blind RSA tokens
 * (EMSA-PSS and MGF1 with SHA-384).  64-bit words are (hi, lo) pairs of
 * 32-bit integers.  The round constants are derived, not transcribed: K[i] is
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

function compress(h: Uint32Array, data: Uint8Array, off: number): void {
  const view = new DataView(data.buffer, data.byteOffset + off, 128);
  for (let i = 0; i < 32; i++) W[i] = view.getUint32(4 * i);
  for (let i = 16; i < 80; i++) {
    const ah = W[2 * i - 30], al = W[2 * i - 29];     // w[i-15]
    const bh = W[2 * i - 4], bl = W[2 * i - 3];       // w[i-2]
    // s0 = rotr1 ^ rotr8 ^ shr7;  s1 = rotr19 ^ rotr61 ^ shr6
    const s0h = ((ah >>> 1) | (al << 31)) ^ ((ah >>> 8) | (al << 24)) ^ (ah >>> 7);
    const s0l = ((al >>> 1) | (ah << 31)) ^ ((al >>> 8) | (ah << 24)) ^ ((al >>> 7) | (ah << 25));
    const s1h = ((bh >>> 19) | (bl << 13)) ^ ((bl >>> 29) | (bh << 3)) ^ (bh >>> 6);
    const s1l = ((bl >>> 19) | (bh << 13)) ^ ((bh >>> 29) | (bl << 3)) ^ ((bl >>> 6) | (bh << 26));
    const lo = (s0l >>> 0) + (s1l >>> 0) + W[2 * i - 31] + W[2 * i - 13];
    W[2 * i + 1] = lo;
    W[2 * i] = (s0h >>> 0) + (s1h >>> 0) + W[2 * i - 32] + W[2 * i - 14] + Math.floor(lo / 0x100000000);
  }
  let ah = h[0], al = h[1], bh = h[2], bl = h[3], ch = h[4], cl = h[5], dh = h[6], dl = h[7];
  let eh = h[8], el = h[9], fh = h[10], fl = h[11], gh = h[12], gl = h[13], hh = h[14], hl = h[15];
  for (let i = 0; i < 80; i++) {
    // S1 = rotr14 ^ rotr18 ^ rotr41;  S0 = rotr28 ^ rotr34 ^ rotr39
    const S1h = ((eh >>> 14) | (el << 18)) ^ ((eh >>> 18) | (el << 14)) ^ ((el >>> 9) | (eh << 23));
    const S1l = ((el >>> 14) | (eh << 18)) ^ ((el >>> 18) | (eh << 14)) ^ ((eh >>> 9) | (el << 23));
    const chh = (eh & fh) ^ (~eh & gh), chl = (el & fl) ^ (~el & gl);
    const t1l = hl + (S1l >>> 0) + (chl >>> 0) + K[2 * i + 1] + W[2 * i + 1];
    const t1h = hh + (S1h >>> 0) + (chh >>> 0) + K[2 * i] + W[2 * i] + Math.floor(t1l / 0x100000000);
    const S0h = ((ah >>> 28) | (al << 4)) ^ ((al >>> 2) | (ah << 30)) ^ ((al >>> 7) | (ah << 25));
    const S0l = ((al >>> 28) | (ah << 4)) ^ ((ah >>> 2) | (al << 30)) ^ ((ah >>> 7) | (al << 25));
    const mjh = (ah & bh) ^ (ah & ch) ^ (bh & ch), mjl = (al & bl) ^ (al & cl) ^ (bl & cl);
    const t2l = (S0l >>> 0) + (mjl >>> 0);
    const t2h = (S0h >>> 0) + (mjh >>> 0) + Math.floor(t2l / 0x100000000);
    hh = gh; hl = gl; gh = fh; gl = fl; fh = eh; fl = el;
    const el2 = dl + (t1l >>> 0);
    eh = (dh + t1h + Math.floor(el2 / 0x100000000)) >>> 0; el = el2 >>> 0;
    dh = ch; dl = cl; ch = bh; cl = bl; bh = ah; bl = al;
    const al2 = (t1l >>> 0) + (t2l >>> 0);
    ah = (t1h + t2h + Math.floor(al2 / 0x100000000)) >>> 0; al = al2 >>> 0;
  }
  const v = [ah, al, bh, bl, ch, cl, dh, dl, eh, el, fh, fl, gh, gl, hh, hl];
  for (let i = 0; i < 16; i += 2) {
    const lo = h[i + 1] + (v[i + 1] >>> 0);
    h[i + 1] = lo;
    h[i] = h[i] + (v[i] >>> 0) + Math.floor(lo / 0x100000000);
  }
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
