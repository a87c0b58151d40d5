/**
 * Node's scrypt for the install proof of work: OpenSSL through ``node:crypto``, run in
 * libuv's thread pool (the event loop goes on while it works).  Node only: the browser
 * bundle never imports this module (``pow.ts`` takes it as its ``scrypt`` option).
 *
 * @example
 *   await solvePow(challenge, digest, params, { scrypt: nodeScrypt });
 */

import { scrypt as opensslScrypt } from "node:crypto";

/** scrypt(password, salt, N, r, p, dkLen) by OpenSSL, with room for its 128·r·(N + p + 2) bytes. */
export function nodeScrypt(password: Uint8Array, salt: Uint8Array, n: number, r: number, p: number,
  dkLen: number): Promise<Uint8Array> {
  const maxmem = 128 * r * (n + p + 2) + 65536;
  return new Promise((resolve, reject) => {
    opensslScrypt(password, salt, dkLen, { N: n, r, p, maxmem }, (err, key) => {
      if (err) reject(err); else resolve(new Uint8Array(key.buffer, key.byteOffset, key.length));
    });
  });
}
