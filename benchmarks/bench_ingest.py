"""Ingest benchmark: the real collector against a minimal endpoint and raw Redis.

Starts a private Redis, then the collector (``collector.app:create_app``, full
validation and exactly-once dedupe) with 2 uvicorn workers (1 with --quick), and
the minimal FastAPI endpoint (``benchmarks.minimal_endpoint``) the same way;
drives each from a separate process (``benchmarks/loadgen.py``: pre-built
requests, keep-alive loopback connections, bounded time and count) at batch
sizes 1, 100 and 1000, the last as JSON and as the binary batch of
``ldp_core.wire``.  Single-report requests run 3 times, each run the collector and
the minimal endpoint in alternating short rounds (``benchmarks/interleave.py``,
ABBA...: the goal is 80% of the minimal endpoint in each run, and a shared
machine's drift weighs on both sides of a run's ratio alike).  In the same run
it measures the raw Redis ceiling for the
same increments (redis-benchmark, pipelined HINCRBY; a redis-py pipeline loop
if redis-benchmark is not on PATH) and Redis' own CPU while it served.

Run: ``.venv/bin/python benchmarks/bench_ingest.py [--quick] [--plain] [--single] [--limiter]
[--connections N]`` (``--limiter``: the production rate limiter on, ``LIMITER_ON``; off
otherwise; ``--connections``: single-report load connections, 32 by default).
The tables are printed and written to
``benchmarks/results/<UTC date>-<time>-ingest[-single][-limiter][-quick].md``
(``--no-write``: not).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _smoke
from benchmarks._services import INGEST_KEY, REPO_ROOT, Stack, redis_cpu_seconds
from benchmarks._table import header, table

__all__ = ["BENCH_SPEC", "CASES", "LIMITER_ON", "IngestRun", "alternating_run", "load",
           "one_run", "redis_ceiling", "script_usec", "section", "single_verdict", "summarise",
           "write_result"]

#: The metric every ingest run reports to (GRR, one counter per report).
BENCH_SPEC: dict[str, Any] = {
    "name": "bench.ingest", "kind": "categorical", "epsilon": 1.0, "mechanism": "grr",
    "domain": [f"v{i}" for i in range(64)], "epoch": "day", "min_reports": 1,
}
#: Load connections by batch size.  Single reports: 32 (``--connections``), 8 until
#: 2026-12-03.  The minimal endpoint is saturated at 8 (its requests/s did not rise
#: at 16, 32 or 64); the collector shares a script call among more requests the
#: more are in flight (2.1-2.7 at 8, 4.6-6.9 at 32), so 8 measured it below the load
#: it is built for; and at 8 a third of the rounds ran on one worker
#: (``benchmarks/interleave.py``).  docs/performance.md has the sweep.
CONNECTIONS = {1: 32, 100: 4, 1000: 4}
#: Single-report requests built per second of a side's alternating rounds (the most a
#: side can use; a side that uses them all is only a lower bound).
SINGLE_RATE = 12_000
#: ``--limiter``: the production rate limiter on (a script call per request, as in
#: production), with a rate no single load generator reaches, so that its cost is
#: measured and nothing is refused (the default 1000/s per address would throttle
#: a generator whose every connection comes from 127.0.0.1).
LIMITER_ON = {"LDP_RATE_LIMIT_PER_SECOND": "1000000", "LDP_RATE_LIMIT_BURST": "1000000"}
PLAIN = "collector, plain uvicorn --workers"


@dataclass(frozen=True)
class IngestRun:
    """Median of repeated loadgen runs for one (server, workers, batch)."""

    server: str
    workers: int
    batch: int
    body: str
    reports_per_s: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    redis_cores: float
    script_us: float
    errors: int
    accepted_ok: bool
    exhausted: bool


def load(url: str, batch: int, duration: float, seed: int, epoch: int,
         binary: bool = False, fake_tokens: bool = False, metrics: int = 1,
         per_token: int = 1) -> dict[str, Any]:
    """One loadgen subprocess run; its JSON result plus Redis CPU is added by the caller.

    The generator mints its tokens before the clock starts (0.1-0.3 ms each): it
    prepares at most 100,000 reports a second of the run with one token per report
    (beyond what the collector can verify here), 300,000 with shared tokens (a run
    that uses them all says "generator ran out").
    """
    argv = [
        sys.executable, str(REPO_ROOT / "benchmarks" / "loadgen.py"),
        "--url", url, "--key", INGEST_KEY, "--metric", BENCH_SPEC["name"],
        "--version", "1", "--epoch", str(epoch), "--mechanism", "grr",
        "--domain-size", str(len(BENCH_SPEC["domain"])), "--batch", str(batch),
        "--connections", str(CONNECTIONS.get(batch, 4)), "--duration", str(duration),
        "--seed", str(seed),
        "--max-reports", str(int((100_000 if per_token == 1 else 300_000) * duration)),
        "--max-requests", str(int(8_000 * duration)), *(["--binary"] if binary else []),
        *(["--fake-tokens"] if fake_tokens else []), "--metrics", str(metrics),
        "--per-token", str(per_token),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300 + duration, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def one_run(url: str, redis_url: str, batch: int, duration: float, seed: int,
            epoch: int, binary: bool = False, fake_tokens: bool = False,
            metrics: int = 1, per_token: int = 1) -> dict[str, Any]:
    """One loadgen run with the Redis CPU it caused, and Redis' own time per report in
    the ingest script (INFO commandstats, EVALSHA; 0 for the minimal endpoint).

    Redis CPU is sampled around the whole subprocess; the loadgen's own setup
    (building requests) does not touch Redis, so cores are charged to the
    measured window only.
    """
    before, script_before = redis_cpu_seconds(redis_url), script_usec(redis_url)
    result = load(url, batch, duration, seed, epoch, binary, fake_tokens, metrics, per_token)
    result["redis_cores"] = (redis_cpu_seconds(redis_url) - before) / result["seconds"]
    script = script_usec(redis_url) - script_before
    result["script_us"] = script / result["reports"] if result["reports"] else 0.0
    return result


def alternating_run(collector_url: str, minimal_url: str, redis_url: str, seed: int,
                    epoch: int, metrics: int = 1, per_token: int = 1, quick: bool = False,
                    pids: tuple[int, int] | None = None,
                    connections: int = CONNECTIONS[1]) -> dict[str, dict[str, Any]]:
    """One run of single-report requests, the collector and the minimal endpoint in
    alternating rounds from one generator (``benchmarks/interleave.py``): 12 ABBA
    rounds of 0.25 s a side (6 of 0.15 s with ``quick``).  Its ratio of requests/s is
    one run's verdict on the single-report goal."""
    rounds, seconds = _smoke.size((6, 0.15) if quick else (12, 0.25), (2, 0.1))
    argv = [
        sys.executable, str(REPO_ROOT / "benchmarks" / "interleave.py"),
        "--collector", collector_url, "--minimal", minimal_url, "--redis", redis_url,
        "--key", INGEST_KEY, "--metric", BENCH_SPEC["name"], "--epoch", str(epoch),
        "--domain-size", str(len(BENCH_SPEC["domain"])), "--metrics", str(metrics),
        "--per-token", str(per_token), "--connections", str(connections),
        "--rounds", str(rounds), "--round-seconds", str(seconds), "--seed", str(seed),
        # requests built per second of a side's rounds: the minimal endpoint took
        # ~5,000/s on this machine when quiet and ran out of the default 4,000
        "--rate", str(SINGLE_RATE),
        *(["--pids", *map(str, pids)] if pids else []),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True)
    result: dict[str, dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def script_usec(url: str) -> float:
    """Microseconds Redis spent in EVALSHA so far (its own accounting, the calls
    made from inside the script included)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats").get("cmdstat_evalsha", {})
    finally:
        client.close()
    return float(stats.get("usec", 0))


def summarise(server: str, workers: int, batch: int, runs: list[dict[str, Any]],
              body: str = "JSON") -> IngestRun:
    """Medians of reports/s, p50, p99 and Redis cores over repeated runs."""

    def med(k: str) -> float:
        return statistics.median(float(x[k]) for x in runs)

    return IngestRun(
        server, workers, batch, body, med("reports_per_s"), med("requests_per_s"),
        med("p50_ms"), med("p99_ms"), med("redis_cores"), med("script_us"),
        sum(int(x["errors"]) for x in runs),
        all(x["accepted"] == x["reports"] for x in runs), any(x["exhausted"] for x in runs),
    )


def redis_ceiling(redis_url: str, requests: int = 300_000) -> tuple[str, float]:
    """(method, HINCRBY/s) for pipelined increments of the same kind (random field of 64)."""
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    tool = shutil.which("redis-benchmark")
    if tool:
        out = subprocess.run(
            [tool, "-h", "127.0.0.1", "-p", port, "-n", str(requests), "-P", "100",
             "-c", "4", "-r", "64", "--csv", "HINCRBY", "bench:ceiling", "__rand_int__", "1"],
            capture_output=True, text=True, timeout=120, check=True,
        )
        last = out.stdout.strip().splitlines()[-1]
        return "redis-benchmark -P 100 -c 4", float(last.split(",")[1].strip('"'))
    import random

    import redis

    client = redis.Redis.from_url(redis_url)
    rng = random.Random(0)
    start = time.perf_counter()
    done = 0
    while done < requests:
        pipe = client.pipeline(transaction=False)
        for _ in range(1000):
            pipe.hincrby("bench:ceiling", str(rng.randrange(64)), 1)
        pipe.execute()
        done += 1000
    client.close()
    return "redis-py pipeline of 1000", done / (time.perf_counter() - start)


def _loop_note() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "The event loop here is asyncio's."
    return ("The event loop here is uvloop's (the server extra installs it), which sets "
            "TCP_NODELAY on every TCP socket itself: the plain rows are not stalled.")


#: (batch, binary body, metrics per batch, reports per token, repeats) of a full run.
#: One report per token: every report another device.  The realistic batch: 50
#: devices x 20 metrics, each device's 20 reports sharing its token of the epoch.
#: The minimal endpoint gets the JSON batches of one metric (it checks nothing).
CASES = ((1, False, 1, 1, 3), (1, False, 20, 20, 3), (100, False, 1, 1, 1),
         (1000, False, 1, 1, 3), (1000, True, 1, 1, 3), (1000, False, 20, 20, 3),
         (1000, True, 20, 20, 3))


def section(quick: bool = False, plain: bool = False, single: bool = False,
            limiter: bool = False, connections: int = CONNECTIONS[1]) -> str:
    """The ingest tables (Markdown): 2 workers (1 with ``quick``); ``single``: only
    the single-report cases; ``limiter``: the collector's rate limiter on (``LIMITER_ON``;
    the benchmarks run with it off otherwise); ``connections``: the load's connections
    for single reports."""
    duration = _smoke.size(1.5 if quick else 3.0, 0.1)
    cases = tuple((*case[:4], 1) for case in CASES) if quick or _smoke.on() else CASES
    if single:
        cases = tuple(case for case in cases if case[0] == 1)
    workers = 1 if quick else 2
    runs: list[IngestRun] = []
    shares: dict[str, list[float]] = {}
    singles: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    load_avg = os.getloadavg()
    with Stack.start() as stack:
        epoch = int(time.time() // 86400)
        method, ceiling = redis_ceiling(stack.redis_url,
                                        _smoke.size(100_000 if quick else 500_000, 5_000))
        # Both servers up at once, their runs interleaved (collector, minimal,
        # collector, ...): a drift of the machine's speed during the section then
        # weighs on both sides of every ratio alike.
        collector = stack.collector(workers, extra=LIMITER_ON if limiter else None)
        minimal = stack.app("benchmarks.minimal_endpoint:create_app", workers)
        try:
            stack.register(collector.url, BENCH_SPEC)
            for k in range(max(case[2] for case in cases)):
                stack.register(collector.url, {**BENCH_SPEC, "name": f"{BENCH_SPEC['name']}.{k}"})
            for batch, binary, metrics, per_token, repeats in cases:
                pair: dict[str, list[dict[str, Any]]] = {"collector": [], "minimal": []}
                for r in range(repeats):
                    seed = 7 * batch + workers + 1000 * r + 500 * binary
                    if batch == 1:
                        both = alternating_run(collector.url, minimal.url, stack.redis_url,
                                               seed, epoch, metrics, per_token, quick,
                                               (collector.pid, minimal.pid), connections)
                        pair["collector"].append(both["collector"])
                        pair["minimal"].append(both["minimal"])
                        continue
                    pair["collector"].append(one_run(collector.url, stack.redis_url, batch,
                                                     duration, seed, epoch, binary,
                                                     metrics=metrics, per_token=per_token))
                    if not binary and metrics == 1:
                        pair["minimal"].append(one_run(minimal.url, stack.redis_url, batch,
                                                       duration, seed, epoch,
                                                       fake_tokens=True))
                body = ("binary" if binary else "JSON") + (
                    f", {metrics} metrics, {per_token} per token" if metrics > 1 else "")
                runs.append(summarise("collector", workers, batch, pair["collector"], body))
                if pair["minimal"] and (batch > 1 or metrics == 1):
                    runs.append(summarise("minimal", workers, batch, pair["minimal"]))
                if batch == 1:
                    shares[body] = [c["requests_per_s"] / m["requests_per_s"] for c, m in
                                    zip(pair["collector"], pair["minimal"], strict=True)]
                    singles += [(body, c, m) for c, m in
                                zip(pair["collector"], pair["minimal"], strict=True)]
        finally:
            for svc in (collector, minimal):
                svc.stop()
                stack.services.remove(svc)
        if plain and workers > 1:
            # The same collector under plain `uvicorn --workers N` (Nagle on, see
            # benchmarks/uvicorn_tcp.py): one run per batch, for the record.
            svc = stack.collector(workers, nodelay=False)
            try:
                for batch in (1, 100):
                    seed = 11 * batch + workers
                    runs.append(summarise(PLAIN, workers, batch, [
                        one_run(svc.url, stack.redis_url, batch, duration, seed, epoch)]))
            finally:
                svc.stop()
                stack.services.remove(svc)
    note = ("Rate limiter ON (LDP_RATE_LIMIT_PER_SECOND=1000000, burst 1000000: a take "
            "per request, none refused); 'requests per script call' counts its calls too.\n\n"
            if limiter else "Rate limiter off (LDP_RATE_LIMIT_PER_SECOND=0).\n\n")
    return (note + _tables(runs, shares, singles, method, ceiling, duration, load_avg,
                           connections)
            + _single_table(singles))


def _single_table(singles: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> str:
    """Each single-report run: both sides' requests/s, the ratio, and where the CPU went
    (server processes, workers included, and Redis, per request)."""
    if not singles:
        return ""
    rows = []
    for run, (body, c, m) in enumerate(singles):
        rows.append((body, run + 1, f"{c['requests_per_s']:,.0f}", f"{m['requests_per_s']:,.0f}",
                     f"{c['requests_per_s'] / m['requests_per_s']:.0%}",
                     f"{c.get('server_cpu_ms', 0):.2f} / {m.get('server_cpu_ms', 0):.2f}",
                     f"{c.get('redis_cpu_ms', 0):.3f} / {m.get('redis_cpu_ms', 0):.3f}",
                     f"{c.get('requests_per_call', 0):.2f}",
                     f"{c.get('one_worker_rounds', 0)} / {m.get('one_worker_rounds', 0)}"
                     f" of {len(c['rounds'])}",
                     " ".join(f"{x:,.0f}" for x in c["rounds"]),
                     " ".join(f"{x:,.0f}" for x in m["rounds"])))
    return "\n" + table(("body", "run", "collector req/s", "minimal req/s", "ratio",
                         "server CPU ms/request (collector / minimal)",
                         "Redis CPU ms/request (collector / minimal)",
                         "collector requests per script call",
                         "rounds on one worker (collector / minimal)", "collector rounds req/s",
                         "minimal rounds req/s"), rows) + "\n"


def single_verdict(runs: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """The single-report goal's verdict over (collector, minimal) runs: each run's
    requests/s ratio >= 0.8.  A side that used every request built for it ran faster
    than it was fed: its requests/s is a lower bound, and no verdict is given.

    >>> side = {"requests_per_s": 100.0, "exhausted": False}
    >>> single_verdict([({**side, "requests_per_s": 85.0}, side)] * 3)
    'met'
    >>> single_verdict([({**side, "requests_per_s": 70.0}, side), (side, side)])
    'missed in 1 of 2 runs'
    >>> single_verdict([(side, {**side, "exhausted": True})])
    'not measured: the generator ran out of requests'
    """
    if any(c["exhausted"] or m["exhausted"] for c, m in runs):
        return "not measured: the generator ran out of requests"
    low = sum(c["requests_per_s"] < 0.8 * m["requests_per_s"] for c, m in runs)
    return f"missed in {low} of {len(runs)} runs" if low else "met"


def _tables(runs: list[IngestRun], shares: dict[str, list[float]],
            singles: list[tuple[str, dict[str, Any], dict[str, Any]]], method: str,
            ceiling: float, duration: float, load_avg: tuple[float, float, float],
            connections: int) -> str:
    loads = {**CONNECTIONS, 1: connections}
    by_key = {(r.server, r.workers, r.batch, r.body): r for r in runs}
    rows = []
    for r in runs:
        ref = by_key.get(("minimal", r.workers, r.batch, "JSON"))
        ratio = ""
        if r.server == "collector" and r.batch == 1 and r.body in shares:
            # single reports: each run has its own paired minimal rounds
            ratio = f"{statistics.median(shares[r.body]):.2f} (median of runs)"
        elif ref and r.server == "collector":
            ratio = f"{r.reports_per_s / ref.reports_per_s:.2f}"
        limit = f"{1e6 / r.script_us:,.0f}" if r.script_us else ""
        flags = []
        if r.errors:
            flags.append(f"{r.errors} errors")
        if r.server == "collector" and not r.accepted_ok:
            flags.append("accepted != sent")
        if r.exhausted:
            flags.append("generator ran out (lower bound)")
        rows.append((
            r.server, r.workers, r.batch, r.body, f"{r.reports_per_s:,.0f}",
            f"{r.requests_per_s:,.0f}", f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}",
            f"{r.redis_cores:.2f}", f"{r.script_us:.2f}" if r.script_us else "", limit, ratio,
            "; ".join(flags) or "ok",
        ))
    goals = []
    best = max((r for r in runs if r.server == "collector" and r.batch >= 100),
               key=lambda r: r.reports_per_s, default=None)
    if best is not None:
        goals.append((
            "batched ingest (full validation + exactly-once) >= 250,000 reports/s",
            f"{best.reports_per_s:,.0f} ({best.body}, batch {best.batch}); the ingest "
            f"script alone: {1e6 / best.script_us:,.0f}/s per Redis core" if best.script_us
            else f"{best.reports_per_s:,.0f}",
            "met" if best.reports_per_s >= 250_000
            else f"missed ({best.reports_per_s / 250_000:.0%} of goal)"))
    for body, single in shares.items():
        goals.append((f"single-report requests/s >= 80% of minimal in every run "
                      f"({runs[0].workers} worker(s); {body})",
                      ", ".join(f"{x:.0%}" for x in single),
                      single_verdict([(c, m) for b, c, m in singles if b == body])))
    text = [
        header("Ingest (POST /v1/reports over loopback HTTP)"),
        f"Load average at the start {load_avg[0]:.2f} / {load_avg[1]:.2f} / {load_avg[2]:.2f} "
        f"(1 / 5 / 15 min).  Load from a separate process "
        f"({', '.join(f'{c} connections at batch {b}' for b, c in loads.items())}), "
        f"{duration:g} s per run, median of the runs shown in CASES, the collector's and the "
        "minimal endpoint's runs interleaved; single reports: each run alternates the two "
        "in ABBA rounds (12 x 0.25 s a side; 6 x 0.15 s with --quick) from one generator "
        "(benchmarks/interleave.py; 'rounds on one worker': those in which one of a side's "
        "two workers did 90 % or more of its server CPU); GRR over 64 values, one counter "
        "per report; "
        "signed tokens of the epoch (tokens-v2, the test issuer key, 1024 bits), one per "
        "report (each report another device) or, in the '20 metrics' rows, one per 20 "
        "reports (50 devices x 20 metrics per batch); fresh report ids; the minimal "
        "endpoint (JSON, no checks) gets unsigned tokens of the same length.  "
        "'script us/report': Redis' own time in the ingest script per report (INFO "
        "commandstats); 'Redis limit' = 1e6 / that: the most one Redis core can ingest "
        "with these writes.  The generator shares the machine's cores with the server "
        "and Redis.  Multi-worker rows run uvicorn's own supervisor on a TCP_NODELAY "
        f"listener (benchmarks/uvicorn_tcp.py).  {_loop_note()}\n",
        table(("server", "workers", "batch", "body", "reports/s", "requests/s", "p50 ms",
               "p99 ms", "Redis CPU (cores)", "script us/report", "Redis limit reports/s",
               "reports/s vs minimal (JSON)", "check"), rows),
        "",
        f"Raw Redis ceiling, same run ({method}): {ceiling:,.0f} HINCRBY/s.\n",
        table(("goal", "measured", "verdict"), goals),
    ]
    return "\n".join(text) + "\n"


def write_result(text: str, name: str) -> Path:
    """Write ``text`` to ``benchmarks/results/<UTC date>-<time>-<name>.md``, with the
    commit it measured (and "+ changes" if the work tree differs from it)."""
    import datetime as dt

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True,
                                  text=True, check=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    dirty = " + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    folder = _smoke.output(REPO_ROOT / "benchmarks" / "results")
    folder.mkdir(parents=True, exist_ok=True)
    stamp = f"{dt.datetime.now(dt.UTC):%Y-%m-%d-%H%M}"
    path = folder / f"{stamp}-{name}.md"
    for n in range(2, 100):  # two runs in one minute: keep both
        if not path.exists():
            break
        path = folder / f"{stamp}-{name}-{n}.md"
    path.write_text(f"{text.rstrip()}\n\nCode measured: {commit}{dirty}.\n")
    return path


def main() -> None:
    """Print the ingest section and write it to ``benchmarks/results/``."""
    ap = argparse.ArgumentParser(description="ingest benchmark")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plain", action="store_true",
                    help="also plain `uvicorn --workers N` (Nagle on), one run per batch")
    ap.add_argument("--single", action="store_true", help="only the single-report cases")
    ap.add_argument("--limiter", action="store_true",
                    help="the collector's rate limiter on (a take per request, none refused)")
    ap.add_argument("--connections", type=int, default=CONNECTIONS[1],
                    help="the load's connections for single-report requests")
    ap.add_argument("--no-write", action="store_true",
                    help="print only; do not write benchmarks/results/")
    args = ap.parse_args()
    _smoke.announce("bench_ingest")
    text = section(args.quick, args.plain, args.single, args.limiter, args.connections)
    print(text)
    if not args.no_write:
        name = ("ingest" + "-single" * args.single + "-limiter" * args.limiter
                + "-quick" * args.quick
                + f"-{args.connections}conn" * (args.connections != CONNECTIONS[1]))
        print(f"wrote {write_result(text, name)}", file=sys.stderr)


if __name__ == "__main__":
    main()
