// A store that does not open (IndexedDB: an older SDK's tab blocks the upgrade to version 3,
// or a newer SDK upgraded past it: src/browser.ts) never makes ``Client.open`` reject or
// ``record`` throw: records answer storage_error and write nothing, and the first record
// after the store opens loads the state and is queued.  A ConfigError (FileStore: the
// folder's lock) still rejects.  The IndexedDB side runs in Chromium
// (test_one_sdk_version_writes_the_ledger): node has no IndexedDB here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "../src/client.js";
import type { Charge } from "../src/ledger.js";
import type { Spec } from "../src/mechanisms.js";
import { ConfigError } from "../src/pins.js";
import type { Loaded, Store } from "../src/store.js";
import type { Row } from "../src/wire.js";

const SPEC = {
  name: "m", version: 1, kind: "categorical", epsilon: 1, mechanism: "grr", epoch: "day", domain: ["a", "b"],
  params: { mechanism: "grr", epsilon: 1, domain_size: 2, keep: 3139872685 },
} as Spec;

/** Refuses to open with ``refusal`` until it is cleared; counts opens and commits. */
class Refusing implements Store {
  opens = 0;
  committed: Row[] = [];
  constructor(public refusal: Error | null) {}
  async open(newSecret: () => Uint8Array): Promise<Loaded> {
    this.opens++;
    if (this.refusal) throw this.refusal;
    return { secret: newSecret(), optedOut: false, tokens: [], ledger: null, charges: [], rows: [], catalog: null };
  }
  commit(_: Charge, row: Row): void {
    this.committed.push(row);
  }
  remove(): void {}
  drop(): void {}
  assign(): void {}
  saveTokens(): void {}
  saveCatalog(): void {}
  optOut(): void {}
  optIn(): void {}
}

const options = (store: Refusing) => ({
  url: "http://127.0.0.1:9", apiKey: "k", store, metrics: [SPEC], fetchMetrics: false, interval: 0,
  budgets: { m: 10 }, logger: { warn: () => {}, info: () => {} },
});

test("records answer storage_error until the store opens, then are queued", async () => {
  const store = new Refusing(new DOMException("", "BlockedError"));
  const client = await Client.open(options(store));
  for (let i = 0; i < 3; i++) assert.equal((await client.record("m", "a")).status, "storage_error");
  assert.deepEqual(store.committed, []);
  assert.equal(store.opens, 4);   // Client.open, then each record tries again
  store.refusal = null;
  assert.deepEqual(await client.record("m", "a"), { status: "queued", ok: true, epoch: client.privacyReport().units[0].epoch, clamped: undefined });
  assert.equal(await client.record("m", "b").then((r) => r.status), "queued");
  assert.equal(store.opens, 5);   // opened once, not again per record
  assert.equal(store.committed.length, 2);
  assert.equal(client.counters.refused.storage_error, 3);
});

test("a store that never opens (VersionError): storage_error, never a throw", async () => {
  const refusal = new DOMException("The requested version (3) is less than the existing version (4).", "VersionError");
  const client = await Client.open(options(new Refusing(refusal)));
  assert.equal((await client.record("m", "a")).status, "storage_error");
  assert.equal(await client.flush(1), true);   // nothing loaded, nothing to send
});

test("a ConfigError at open still rejects", async () => {
  await assert.rejects(Client.open(options(new Refusing(new ConfigError("state folder in use")))), ConfigError);
});
