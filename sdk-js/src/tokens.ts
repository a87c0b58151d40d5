/**
 * Report tokens on the device: the device half of blind RSA (RFC 9474,
 * RSABSSA-SHA384-PSS-Deterministic) in the Privacy Pass type 0x0002 layout,
 * byte for byte as ``ldp_core.tokens`` (docs/token-protocol.md, "The protocol, precisely").
 *
 * 1. ``prepare``: a 32-byte nonce, the token input of the unit, an epoch of
 *    one length (period "hour" | "day", epoch index), e.g. ("day", 20423):
 *    (``0x0002 || nonce || unitDigest || keyId``), EMSA-PSS encoded with a
 *    fresh 48-byte salt and blinded by a random r: the issuer sees only
 *    ``m * r^e mod n``;
 * 2. ``wireToken``: unblinds the issuer's answer (``* r^-1 mod n``), verifies
 *    it as RSASSA-PSS, and gives ``base64url(nonce || signature)``.
 *
 * Big integers are ``BigInt``; randomness is the platform CSPRNG
 * (``crypto.getRandomValues``) unless a test passes fixed bytes.
 *
 * @example
 *   const p = prepare(key, "day", 20423);          // store p, send b64url(p.blinded)
 *   const token = wireToken(key, p, blindSig);      // throws TokenError if it does not verify
 */
import { sha256, toHex, utf8 } from "./sha256.js";
import { sha384 } from "./sha384.js";

export const TOKEN_TYPE = 0x0002;
export const NONCE_BYTES = 32;
/** sLen of RSABSSA-SHA384-PSS-*: the SHA-384 output length. */
export const SALT_BYTES = 48;
const HASH_BYTES = 48;

export class TokenError extends Error {
  override name = "TokenError";
}

/** The issuer's RSA public key; ``keyId`` = SHA-256(I2OSP(n, k) || I2OSP(e, 4)). */
export interface PublicKey { n: bigint; e: bigint; k: number; keyId: Uint8Array }

export function os2ip(b: Uint8Array): bigint {
  let x = 0n;
  for (const byte of b) x = (x << 8n) | BigInt(byte);
  return x;
}

export function i2osp(x: bigint, length: number): Uint8Array {
  const out = new Uint8Array(length);
  for (let i = length - 1; i >= 0; i--) { out[i] = Number(x & 0xffn); x >>= 8n; }
  if (x) throw new TokenError(`integer too large for ${length} bytes`);
  return out;
}

export function modPow(base: bigint, exp: bigint, n: bigint): bigint {
  let result = 1n;
  base %= n;
  for (; exp > 0n; exp >>= 1n) {
    if (exp & 1n) result = (result * base) % n;
    base = (base * base) % n;
  }
  return result;
}

/** (g, x) with a*x = g mod n, g = gcd(a, n) (extended Euclid). */
function egcd(a: bigint, n: bigint): [bigint, bigint] {
  let [r0, r1, s0, s1] = [a % n, n, 1n, 0n];
  while (r1) {
    const q = r0 / r1;
    [r0, r1, s0, s1] = [r1, r0 - q * r1, s1, s0 - q * s1];
  }
  return [r0, ((s0 % n) + n) % n];
}

export function modInverse(a: bigint, n: bigint): bigint {
  const [g, x] = egcd(a, n);
  if (g !== 1n) throw new TokenError("not invertible modulo n");
  return x;
}

function bitLength(x: bigint): number {
  return x.toString(2).length;
}

export function publicKey(n: bigint, e: bigint): PublicKey {
  if (n < 3n || n % 2n === 0n) throw new TokenError("RSA modulus must be odd and > 2");
  if (e <= 1n || e >= 1n << 32n) throw new TokenError("RSA exponent must be in (1, 2**32)");
  const k = Math.ceil(bitLength(n) / 8);
  return { n, e, k, keyId: sha256(i2osp(n, k), i2osp(e, 4)) };
}

/** The key of ``GET /v1/tokens/key``; TokenError if malformed or its key_id differs. */
export function keyFromJson(body: { n?: unknown; e?: unknown; key_id?: unknown }): PublicKey {
  if (typeof body?.n !== "string" || typeof body.e !== "string") throw new TokenError("token key must hold n and e");
  const key = publicKey(os2ip(unb64url(body.n)), os2ip(unb64url(body.e)));
  if (body.key_id !== undefined && body.key_id !== toHex(key.keyId)) throw new TokenError("token key_id does not match the key");
  return key;
}

/** base64url without padding (RFC 4648 §5). */
export function b64url(data: Uint8Array): string {
  let bin = "";
  for (const b of data) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** The bytes of base64url text (padding optional); TokenError if it is not base64url. */
export function unb64url(text: string): Uint8Array {
  const t = text.replace(/=+$/, "");
  if (/[^A-Za-z0-9_-]/.test(t) || t.length % 4 === 1) throw new TokenError("not base64url");
  return Uint8Array.from(atob(t.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
}

function mgf1(seed: Uint8Array, length: number): Uint8Array {
  const out = new Uint8Array(Math.ceil(length / HASH_BYTES) * HASH_BYTES);
  for (let c = 0; c * HASH_BYTES < length; c++) out.set(sha384(seed, i2osp(BigInt(c), 4)), c * HASH_BYTES);
  return out.subarray(0, length);
}

/** EMSA-PSS-ENCODE (RFC 8017 §9.1.1), SHA-384 and MGF1-SHA-384. */
export function emsaPssEncode(msg: Uint8Array, emBits: number, salt: Uint8Array): Uint8Array {
  const emLen = Math.ceil(emBits / 8);
  if (emLen < HASH_BYTES + salt.length + 2) throw new TokenError("modulus too short for PSS-SHA384");
  const h = sha384(new Uint8Array(8), sha384(msg), salt);
  const db = new Uint8Array(emLen - HASH_BYTES - 1);
  db[db.length - salt.length - 1] = 1;
  db.set(salt, db.length - salt.length);
  const mask = mgf1(h, db.length);
  for (let i = 0; i < db.length; i++) db[i] ^= mask[i];
  db[0] &= 0xff >> (8 * emLen - emBits);
  const em = new Uint8Array(emLen);
  em.set(db);
  em.set(h, db.length);
  em[emLen - 1] = 0xbc;
  return em;
}

/**
 * EMSA-PSS-VERIFY (RFC 8017 §9.1.2), SHA-384, 48-byte salt; true if consistent.  Every check
 * of §9.1.2 at once: ``em`` must be, byte for byte, EMSA-PSS-ENCODE of ``msg`` with the salt
 * its DB holds (the zero padding, the 0x01, H = Hash(M'), the cleared top bits, 0xbc).
 */
export function emsaPssVerify(msg: Uint8Array, em: Uint8Array, emBits: number): boolean {
  const emLen = Math.ceil(emBits / 8), dbLen = emLen - HASH_BYTES - 1, at = dbLen - SALT_BYTES;
  if (em.length !== emLen || at < 1) return false;
  const mask = mgf1(em.subarray(dbLen, emLen - 1), dbLen);
  const salt = em.slice(at, dbLen).map((b, i) => b ^ mask[at + i]);
  return emsaPssEncode(msg, emBits, salt).every((b, i) => b === em[i]);
}

/** Uniform bytes from the platform CSPRNG. */
export function randomBytes(count: number): Uint8Array {
  return globalThis.crypto.getRandomValues(new Uint8Array(count));
}

/**
 * RFC 9474 Blind: ``{blinded, inv}``.  ``salt`` and ``inv`` are drawn from the
 * CSPRNG unless given (only test vectors give them); r is uniform in [1, n)
 * by rejection on bitLength(n) bits.
 */
export function blind(key: PublicKey, msg: Uint8Array, fixed: { salt?: Uint8Array; inv?: bigint } = {}): { blinded: Uint8Array; inv: bigint } {
  const emBits = bitLength(key.n) - 1;
  const m = os2ip(emsaPssEncode(msg, emBits, fixed.salt ?? randomBytes(SALT_BYTES)));
  let r: bigint, inv: bigint;
  if (fixed.inv !== undefined) {
    modInverse(m, key.n);   // TokenError if m is not invertible
    inv = fixed.inv;
    r = modInverse(inv, key.n);
  } else {
    const excess = BigInt(8 * key.k - bitLength(key.n));
    for (;;) {
      r = os2ip(randomBytes(key.k)) >> excess;
      if (r < 1n || r >= key.n) continue;
      // One inversion checks both gcd(m, n) = 1 and gcd(r, n) = 1: r^-1 = m * (m r)^-1.
      const [g, x] = egcd((m * r) % key.n, key.n);
      if (g === 1n) { inv = (m * x) % key.n; break; }
      modInverse(m, key.n);   // TokenError if m is not invertible (else r was: draw again)
    }
  }
  return { blinded: i2osp((m * modPow(r, key.e, key.n)) % key.n, key.k), inv };
}

/** RSASSA-PSS-VERIFY (RFC 8017 §8.1.2), SHA-384, 48-byte salt. */
export function verify(key: PublicKey, msg: Uint8Array, sig: Uint8Array): boolean {
  if (sig.length !== key.k) return false;
  const s = os2ip(sig);
  if (s >= key.n) return false;
  const emBits = bitLength(key.n) - 1;
  return emsaPssVerify(msg, i2osp(modPow(s, key.e, key.n), Math.ceil(emBits / 8)), emBits);
}

/** RFC 9474 Finalize: the signature of ``msg``; TokenError if it does not verify. */
export function finalize(key: PublicKey, msg: Uint8Array, blindSig: Uint8Array, inv: bigint): Uint8Array {
  if (blindSig.length !== key.k) throw new TokenError(`blind signature must hold ${key.k} bytes, got ${blindSig.length}`);
  const sig = i2osp((os2ip(blindSig) * inv) % key.n, key.k);
  if (!verify(key, msg, sig)) throw new TokenError("the issuer's blind signature does not verify");
  return sig;
}

/** Epoch lengths a token unit may have. */
export const PERIODS: readonly string[] = ["hour", "day"];

/** SHA-256 of "ldp-token-unit-v2" NUL period NUL epoch (decimal): the unit a token is for. */
export function unitDigest(period: string, epoch: number): Uint8Array {
  if (!PERIODS.includes(period)) throw new TokenError(`token period must be hour or day, got ${JSON.stringify(period)}`);
  if (!Number.isSafeInteger(epoch) || epoch < 0) throw new TokenError(`token epoch must be an integer >= 0, got ${epoch}`);
  return sha256(utf8(`ldp-token-unit-v2\u0000${period}\u0000${epoch}`));
}

/** token_type (2) || nonce (32) || unit digest (32) || key id (32): what is signed. */
export function tokenInput(nonce: Uint8Array, unit: Uint8Array, keyId: Uint8Array): Uint8Array {
  if (nonce.length !== NONCE_BYTES) throw new TokenError(`nonce must hold ${NONCE_BYTES} bytes`);
  const out = new Uint8Array(2 + NONCE_BYTES + unit.length + keyId.length);
  out[1] = TOKEN_TYPE;
  out.set(nonce, 2);
  out.set(unit, 2 + NONCE_BYTES);
  out.set(keyId, 2 + NONCE_BYTES + unit.length);
  return out;
}

/** A token asked for: ``blinded`` goes to the issuer; ``nonce`` and ``inv`` never leave the device. */
export interface PendingToken { period: string; epoch: number; nonce: Uint8Array; blinded: Uint8Array; inv: bigint }

/** A fresh nonce for the unit (period, epoch), blinded for the issuer. */
export function prepare(key: PublicKey, period: string, epoch: number,
  fixed: { nonce?: Uint8Array; salt?: Uint8Array; inv?: bigint } = {}): PendingToken {
  const nonce = fixed.nonce ?? randomBytes(NONCE_BYTES);
  const { blinded, inv } = blind(key, tokenInput(nonce, unitDigest(period, epoch), key.keyId), fixed);
  return { period, epoch, nonce, blinded, inv };
}

/** The token a report carries: base64url(nonce || signature), verified first. */
export function wireToken(key: PublicKey, p: PendingToken, blindSig: Uint8Array): string {
  const msg = tokenInput(p.nonce, unitDigest(p.period, p.epoch), key.keyId);
  const sig = finalize(key, msg, blindSig, p.inv);
  const out = new Uint8Array(NONCE_BYTES + sig.length);
  out.set(p.nonce);
  out.set(sig, NONCE_BYTES);
  return b64url(out);
}
