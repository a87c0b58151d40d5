/**
 * The token issuer's keys this app trusts, as ``client_sdk._pins``: pinned key
 * ids, never taken from the server.  A malicious issuer could give each device
 * a key of its own and so recognise it in every token (the key id is inside
 * each one); blindness does not help, a pin does.  The app ships the SHA-256
 * key ids (``key_id`` of ``GET /v1/tokens/key``, 64 hex digits) it accepts,
 * joined from ``issuerKeys``, the bundled catalog's ``issuer_keys`` and, in
 * Node (``openNodeClient``), ``$LDP_ISSUER_KEYS`` (comma-separated).  A bad
 * pin is a ``ConfigError`` at open; an empty set means no pin (any key, one
 * warning per key: the pre-pinning behaviour, for development).
 *
 * @example
 *   issuerPins(["AB".repeat(32), " ", "cd".repeat(32)]);   // Set { "abab…ab", "cdcd…cd" }
 *   issuerPins(["not-a-key-id"]);                          // throws ConfigError
 */

/** A configuration the SDK cannot run with (thrown at open, never from ``record``). */
export class ConfigError extends Error {
  override name = "ConfigError";
}

/** The pinned key ids (lowercase hex); blank entries are skipped. */
export function issuerPins(given: readonly unknown[]): Set<string> {
  const pins = new Set<string>();
  for (const value of given) {
    const id = String(value).trim().toLowerCase();
    if (!id) continue;
    if (!/^[0-9a-f]{64}$/.test(id)) throw new ConfigError(`an issuer key id is 64 hex digits (SHA-256), got ${JSON.stringify(value)}`);
    pins.add(id);
  }
  return pins;
}
