"""Every benchmark in one command (``ldp bench`` runs this script).

    .venv/bin/python benchmarks/run_all.py                 # everything (minutes)
    .venv/bin/python benchmarks/run_all.py --quick         # smoke run (about a minute)
    .venv/bin/python benchmarks/run_all.py --only peers,ingest

Sections: mechanisms (device randomize, simulation, aggregation over
OLH/OUE/GRR x d x n), peers (ours vs pure-LDP; skipped with a message if the
``peers`` extra is not installed), ingest (collector vs a minimal FastAPI
endpoint vs raw Redis over loopback HTTP), memory (Redis per metric-epoch,
aggregator peak), e2e (devices/s through the SDK), sdk (the median cost of
``Client.record`` per mechanism and durability, no network).  Each figure is a median over
repeated runs and each ratio is computed within this run.  The output is
Markdown, ready to paste into docs/performance.md, and is also written to
``benchmarks/results/<UTC date>-<time>[-quick].md``.  Service benchmarks
start their own Redis and uvicorn processes on 127.0.0.1 and stop them by pid.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _smoke

__all__ = ["SECTIONS", "main", "run"]

RESULTS = Path(__file__).resolve().parent / "results"


def _mechanisms(quick: bool) -> str:
    from benchmarks.bench_core import section

    return section(quick)


def _peers(quick: bool) -> str:
    from benchmarks.bench_peers import section

    return section(quick)


def _ingest(quick: bool) -> str:
    from benchmarks.bench_ingest import section

    return section(quick)


def _memory(quick: bool) -> str:
    from benchmarks.bench_memory import section

    return section(quick)


def _e2e(quick: bool) -> str:
    from benchmarks.bench_e2e import section

    return section(quick)


def _sdk(quick: bool) -> str:
    from benchmarks.bench_sdk import section

    return section(quick)


SECTIONS: dict[str, Callable[[bool], str]] = {
    "mechanisms": _mechanisms,
    "peers": _peers,
    "ingest": _ingest,
    "memory": _memory,
    "e2e": _e2e,
    "sdk": _sdk,
}


def _load_note() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return ""
    return f"load average at start: {one:.2f} (1 min), {five:.2f} (5 min)"


def run(only: list[str], quick: bool, out_dir: Path | None = RESULTS) -> tuple[str, int]:
    """Run the chosen sections; (Markdown, number of failed sections)."""
    stamp = dt.datetime.now(dt.UTC)
    parts = [
        f"# ldp-telemetry benchmarks, {stamp:%Y-%m-%d %H:%M} UTC"
        + (" (--quick: smoke sizes, not for the README)" if quick else ""),
        "",
        f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; {_load_note()}.  "
        f"Sections: {', '.join(only)}.",
        "",
    ]
    failed = 0
    for name in only:
        started = time.perf_counter()
        print(f"[run_all] {name} ...", file=sys.stderr, flush=True)
        try:
            text = SECTIONS[name](quick)
        except Exception:
            failed += 1
            text = f"## {name}\n\nFAILED:\n\n```\n{traceback.format_exc()}```\n"
        took = time.perf_counter() - started
        print(text, flush=True)
        print(f"[run_all] {name} took {took:.0f} s", file=sys.stderr, flush=True)
        parts += [text, f"_{name}: {took:.0f} s_", ""]
    report = "\n".join(parts)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{stamp:%Y-%m-%d-%H%M}{'-quick' if quick else ''}.md"
        path.write_text(report)
        print(f"[run_all] wrote {path}", file=sys.stderr, flush=True)
    return report, failed


def main(argv: list[str] | None = None) -> int:
    """Command line; exit status 1 if any section failed."""
    ap = argparse.ArgumentParser(description="ldp-telemetry benchmarks (Markdown tables)")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated subset of: {','.join(SECTIONS)}")
    ap.add_argument("--no-write", action="store_true",
                    help="print only; do not write benchmarks/results/")
    args = ap.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SECTIONS]
    if unknown or not only:
        ap.error(f"unknown section(s) {unknown}; choose from {','.join(SECTIONS)}")
    _smoke.announce("run_all")  # every section at its --quick sizes, or smaller
    _, failed = run(only, args.quick or _smoke.on(),
                    None if args.no_write else _smoke.output(RESULTS))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
