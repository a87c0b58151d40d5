"""``ldp demo``: the survey, the audit and budget, then the whole system end to end.

(a) the randomised-response survey; (b) the privacy audit table and a
device's one-year budget; (c) ``up`` on a throwaway (or given) data folder,
four demo metrics registered over HTTP, a fleet of simulated devices
reporting through the real SDK, and each estimate printed beside the truth
with its interval, epsilon and unit; then everything it started is stopped
(``--keep``: kept running until Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from client_sdk import Fleet
from ldp_cli.api import Api, ApiError
from ldp_cli.fleet import demo_specs, draw_truth, run_fleet
from ldp_cli.keys import clear_endpoints
from ldp_cli.progress import Progress
from ldp_cli.stack import StackError
from ldp_cli.survey import run_survey
from ldp_cli.table import format_estimate
from ldp_cli.up import banner, start_stack, wait_for_signal
from ldp_core.accountant import year_budget
from ldp_core.audit import audit_all, format_table

__all__ = ["cmd_demo"]

#: The demo's audit: one epsilon, enough trials for a tight bound, in about a second.
AUDIT_EPSILONS = (1.0,)
AUDIT_TRIALS = 200_000
#: ``LDP_BENCH_SMOKE=1`` (benchmarks/_smoke.py; the suite runs the docs' ``make demo`` and
#: ``ldp demo --devices 5000`` verbatim with it): at most this many devices, in seconds.
SMOKE_DEVICES = 200


def _section(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def _survey() -> None:
    _section("(a) Randomised-response survey")
    print(run_survey())


def _audit() -> None:
    _section("(b) Privacy audit (empirical epsilon, null control) and a one-year budget")
    print(format_table(audit_all(epsilons=AUDIT_EPSILONS, trials=AUDIT_TRIALS, seed=0)))
    print("\nA device that reports demo.crashed (eps = 1 per report) every day for a year:")
    print(year_budget(1.0).text())
    print("\nThe same with eps = 0.1 per report and two-level memoisation (eps_inf = 4):")
    print(year_budget(0.1, epsilon_inf=4.0).text())


def _wait_for_counts(api: Api, names: list[str], expected: int, timeout: float) -> None:
    """Poll the aggregator until every metric counts ``expected`` reports (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(api.get(f"/v1/estimates/{n}")["n"] >= expected for n in names):
            return
        time.sleep(0.2)


def _system(args: argparse.Namespace) -> int:
    _section("(c) The system end to end: embedded Redis, collector, aggregator, SDK fleet")
    throwaway = not args.data
    data_dir = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="ldp-demo-"))
    try:
        stack, keys, created = start_stack(args, data_dir)
    except (StackError, RuntimeError, OSError) as exc:
        print(f"ldp demo: could not start the services: {exc}", file=sys.stderr)
        if throwaway:
            shutil.rmtree(data_dir, ignore_errors=True)
        return 1
    code = 0
    try:
        banner(stack, keys, created and args.keep, data_dir, sys.stdout)
        collector = Api(stack.collector_url, keys.admin)
        aggregator = Api(stack.aggregator_url, keys.analyst)
        min_reports = max(10, min(1000, args.devices // 10))
        specs = [collector.post("/v1/metrics", s) for s in demo_specs(min_reports)]
        names = [s["name"] for s in specs]
        for s in specs:
            print(
                f"registered {s['name']} v{s['version']}: {s['kind']}, {s['mechanism']}, "
                f"eps = {s['epsilon']:g}, min_reports = {s['min_reports']}"
            )
        pin = stack.issuer_key_id()  # the issuer it started: its key, not the one served
        print(f"token issuer key {pin} (pinned by the fleet)")
        truth = draw_truth(args.devices, seed=args.seed)
        bar = Progress(f"{args.devices:,} devices reporting", len(specs) * args.devices)
        run = run_fleet(
            stack.collector_url,
            keys.ingest,
            specs,
            truth,
            progress=bar.update,
            timeout=args.timeout,
            issuer_keys=[pin],
            token_concurrency=args.token_concurrency,
        )
        bar.finish(f"{run.counters.delivered:,} reports delivered in {run.seconds:.1f}s")
        if not run.complete:
            print(
                f"warning: {run.expected - run.counters.delivered} reports not delivered "
                f"({run.counters})",
                file=sys.stderr,
            )
            code = 1
        _wait_for_counts(aggregator, names, args.devices, timeout=30.0)
        inside = total = 0
        for name in names:
            body: dict[str, Any] = aggregator.get(f"/v1/estimates/{name}")
            true = truth.of(name)
            print()
            known = truth.values_of(name)
            print(format_estimate(body, true, values=known))
            if body["n"] > args.devices:
                print(
                    f"note: the window also holds {body['n'] - args.devices} earlier reports "
                    "from this data folder"
                )
            if not body["suppressed"]:
                est = body["estimate"]
                rows = est.get("values", [est])
                if body["kind"] == "string":  # the discovered strings, not those listed to fill
                    rows = [r for r in rows if r["confident"]]
                    discovered = ", ".join(repr(r["category"]) for r in rows)
                    print(f"discovered without a list: {discovered or 'nothing yet'}")
                trues = ([true.get(r["category"], 0.0) for r in rows] if isinstance(true, dict)
                         else [true])
                inside += sum(
                    r["ci_low"] <= t <= r["ci_high"] for r, t in zip(rows, trues, strict=True)
                )
                total += len(rows)
        print(f"\n{inside} of {total} 95% intervals contain the truth (expect about 95%).")
        print(f"dashboard: {stack.aggregator_url}/  (sign in with the analyst key)")
        if args.keep:
            print(f"analyst key (sign in with it; never put a key in a URL): {keys.analyst}")
            print("running; Ctrl-C stops everything", flush=True)
            code = max(code, wait_for_signal(stack, sys.stderr))
    except (ApiError, StackError) as exc:
        print(f"ldp demo: {exc}", file=sys.stderr)
        code = 1
    finally:
        stack.stop()
        clear_endpoints(data_dir)
        if throwaway:
            shutil.rmtree(data_dir, ignore_errors=True)
    print("stopped everything the demo started", flush=True)
    return code


def cmd_demo(args: argparse.Namespace) -> int:
    if args.devices < 1:
        print("ldp demo: --devices must be >= 1", file=sys.stderr)
        return 2
    if not 1 <= args.token_concurrency <= Fleet.MAX_TOKEN_CONCURRENCY:
        print(f"ldp demo: --token-concurrency must be in [1, {Fleet.MAX_TOKEN_CONCURRENCY}],"
              f" got {args.token_concurrency}", file=sys.stderr)
        return 2
    if os.environ.get("LDP_BENCH_SMOKE", "") not in ("", "0") and args.devices > SMOKE_DEVICES:
        print(f"ldp demo: LDP_BENCH_SMOKE is set: {SMOKE_DEVICES} devices instead of "
              f"{args.devices:,}", file=sys.stderr)
        args.devices = SMOKE_DEVICES
    _survey()
    _audit()
    return _system(args)
