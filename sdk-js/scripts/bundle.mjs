// The browser bundles and their gzip sizes (level 9):
//   dist/ldp-sdk.min.js        the core (ESM): every form but prefix_olh (one and two
//                              levels), cms and hcms
//   dist/ldp-sdk-full.min.js   the core + every form of ``src/forms.ts``, registered on load
//   dist/ldp-sdk(.full).iife.js the same as IIFEs exposing window.LdpTelemetry
// and, to show that ``@ldp-telemetry/sdk/forms`` is tree-shakeable, what an app
// bundle of the core plus ONE form weighs (esbuild, from an entry importing it).
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";

for (const page of ["e2e-page", "e2e-tabs", "e2e-versions", "bench-page"]) {
  await build({ entryPoints: [`test/${page}.ts`], bundle: true, format: "esm", target: "es2020", outfile: `dist/${page}.js` });
}
// es2022: class fields stay as written (every browser with BigInt, which the tokens need, has them).
const common = { bundle: true, minify: true, target: "es2022", platform: "browser", legalComments: "none" };
const out = [];
for (const [entry, name] of [["src/browser.ts", "ldp-sdk"], ["src/full.ts", "ldp-sdk-full"]]) {
  await build({ ...common, entryPoints: [entry], format: "esm", outfile: `dist/${name}.min.js` });
  // The IIFE assigns the namespace itself: esbuild's ``globalName`` would add its CommonJS
  // interop helpers (~150 B gzipped) for the same window.LdpTelemetry.
  await build({
    ...common, stdin: { contents: `import * as api from "./${entry.slice(4)}";\nglobalThis.LdpTelemetry = api;\n`,
      resolveDir: "src", loader: "ts", sourcefile: `${name}.iife.ts` },
    format: "iife", banner: { js: '"use strict";' }, outfile: `dist/${name}.iife.js` });
  out.push(`dist/${name}.min.js`, `dist/${name}.iife.js`);
}
mkdirSync("dist/shake", { recursive: true });
for (const form of ["prefixOlh", "prefixOlhMemo", "cms", "hcms"]) {
  const entry = `dist/shake/${form}.ts`;
  writeFileSync(entry, `export * from "../../src/browser.js";\nimport { registerForms, ${form} } from "../../src/forms.js";\nregisterForms(${form});\n`);
  await build({ ...common, entryPoints: [entry], format: "esm", outfile: `dist/shake/core+${form}.min.js` });
  out.push(`dist/shake/core+${form}.min.js`);
}
for (const f of out) {
  const raw = readFileSync(f);
  console.log(`${f}: ${raw.length} bytes, ${gzipSync(raw, { level: 9 }).length} gzipped`);
}
