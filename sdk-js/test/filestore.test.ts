// One FileStore folder, one process at a time (src/node.ts): the journal is each
// process's own view of the ledger, the spool and the token stock (there is no
// cross-process transaction, as the Python SDK's sqlite file has), so two Clients
// over one folder could each charge the same (metric, epoch) and each send a
// randomised report of it.  The folder's lock file refuses a second FileStore while
// its holder lives (in this process or another) and is taken over once the holder
// is gone (a crash leaves it behind).  Without the lock (before this test) both
// opens succeeded and both Clients answered "queued" for the same unit.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client, ConfigError, FileStore, type Spec } from "../src/node.js";

const SPEC: Spec = {
  name: "t.plan", version: 1, kind: "categorical", epsilon: 1, mechanism: "grr", epoch: "day",
  domain: ["a", "b"], params: { mechanism: "grr", epsilon: 1, domain_size: 2, keep: 3139872685 },
} as Spec;
// One fixed instant for every Client here (the holder child's too): the over_budget answers
// below are of one unit, which a midnight UTC between two records would split in two.
const T0 = 1_800_000_000;
const open = (store: FileStore) => Client.open({ url: "http://127.0.0.1:9", apiKey: "k", store, metrics: [SPEC],
  fetchMetrics: false, interval: 0, clock: () => T0 });
const folder = () => mkdtempSync(join(tmpdir(), "ldp-lock-"));

test("a second Client over one folder is refused while the first is open, and opens after close", async () => {
  const dir = folder();
  const first = await open(new FileStore(dir));
  await assert.rejects(open(new FileStore(dir)), (e: Error) =>
    e instanceof ConfigError && e.message.includes(`in use by process ${process.pid}`) && e.message.includes(dir));
  assert.equal((await first.record("t.plan", "a")).status, "queued");
  const store = new FileStore(folder());
  await open(store);
  await assert.rejects(open(store), ConfigError);   // one store object handed to two Clients
  store.close();
  first.close();
  const second = await open(new FileStore(dir));
  assert.equal((await second.record("t.plan", "b")).status, "over_budget");   // one unit, one report
  assert.equal(second.queued, 1);
  second.close();
});

test("a live process's lock refuses; once it is killed (its lock left behind) the folder is taken over", async () => {
  const dir = folder();
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "--hold", dir], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on("data", (d: Buffer) => { if (d.toString().includes("held")) resolve(); });
      child.on("exit", (code) => reject(new Error(`holder exited ${code}`)));
    });
    assert.equal(readFileSync(join(dir, "lock"), "utf8").split(" ")[0], String(child.pid));
    await assert.rejects(open(new FileStore(dir)), (e: Error) => e instanceof ConfigError
      && e.message.includes(`in use by process ${child.pid}`));
  } finally {
    const gone = new Promise((resolve) => child.on("exit", resolve));
    child.kill("SIGKILL");   // a crash: no close, the lock file stays
    await gone;
  }
  assert.equal(readFileSync(join(dir, "lock"), "utf8").split(" ")[0], String(child.pid));
  const c = await open(new FileStore(dir));
  assert.equal((await c.record("t.plan", "a")).status, "over_budget");   // the holder's charge stays
  assert.equal(readFileSync(join(dir, "lock"), "utf8").split(" ")[0], String(process.pid));
  c.close();
});

test("a lock left with this process's own pid (a restarted container) and not held here is taken over", async () => {
  const dir = folder();
  writeFileSync(join(dir, "lock"), `${process.pid} 00`);
  const c = await open(new FileStore(dir));
  assert.equal((await c.record("t.plan", "a")).status, "queued");
  c.close();
});

// The holder of the second test: opens a Client over the folder, records, waits to be killed.
if (process.argv[2] === "--hold") {
  const c = await open(new FileStore(process.argv[3]));
  await c.record("t.plan", "b");
  process.stdout.write("held\n");
  setInterval(() => undefined, 1000);
}
