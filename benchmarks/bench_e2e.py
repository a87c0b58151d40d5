"""End to end: devices per second through the real SDK into the real collector.

The same fleet as ``ldp demo`` (``ldp_cli.fleet``: three metrics per device,
a boolean, a 20-value Zipf categorical and a numeric mean, each randomised on
the "device" by ``client_sdk.Fleet``, batched, gzipped and sent over HTTP) into
a collector (1 uvicorn worker) on 127.0.0.1 backed by a private Redis.  A device
counts once all three of its reports are delivered (``complete``).

Run: ``.venv/bin/python benchmarks/bench_e2e.py [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._services import INGEST_KEY, Stack
from benchmarks._table import header, table

__all__ = ["section"]


def section(quick: bool = False) -> str:
    """The end-to-end table (Markdown)."""
    from ldp_cli.fleet import demo_specs, draw_truth, run_fleet

    devices = 1_000 if quick else 5_000
    repeats = 1 if quick else 3
    rows = []
    with Stack.start() as stack:
        svc = stack.collector(1)
        specs = [stack.register(svc.url, s) for s in demo_specs(10)]
        runs = []
        for r in range(repeats):
            truth = draw_truth(devices, seed=2026 + r)
            run = run_fleet(svc.url, INGEST_KEY, specs, truth, timeout=300.0)
            runs.append(run)
        seconds = statistics.median(run.seconds for run in runs)
        delivered = statistics.median(run.counters.delivered for run in runs)
        complete = all(run.complete for run in runs)
        rows.append((
            f"{devices:,}", 3, f"{seconds:.2f}", f"{devices / seconds:,.0f}",
            f"{delivered / seconds:,.0f}", "yes" if complete else "NO",
        ))
    return "\n".join([
        header("End to end (client_sdk.Fleet -> collector -> Redis)"),
        f"The `ldp demo` fleet (ldp_cli.fleet.run_fleet), median of {repeats} run(s); "
        "SDK and collector (1 worker) share the machine.\n",
        table(("devices", "reports per device", "seconds", "devices/s", "reports/s",
               "all delivered"), rows),
    ]) + "\n"


def main() -> None:
    """Print the end-to-end section."""
    ap = argparse.ArgumentParser(description="end-to-end benchmark")
    ap.add_argument("--quick", action="store_true")
    print(section(ap.parse_args().quick))


if __name__ == "__main__":
    main()
