/**
 * SHAKE-256 (FIPS 202), the XOF that ``ldp_core.mechanisms.prefix`` draws its
 * public seed vectors from.  Lanes are pairs of 32-bit words (no BigInt).
 *
 * @example
 *   toHex(shake256(utf8("abc"), 4))   // "48336660", as hashlib.shake_256(b"abc").hexdigest(4)
 */

// Round constants (low, high words), rotation offsets and lane moves of
// Keccak-f[1600], computed on first use (no work at import: tree-shakeable).
const RC: number[] = [], ROT: number[] = [], PI: number[] = [];

function tables(): void {
  // The LFSR of FIPS 202 §3.2.5: rc(t) for t = 0..167.
  let r = 1;
  const bit = (): number => { const out = r & 1; r = r & 0x80 ? ((r << 1) ^ 0x71) & 0xff : (r << 1) & 0xff; return out; };
  for (let round = 0; round < 24; round++) {
    let lo = 0, hi = 0;
    for (let j = 0; j < 7; j++) {
      if (bit()) { const pos = (1 << j) - 1; if (pos < 32) lo |= 1 << pos; else hi |= 1 << (pos - 32); }
    }
    RC.push(lo >>> 0, hi >>> 0);
  }
  for (let t = 0, x = 1, y = 0; t < 24; t++) {
    ROT[x + 5 * y] = (((t + 1) * (t + 2)) / 2) % 64;
    [x, y] = [y, (2 * x + 3 * y) % 5];
  }
  ROT[0] = 0;
  for (let x = 0; x < 5; x++) for (let y = 0; y < 5; y++) PI[x + 5 * y] = y + 5 * ((2 * x + 3 * y) % 5);
}

function keccakF(s: Uint32Array): void {
  const c = new Uint32Array(10), b = new Uint32Array(50);
  for (let round = 0; round < 24; round++) {
    for (let x = 0; x < 10; x++) c[x] = s[x] ^ s[x + 10] ^ s[x + 20] ^ s[x + 30] ^ s[x + 40];
    for (let x = 0; x < 5; x++) {
      const n = ((x + 1) % 5) * 2, p = ((x + 4) % 5) * 2;
      const lo = c[p] ^ ((c[n] << 1) | (c[n + 1] >>> 31)), hi = c[p + 1] ^ ((c[n + 1] << 1) | (c[n] >>> 31));
      for (let y = 0; y < 50; y += 10) { s[y + 2 * x] ^= lo; s[y + 2 * x + 1] ^= hi; }
    }
    // rho and pi: lane i rotated by ROT[i] goes to PI[i].
    for (let i = 0; i < 25; i++) {
      const lo = s[2 * i], hi = s[2 * i + 1], r = ROT[i], to = 2 * PI[i];
      if (r === 0) { b[to] = lo; b[to + 1] = hi; } else if (r < 32) {
        b[to] = (lo << r) | (hi >>> (32 - r)); b[to + 1] = (hi << r) | (lo >>> (32 - r));
      } else if (r === 32) { b[to] = hi; b[to + 1] = lo; } else {
        const q = r - 32;
        b[to] = (hi << q) | (lo >>> (32 - q)); b[to + 1] = (lo << q) | (hi >>> (32 - q));
      }
    }
    for (let y = 0; y < 25; y += 5) {
      for (let x = 0; x < 5; x++) {
        const i = 2 * (y + x), j = 2 * (y + ((x + 1) % 5)), k = 2 * (y + ((x + 2) % 5));
        s[i] = b[i] ^ (~b[j] & b[k]); s[i + 1] = b[i + 1] ^ (~b[j + 1] & b[k + 1]);
      }
    }
    s[0] ^= RC[2 * round]; s[1] ^= RC[2 * round + 1];
  }
}

/** SHAKE-256(message), ``length`` bytes (rate 136 bytes, domain bits 1111). */
export function shake256(message: Uint8Array, length: number): Uint8Array {
  if (!RC.length) tables();
  const rate = 136, s = new Uint32Array(50);
  const padded = new Uint8Array(Math.floor(message.length / rate) * rate + rate);
  padded.set(message);
  padded[message.length] ^= 0x1f;
  padded[padded.length - 1] ^= 0x80;
  const absorb = new DataView(padded.buffer);
  for (let at = 0; at < padded.length; at += rate) {
    for (let i = 0; i < rate / 4; i++) s[i] ^= absorb.getUint32(at + 4 * i, true);
    keccakF(s);
  }
  const out = new Uint8Array(length);
  for (let at = 0; ; ) {
    for (let i = 0; i < rate && at < length; i++, at++) out[at] = (s[i >> 2] >>> (8 * (i & 3))) & 0xff;
    if (at >= length) return out;
    keccakF(s);
  }
}
