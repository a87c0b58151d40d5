"""Benchmark of @ldp-telemetry/sdk (sdk-js/): ``record`` in Node and in Chromium, tokens, bundle.

    PYTHONPATH=. python benchmarks/bench_sdk_js.py [--quick]

Builds sdk-js if needed (npm ci, npm run build), then

1. runs sdk-js/dist/test/bench.js in Node: the median and p90 cost of
   ``Client.record`` (MemoryStore: mechanism, ledger, spool row; FileStore:
   plus the journal append and fsync) for grr, olh at d = 1024, oue at
   d = 1024 and a two-level grr, and the device half of a 2048-bit blind RSA
   token (prepare, finalize);
2. serves sdk-js/dist to headless Chromium (Debian's ``chromium``), whose page
   (test/bench-page.ts) times the same records with a MemoryStore and with the
   IndexedDB store, in blocks (a page's clock is coarse: 1000 records a block
   in memory, 100 with IndexedDB), median of the block means;
3. prints the minified and gzipped size of the browser bundles,

then a table with Chromium's cost as a ratio of Node's, measured in the same run
(in memory: both as medians of the means of blocks of 1000 records, GC included;
Node's per-call median beside them).
Goals (issue 14): grr, olh <= 20 us median in Node; oue <= 200 us; bundle <= 15 kB gzipped.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SDK = Path(__file__).resolve().parents[1] / "sdk-js"
PLAN = {"c.grr.4.1.0.0", "c.olh.1024.1.0.0", "c.oue.1024.1.0.0", "c.grr.1024.1.0.1", "n.1.0.0.0",
        "n.piecewise.1.0.0.0", "n.hybrid.1.0.0.0", "n.piecewise.1.0.0.1"}


def build() -> None:
    if not (SDK / "node_modules").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=SDK, check=True)
    subprocess.run(["npm", "run", "build"], cwd=SDK, check=True, capture_output=True)


def node_figures() -> dict[str, Any]:
    out = subprocess.run(["node", "dist/test/bench.js"], cwd=SDK, check=True,
                         capture_output=True, text=True, timeout=600).stdout
    figures: dict[str, Any] = json.loads(out)
    return figures


def chromium_figures(quick: bool) -> dict[str, Any]:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        return {"error": "chromium not installed (scripts/install-system-deps.sh)"}
    dist = SDK / "dist"
    vectors = json.loads((SDK / "test" / "vectors.json").read_text())
    specs = [c["spec"] for c in vectors["mechanisms"] if c["spec"]["name"] in PLAN]
    (dist / "bench-specs.json").write_text(json.dumps(specs))
    (dist / "bench.html").write_text(
        '<!doctype html><meta charset="utf-8"><title>ldp sdk bench</title>'
        '<script type="module" src="/bench-page.js"></script>')
    result: list[dict[str, Any]] = []
    arrived = threading.Event()

    class Handler(SimpleHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            result.append(json.loads(body))
            self.send_response(204)
            self.end_headers()
            arrived.set()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Handler(*a, directory=str(dist)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    blocks, idb = (5, 3) if quick else (20, 10)
    url = f"http://127.0.0.1:{server.server_address[1]}/bench.html#blocks={blocks}&idb={idb}"
    profile = tempfile.mkdtemp(prefix="ldp-bench-chromium-")
    browser = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         f"--user-data-dir={profile}", url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not arrived.wait(170):
            return {"error": "the page never reported"}
    finally:
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()
        server.shutdown()
        server.server_close()
        shutil.rmtree(profile, ignore_errors=True)
    return result[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer Chromium blocks")
    args = parser.parse_args()
    build()
    node = node_figures()
    page = chromium_figures(args.quick)
    bundles = {}
    for name in ("ldp-sdk.min.js", "ldp-sdk.iife.js"):
        raw = (SDK / "dist" / name).read_bytes()
        bundles[name] = {"bytes": len(raw), "gzip_bytes": len(gzip.compress(raw, compresslevel=9))}
    print(json.dumps({"node": node, "chromium": page, "bundles": bundles}, indent=2))
    print()
    print(f"{'record, median us':44} {'Node call':>9} {'Node block':>10} "
          f"{'Chromium block':>14} {'ratio':>6}")
    for key, fig in node.items():
        if not key.startswith("record"):
            continue
        other = page.get(key.replace("(file store)", "(indexeddb store)"), {})
        b = other.get("median_us") if isinstance(other, dict) else None
        ref = fig.get("block_median_us", fig["median_us"])
        ratio = f"{b / ref:6.2f}" if b else "     -"
        print(f"{key.replace('(file store)', '(file / IndexedDB)'):44} {fig['median_us']:9.1f} "
              f"{fig.get('block_median_us', '-'):>10} {b if b is not None else '-':>14} {ratio}")
    for key, fig in node.items():
        if key.startswith("token"):
            print(f"{key:44} {fig['median_us']:8.1f}")
    for name, size in bundles.items():
        print(f"bundle {name:37} {size['bytes']:8d} B, {size['gzip_bytes']} B gzipped")


if __name__ == "__main__":
    main()
