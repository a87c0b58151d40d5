/**
 * Randomness for the device path, with the semantics of Python's ``Rng``
 * (``ldp_core._rng``): exact uniform integers, never a float compared with a
 * uniform draw.  ``SystemRng`` reads the platform CSPRNG
 * (``crypto.getRandomValues``, WebCrypto in browsers and Node 20+); ``DrbgRng``
 * draws from an HMAC_DRBG exactly as ``ldp_core.memo.HmacDrbg`` does, so a
 * permanent response is the same bit for bit in both SDKs.
 *
 * @example
 *   const r = new SystemRng(); r.randrange(6) // 0..5, uniform
 */
import { hmacSha256 } from "./sha256.js";

/** What a randomiser needs (Python's ``Rng`` protocol plus ``uniform_words``). */
export interface Rng {
  /** A uniform integer in [0, 2**k), 0 <= k <= 48. */
  getrandbits(k: number): number;
  /** A uniform integer in [0, n), n >= 1 (rejection on bitLength(n) bits). */
  randrange(n: number): number;
  /** ``count`` uniform 32-bit words (Python ``uniform_words``). */
  words(count: number): Uint32Array;
  /** A uniform integer in [0, n) for any n >= 1n (Python ``randrange`` on big ints). */
  below(n: bigint): bigint;
}

/** Number of bits of a positive integer n (Python ``int.bit_length``). */
export function bitLength(n: number): number {
  let bits = 0;
  while (n >= 1) { n = Math.floor(n / 2); bits++; }
  return bits;
}

function checkBits(k: number): void {
  if (!Number.isInteger(k) || k < 0 || k > 48) throw new RangeError(`getrandbits needs 0 <= k <= 48, got ${k}`);
}

function checkRange(n: number): void {
  if (!Number.isInteger(n) || n < 1 || n > 2 ** 47) throw new RangeError(`randrange needs an integer n >= 1, got ${n}`);
}

function rejection(rng: Rng, n: number): number {
  checkRange(n);
  const bits = bitLength(n);
  for (;;) {
    const r = rng.getrandbits(bits);
    if (r < n) return r;
  }
}

type Crypto = { getRandomValues<T extends ArrayBufferView>(array: T): T };

function platformCrypto(): Crypto {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (!c || typeof c.getRandomValues !== "function") {
    throw new Error("no crypto.getRandomValues: the SDK needs WebCrypto (browsers, Node 20+)");
  }
  return c;
}

const POOL = 2048;

/** The OS CSPRNG through WebCrypto, buffered (one getRandomValues per 8 KiB). */
export class SystemRng implements Rng {
  readonly #crypto = platformCrypto();
  readonly #pool = new Uint32Array(POOL);
  #at = POOL;

  #word(): number {
    if (this.#at === POOL) { this.#crypto.getRandomValues(this.#pool); this.#at = 0; }
    return this.#pool[this.#at++];
  }

  getrandbits(k: number): number {
    checkBits(k);
    if (k === 0) return 0;
    if (k <= 32) return k === 32 ? this.#word() : this.#word() >>> (32 - k);
    return (this.#word() >>> (64 - k)) * 2 ** 32 + this.#word();
  }

  randrange(n: number): number {
    return rejection(this, n);
  }

  /** Rejection on bitLength(n) bits, as Python's ``SystemRandom.randrange``. */
  below(n: bigint): bigint {
    const bits = n.toString(2).length, count = Math.ceil(bits / 32);
    for (;;) {
      let r = 0n;
      for (let i = 0; i < count; i++) r = (r << 32n) | BigInt(this.#word());
      r >>= BigInt(32 * count - bits);
      if (r < n) return r;
    }
  }

  words(count: number): Uint32Array {
    const out = new Uint32Array(count);
    for (let at = 0; at < count; at += 16384) this.#crypto.getRandomValues(out.subarray(at, at + 16384));
    return out;
  }

  /** ``count`` uniform bytes (report ids). */
  bytes(count: number): Uint8Array {
    return this.#crypto.getRandomValues(new Uint8Array(count));
  }
}

/** HMAC_DRBG with SHA-256 (NIST SP 800-90A, no reseed), as ``ldp_core.memo.HmacDrbg``. */
export class HmacDrbg {
  #key: Uint8Array = new Uint8Array(32);
  #v: Uint8Array = new Uint8Array(32).fill(1);

  constructor(seedMaterial: Uint8Array) {
    this.#update(seedMaterial);
  }

  #update(data: Uint8Array | null): void {
    const d = data ?? new Uint8Array(0);
    this.#key = hmacSha256(this.#key, this.#v, Uint8Array.of(0), d);
    this.#v = hmacSha256(this.#key, this.#v);
    if (d.length) {
      this.#key = hmacSha256(this.#key, this.#v, Uint8Array.of(1), d);
      this.#v = hmacSha256(this.#key, this.#v);
    }
  }

  /** ``count`` pseudo-random bytes (one generate call, then the state update). */
  generate(count: number): Uint8Array {
    const out = new Uint8Array(Math.ceil(count / 32) * 32);
    for (let at = 0; at < count; at += 32) {
      this.#v = hmacSha256(this.#key, this.#v);
      out.set(this.#v, at);
    }
    this.#update(null);
    return out.subarray(0, count);
  }
}

/** An ``Rng`` over an HMAC_DRBG, consuming it exactly as Python's ``HmacDrbg`` methods. */
export class DrbgRng implements Rng {
  readonly drbg: HmacDrbg;

  constructor(seed: Uint8Array) {
    this.drbg = new HmacDrbg(seed);
  }

  /** X on k >= 1 bits from one generate call: the little-endian bytes, top bits kept. */
  #bits(k: number): bigint {
    const nbytes = (k + 7) >> 3;
    const raw = this.drbg.generate(nbytes);
    let x = 0n;
    for (let i = nbytes - 1; i >= 0; i--) x = (x << 8n) | BigInt(raw[i]);
    return x >> BigInt(8 * nbytes - k);
  }

  getrandbits(k: number): number {
    checkBits(k);
    return k ? Number(this.#bits(k)) : 0;
  }

  /**
   * An integer in [0, n) from ONE generate call, as Python's ``HmacDrbg.randrange``:
   * floor(X n / 2**k) for X on k = bitLength(n) + 64 bits (no rejection loop, so the
   * permanent level's work does not depend on the value; within 2**-64 of uniform).
   */
  randrange(n: number): number {
    checkRange(n);
    return Number(this.below(BigInt(n)));
  }

  /** ``randrange`` for any n (the Piecewise draw over D up to 2**62 and beyond). */
  below(n: bigint): bigint {
    const k = n.toString(2).length + 64;
    return (this.#bits(k) * n) >> BigInt(k);
  }

  words(count: number): Uint32Array {
    if (count === 0) return new Uint32Array(0);
    const raw = this.drbg.generate(4 * count);
    const out = new Uint32Array(count);
    const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    for (let i = 0; i < count; i++) out[i] = view.getUint32(4 * i, true);
    return out;
  }
}
