"""Helpers of ``loadtest/run.sh``: hold Redis, wait for a URL, register metrics, check counts.

    python loadtest/support.py redis DATA_DIR PORT          # runs Redis until SIGTERM/SIGINT
    python loadtest/support.py wait URL [SECONDS]           # until URL answers 200
    python loadtest/support.py register COLLECTOR_URL ADMIN_KEY OUT.json
    python loadtest/support.py check --redis-url URL --specs OUT.json --log-dir DIR \\
        --csv-prefix PREFIX --summary SUMMARY.md

``check`` prints a short summary (requests/s, reports/s, failures, p50/p95/p99
from locust's CSV), compares per metric what locust saw accepted with the
report count Redis holds (read through ``collector.store``, the only module
that knows the key schema), and exits 1 on any failure or mismatch.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

__all__ = ["check", "hold_redis", "main", "register", "wait_for"]


def _loopback(url: str) -> str:
    if urlsplit(url).hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"loopback only: {url}")
    return url


def hold_redis(data_dir: str, port: int) -> int:
    """Start ldp_server.redis_server.RedisServer and keep it until SIGTERM or SIGINT."""
    from ldp_server.redis_server import RedisServer

    server = RedisServer.start(data_dir, port=port)
    print(f"redis ready on {server.url} (pid {server.pid})", flush=True)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while not stopping and server.process.poll() is None:
            time.sleep(0.2)
    finally:
        server.stop()
    return 0


def wait_for(url: str, seconds: float = 60.0) -> int:
    """0 once ``url`` answers 200 within ``seconds``, else 1."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(_loopback(url), timeout=1.0) as resp:  # noqa: S310
                if resp.status == 200:
                    return 0
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    print(f"not ready: {url}", file=sys.stderr)
    return 1


def register(collector_url: str, admin_key: str, out: str) -> int:
    """POST every load-test spec; write the stored specs (with versions) to ``out``."""
    from specs import SPEC_BODIES

    stored = []
    for body in SPEC_BODIES:
        request = urllib.request.Request(  # noqa: S310 - loopback, checked
            _loopback(collector_url) + "/v1/metrics", data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {admin_key}",
                     "Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310
            stored.append(json.loads(resp.read()))
    Path(out).write_text(json.dumps(stored, indent=1))
    names = ", ".join(f"{s['name']} v{s['version']}" for s in stored)
    print(f"registered {names}")
    return 0


async def _redis_counts(redis_url: str, specs: list[Any]) -> dict[str, int]:
    import redis.asyncio

    from collector.store import Store

    store = Store(redis.asyncio.Redis.from_url(redis_url))
    try:
        out = {}
        for spec in specs:
            epochs = await store.epochs_with_data(spec)
            tallies = await store.read_tallies(spec, epochs)
            out[spec.name] = sum(n for _, n in tallies.values())
        return out
    finally:
        await store.close()


def _row(csv_path: Path, name: str) -> dict[str, str] | None:
    if not csv_path.exists():
        return None
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("Name") == name:
                return row
    return None


def check(redis_url: str, specs_path: str, log_dir: str, csv_prefix: str,
          summary_path: str) -> int:
    """Summarise the run and compare locust's accepted counts with Redis; 0 if all good."""
    from ldp_core.metric import MetricSpec

    specs = [MetricSpec.from_json(s) for s in json.loads(Path(specs_path).read_text())]
    sent: dict[str, int] = {s.name: 0 for s in specs}
    accepted: dict[str, int] = {s.name: 0 for s in specs}
    for path in sorted(Path(log_dir).glob("accepted-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            for k, v in record["sent"].items():
                sent[k] = sent.get(k, 0) + int(v)
            for k, v in record["accepted"].items():
                accepted[k] = accepted.get(k, 0) + int(v)
    stored = asyncio.run(_redis_counts(_loopback_redis(redis_url), specs))
    total = _row(Path(f"{csv_prefix}_stats.csv"), "Aggregated")
    ingest = _row(Path(f"{csv_prefix}_stats.csv"), "/v1/reports")
    failures = int(total["Failure Count"]) if total else -1
    requests = int(total["Request Count"]) if total else 0
    lines = ["# Load test summary", ""]
    if total and ingest:
        rps = float(ingest["Requests/s"])
        seconds = int(ingest["Request Count"]) / rps if rps else 0.0
        reports_per_s = sum(accepted.values()) / seconds if seconds else 0.0
        lines += [
            "| requests | failures | requests/s (all) | ingest requests/s | reports/s "
            "| p50 ms | p95 ms | p99 ms |",
            "|---|---|---|---|---|---|---|---|",
            f"| {requests} | {failures} | {float(total['Requests/s']):.1f} | {rps:.1f} "
            f"| {reports_per_s:,.0f} | {total['50%']} | {total['95%']} | {total['99%']} |",
            "",
        ]
        estimates = _row(Path(f"{csv_prefix}_stats.csv"), "/v1/estimates/[name]")
        if estimates:
            lines.append(f"analyst: {estimates['Request Count']} estimate requests, "
                         f"{estimates['Failure Count']} failures, p50 {estimates['50%']} ms")
            lines.append("")
    else:
        lines += ["no locust statistics found (locust did not run?)", ""]
    lines += ["| metric | sent by locust | accepted (locust) | count in Redis | match |",
              "|---|---|---|---|---|"]
    mismatch = False
    for name in sent:
        ok = accepted[name] == stored.get(name, 0) == sent[name]
        mismatch |= not ok
        lines.append(f"| {name} | {sent[name]} | {accepted[name]} | {stored.get(name, 0)} "
                     f"| {'yes' if ok else 'NO'} |")
    problems = []
    if failures != 0:
        problems.append(f"{failures} failed requests" if failures > 0 else "no statistics")
    if mismatch:
        problems.append("the collector's counts differ from what locust sent")
    if sum(sent.values()) == 0:
        problems.append("no reports were sent")
    lines += ["", "RESULT: " + ("OK" if not problems else "FAILED: " + "; ".join(problems))]
    text = "\n".join(lines) + "\n"
    Path(summary_path).write_text(text)
    print(text)
    return 1 if problems else 0


def _loopback_redis(url: str) -> str:
    if urlsplit(url).hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"loopback only: {url}")
    return url


def main(argv: list[str] | None = None) -> int:
    """Dispatch the sub-commands."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("redis")
    r.add_argument("data_dir")
    r.add_argument("port", type=int)
    w = sub.add_parser("wait")
    w.add_argument("url")
    w.add_argument("seconds", type=float, nargs="?", default=60.0)
    g = sub.add_parser("register")
    g.add_argument("collector_url")
    g.add_argument("admin_key")
    g.add_argument("out")
    c = sub.add_parser("check")
    c.add_argument("--redis-url", required=True)
    c.add_argument("--specs", required=True)
    c.add_argument("--log-dir", required=True)
    c.add_argument("--csv-prefix", required=True)
    c.add_argument("--summary", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "redis":
        return hold_redis(args.data_dir, args.port)
    if args.cmd == "wait":
        return wait_for(args.url, args.seconds)
    if args.cmd == "register":
        return register(args.collector_url, args.admin_key, args.out)
    return check(args.redis_url, args.specs, args.log_dir, args.csv_prefix, args.summary)


if __name__ == "__main__":
    sys.exit(main())
