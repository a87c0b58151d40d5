// The browser bundle: one minified ES module (dist/ldp-sdk.min.js) and an IIFE
// exposing window.LdpTelemetry (dist/ldp-sdk.iife.js), with their gzip sizes.
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { readFileSync } from "node:fs";

for (const page of ["e2e-page", "bench-page"]) {
  await build({ entryPoints: [`test/${page}.ts`], bundle: true, format: "esm", target: "es2020", outfile: `dist/${page}.js` });
}
// es2022: class fields stay as written (every browser with BigInt, which the tokens need, has them).
const common = { entryPoints: ["src/browser.ts"], bundle: true, minify: true, target: "es2022", platform: "browser", legalComments: "none" };
await build({ ...common, format: "esm", outfile: "dist/ldp-sdk.min.js" });
await build({ ...common, format: "iife", globalName: "LdpTelemetry", outfile: "dist/ldp-sdk.iife.js" });
for (const f of ["dist/ldp-sdk.min.js", "dist/ldp-sdk.iife.js"]) {
  const raw = readFileSync(f);
  console.log(`${f}: ${raw.length} bytes, ${gzipSync(raw, { level: 9 }).length} gzipped`);
}
