/** @ldp-telemetry/sdk: local differential privacy telemetry for browsers and Node 20+. */
export { Client, InvalidValueError, retryAfterSeconds, type Bundle, type ClientOptions, type CloseResult, type Logger, type RecordResult, type Status } from "./client.js";
export { ConfigError } from "./pins.js";
export { TokenStock, type TokenEntry } from "./stock.js";
export { prepare, wireToken, keyFromJson, TokenError, type PublicKey, type PendingToken } from "./tokens.js";
export { MemoryStore, StaleState, type Store, type Loaded } from "./store.js";
export { buildMechanism, isTwoLevel, permanentSeed, type Mechanism, type TwoLevelMechanism, type Report, type Spec } from "./mechanisms.js";
export { memoContext, mechanismFingerprint } from "./context.js";
export { DrbgRng, HmacDrbg, SystemRng, type Rng } from "./rng.js";
export { batchJson, deviceToken, MAX_BATCH, type Row } from "./wire.js";
export { hmacSha256, sha256 } from "./sha256.js";
export const VERSION = "0.1.0";
