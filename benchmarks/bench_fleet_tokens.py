"""The demo's fleet against the token concurrency of ``client_sdk.Fleet``.

Each simulated device asks the issuer for its own token (one ``POST /v1/tokens``
per device, blind RSA with a 2048-bit key as in ``ldp demo``), then its four
reports go in batches.  ``Fleet(token_concurrency=c)`` keeps up to ``c`` token
requests in flight.  For each ``c`` a fresh set of devices runs the demo's fleet
(``ldp_cli.fleet.run_fleet``: four metrics per device) into one collector
(1 uvicorn worker, as ``ldp up`` starts it) on 127.0.0.1 with a private Redis,
and the table gives the wall time, the speed-up over ``c = 1``, and the CPU
of this process (the fleet) and of the collector per device.

Run: ``nice .venv/bin/python benchmarks/bench_fleet_tokens.py [--devices 2000]
[--concurrency 1,2,4,8,16]`` (the load average is printed with the table: the
machine is shared, so compare rows of one run, not runs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _smoke
from benchmarks._services import INGEST_KEY, Stack, start_uvicorn
from benchmarks._table import header, table

__all__ = ["section"]


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def section(devices: int = 2000, concurrency: tuple[int, ...] = (1, 2, 4, 8, 16)) -> str:
    """The table (Markdown)."""
    from collector.token_crypto import TokenKey
    from ldp_cli.fleet import demo_specs, draw_truth, run_fleet

    rows = []
    load_before = os.getloadavg()[0]
    with Stack.start() as stack:
        key_file = stack.folder / "issuer-2048.pem"
        key_file.write_bytes(TokenKey.generate(2048).to_pem())
        svc = start_uvicorn("collector.app:create_app",
                            stack.env({"LDP_TOKEN_KEY_FILE": str(key_file)}), stack.folder)
        stack.services.append(svc)
        specs = [stack.register(svc.url, s) for s in demo_specs(10)]
        base = None
        for i, c in enumerate(concurrency):
            truth = draw_truth(devices, seed=2026 + i)
            own, server = time.process_time(), _cpu_seconds(svc.pid)
            run = run_fleet(svc.url, INGEST_KEY, specs, truth, timeout=600.0,
                            issuer_keys=[TokenKey.from_file(key_file).public.key_id.hex()],
                            token_concurrency=c)
            own, server = time.process_time() - own, _cpu_seconds(svc.pid) - server
            base = base or run.seconds
            rows.append((
                str(c), f"{devices:,}", f"{run.seconds:.1f}", f"{devices / run.seconds:,.0f}",
                f"{base / run.seconds:.2f}x", f"{1000 * own / devices:.2f}",
                f"{1000 * server / devices:.2f}",
                f"{run.counters.delivered:,} of {run.expected:,}",
            ))
    load_after = os.getloadavg()[0]
    return "\n".join([
        header("Fleet token concurrency (ldp demo's fleet, 2048-bit issuer key)"),
        f"{devices:,} new devices per row, 4 reports each; collector with 1 worker; "
        f"load average {load_before:.1f} before, {load_after:.1f} after.\n",
        table(("token_concurrency", "devices", "seconds", "devices/s", "speed-up",
               "fleet CPU ms/device", "collector CPU ms/device", "reports delivered"), rows),
    ]) + "\n"


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description="fleet token concurrency benchmark")
    ap.add_argument("--devices", type=int, default=2000)
    ap.add_argument("--concurrency", default="1,2,4,8,16",
                    help="comma-separated token_concurrency values")
    args = ap.parse_args()
    _smoke.announce("bench_fleet_tokens")
    concurrency = tuple(int(c) for c in args.concurrency.split(","))
    print(section(_smoke.size(args.devices, 20), concurrency))


if __name__ == "__main__":
    main()
