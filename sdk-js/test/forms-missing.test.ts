// A spec whose form is not loaded (this file never imports src/forms.ts): the
// Client opens, logs ONE line per metric naming the import that adds the form,
// answers ``form_not_loaded`` (counted), never throws; Square Wave is in the core.
// Then ``prefixOlh`` alone: the memoised string form is a separate import.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Client, MemoryStore, type Spec } from "../src/node.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const V = JSON.parse(readFileSync(`${here}/../../test/vectors.json`, "utf8"));
const SPECS = new Map<string, Spec>((V.mechanisms as { spec: Spec }[]).map((c) => [c.spec.name, c.spec]));

test("a form that is not loaded: one log line naming its import, a counted status, no throw", async () => {
  const names = { prefixOlh: "s.0.6.1.4.0", prefixOlhMemo: "s.l.0.6.1.4.0", cms: "c.cms.37.1.0", hcms: "c.hcms.37.1.0",
    hierarchical: "n.hierarchical.1.0.0" };
  const value = (form: string): unknown => form.startsWith("prefixOlh") ? "hello" : form === "hierarchical" ? 61.5 : "c1";
  const lines: string[] = [];
  const logger = { warn: (m: string) => lines.push(m), info: () => undefined, error: (m: string) => lines.push(m) };
  const specs = [...Object.values(names).map((n) => SPECS.get(n)!), SPECS.get("n.square_wave.1.0.0")!];
  const c = await Client.open({ url: "http://127.0.0.1:9", apiKey: "k", store: new MemoryStore(), metrics: specs,
    fetchMetrics: false, interval: 0, logger });
  for (const [form, name] of Object.entries(names)) {
    for (let i = 0; i < 2; i++) assert.equal((await c.record(name, value(form))).status, "form_not_loaded");
    const said = lines.filter((l) => l.includes(name));
    assert.equal(said.length, 1, said.join("\n"));
    assert.match(said[0], new RegExp(`from "@ldp-telemetry/sdk/forms"; registerForms\\(${form}\\)`));
  }
  assert.equal(c.counters.refused.form_not_loaded, 10);
  assert.equal((await c.record("n.square_wave.1.0.0", 3)).status, "queued");
  c.close();
});

test("prefixOlh alone serves one-level strings; a memoised string metric still names prefixOlhMemo", async () => {
  const { registerForms, prefixOlh } = await import("../src/forms.js");
  registerForms(prefixOlh);
  const one = SPECS.get("s.0.6.1.4.0")!, memo = SPECS.get("s.l.0.6.1.4.0")!;
  const lines: string[] = [];
  const logger = { warn: (m: string) => lines.push(m), info: () => undefined, error: (m: string) => lines.push(m) };
  const c = await Client.open({ url: "http://127.0.0.1:9", apiKey: "k", store: new MemoryStore(), metrics: [one, memo],
    fetchMetrics: false, interval: 0, logger });
  assert.equal((await c.record(one.name, "hello")).status, "queued");
  assert.equal((await c.record(memo.name, "hello")).status, "form_not_loaded");
  const said = lines.filter((l) => l.includes(memo.name));
  assert.equal(said.length, 1, said.join("\n"));
  assert.match(said[0], /registerForms\(prefixOlhMemo\)/);
  c.close();
});
