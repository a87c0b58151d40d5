"""Benchmark of @ldp-telemetry/sdk (sdk-js/): Node ``record`` cost and browser bundle size.

    PYTHONPATH=. python benchmarks/bench_sdk_js.py

Builds sdk-js if needed (npm ci, npm run build), then runs
sdk-js/dist/test/bench.js (not a test: a script) which times ``Client.record``
(MemoryStore: mechanism, ledger, token, spool row; and FileStore: plus the
journal append and fsync) for grr, olh at d = 1024 and oue at d = 1024, and
prints the minified and gzipped size of the browser bundle.
Goals (issue 14): grr, olh <= 20 us median; oue <= 200 us; bundle <= 15 kB gzipped.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

SDK = Path(__file__).resolve().parents[1] / "sdk-js"


def main() -> None:
    if not (SDK / "dist" / "test" / "bench.js").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=SDK, check=True)
        subprocess.run(["npm", "run", "build"], cwd=SDK, check=True)
    out = subprocess.run(["node", "dist/test/bench.js"], cwd=SDK, check=True,
                         capture_output=True, text=True).stdout
    figures = json.loads(out)
    for name in ("ldp-sdk.min.js", "ldp-sdk.iife.js"):
        raw = (SDK / "dist" / name).read_bytes()
        figures[f"bundle {name}"] = {"bytes": len(raw),
                                     "gzip_bytes": len(gzip.compress(raw, compresslevel=9))}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
