// The browser bundles and their gzip sizes (level 9):
//   dist/ldp-sdk.min.js        the core (ESM): every form but prefix_olh (one and two
//                              levels), cms, hcms and hierarchical
//   dist/ldp-sdk-full.min.js   the core + every form of ``src/forms.ts``, registered on load
//   dist/ldp-sdk(.full).iife.js the same as IIFEs exposing window.LdpTelemetry
// and, to show that ``@ldp-telemetry/sdk/forms`` is tree-shakeable, what an app
// bundle of the core plus ONE form weighs (esbuild, from an entry importing it).
// esbuild bundles and minifies; terser then renames the local identifiers again (``mangle``
// only: no ``compress`` rewrite of the code), choosing letters by their frequency in the
// output, which gzip compresses better (core: 392 B less gzipped, 2026-12-01).
import { build } from "esbuild";
import { minify } from "terser";
import { gzipSync } from "node:zlib";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";

for (const page of ["e2e-page", "e2e-tabs", "e2e-versions", "bench-page"]) {
  await build({ entryPoints: [`test/${page}.ts`], bundle: true, format: "esm", target: "es2020", outfile: `dist/${page}.js` });
}
// es2022: class fields stay as written (every browser with BigInt, which the tokens need, has them).
const common = { bundle: true, minify: true, target: "es2022", platform: "browser", legalComments: "none" };
/** esbuild, then terser's mangler over its output; ``ascii_only``: no raw UTF-8 in a script.
 * Answers the names the bundle exports. */
async function pack(options) {
  const { outputFiles: [file], metafile } = await build({ ...common, ...options, write: false, metafile: true });
  const { code } = await minify(file.text, {
    module: options.format === "esm", ecma: 2020, compress: false, mangle: true, format: { ascii_only: true } });
  writeFileSync(options.outfile, code);
  return Object.values(metafile.outputs)[0].exports;
}
const out = [];
for (const [entry, name] of [["src/browser.ts", "ldp-sdk"], ["src/full.ts", "ldp-sdk-full"]]) {
  const names = await pack({ entryPoints: [entry], format: "esm", outfile: `dist/${name}.min.js` });
  // The IIFE assigns window.LdpTelemetry itself, an object of the ESM bundle's exports:
  // esbuild's ``globalName`` would add its CommonJS interop helpers (~150 B gzipped), and
  // ``import * as`` a namespace of getters (~80 B) for the same names and values.
  // The entry keeps its own statements (full.ts: registerAllForms()), which package.json's
  // "sideEffects": false would let esbuild drop once the names are imported from where they live.
  const list = names.join(", ");
  await pack({
    plugins: [{ name: "entry", setup: (b) => b.onResolve({ filter: /^\.\/\w+\.ts$/ },
      (a) => ({ path: resolve(a.resolveDir, a.path), sideEffects: true })) }],
    stdin: { contents: `import { ${list} } from "./${entry.slice(4)}";\nglobalThis.LdpTelemetry = { ${list} };\n`,
      resolveDir: "src", loader: "ts", sourcefile: `${name}.iife.ts` },
    format: "iife", banner: { js: '"use strict";' }, outfile: `dist/${name}.iife.js` });
  out.push(`dist/${name}.min.js`, `dist/${name}.iife.js`);
}
mkdirSync("dist/shake", { recursive: true });
for (const form of ["prefixOlh", "prefixOlhMemo", "cms", "hcms", "hierarchical"]) {
  const entry = `dist/shake/${form}.ts`;
  writeFileSync(entry, `export * from "../../src/browser.js";\nimport { registerForms, ${form} } from "../../src/forms.js";\nregisterForms(${form});\n`);
  await pack({ entryPoints: [entry], format: "esm", outfile: `dist/shake/core+${form}.min.js` });
  out.push(`dist/shake/core+${form}.min.js`);
}
for (const f of out) {
  const raw = readFileSync(f);
  console.log(`${f}: ${raw.length} bytes, ${gzipSync(raw, { level: 9 }).length} gzipped`);
}
