"""The capacity model checked by simulation: a fleet through the collector into Redis Cluster.

Starts a Redis Cluster of 3 masters (redis-server on loopback ports, append-only
everysec, stopped by pid: ``tests.support.servers.RedisClusterProcesses``),
the real collector with 2 uvicorn workers in cluster mode
(``LDP_REDIS_CLUSTER_NODES``) and a fresh 2048-bit issuer key (the production
size), registers ``--metrics`` metrics (GRR over 64 values), then runs fleets
(``benchmarks/fleet.py``: each device sends its reports of one epoch, one per
metric, in one gzip batch) and measures, per run, from the processes' own
accounting:

- collector CPU: utime + stime of the uvicorn supervisor and its workers
  (``/proc/<pid>/stat``, threads included: token checks run in a thread);
- Redis CPU: ``used_cpu_user + used_cpu_sys`` summed over the masters, and
  ``INFO commandstats`` (script calls, time inside commands);
- Redis memory: ``MEMORY USAGE <key> SAMPLES 0`` of the run's per-report state
  hashes and tally hashes, and the ``used_memory`` delta;
- bytes on the wire: every request and answer as framed on the socket;
- the machine's speed during the run (``benchmarks/speed.py``: this shared
  machine's cores vary by 1.5x within seconds and 2x within the hour), so that
  ``capacity`` compares runs in the speed of the moment.

Each run uses its own epoch, so the state of one run never shares a hash with
another's.  ``capacity.calibrate`` (small fleets: device batches of 1, 20 and
100 metrics, relay batches of 1000 with fresh tokens and with each device's token
repeated over 20 and over 100 metrics, as a relay sends them, and relay batches of
250: ``capacity.CALIBRATION``) gives the model's costs; then device
batches (``--device-sizes``, ``--device-metrics`` per device) and relay
batches (``--sizes``: 1000 devices' reports of one metric per request, metric
after metric, ``--metrics`` metrics) are compared with its prediction.

    .venv/bin/python benchmarks/bench_cluster_sim.py --metrics 200 --sizes 1e5,1e6,1e7 \
        --device-sizes 1e5 --save runs.json
    .venv/bin/python benchmarks/bench_cluster_sim.py --refit runs.json   # no run: refit

(``--save``: every run's totals as JSON, so that a change to the fit can be
tried on the same measurements; ``benchmarks/results/`` keeps them beside the
tables.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from benchmarks import _smoke, fleet
from benchmarks._services import (
    ADMIN_KEY,
    ANALYST_KEY,
    INGEST_KEY,
    REPO_ROOT,
    Service,
    Stack,
    start_uvicorn,
)
from benchmarks.speed import Probe
from collector.token_crypto import TokenKey
from ldp_cli.stack import DEV_POW
from tests.support.servers import RedisClusterProcesses

__all__ = ["Run", "Sim", "load", "main", "save"]

SPEC: dict[str, Any] = {
    "kind": "categorical", "epsilon": 1.0, "mechanism": "grr",
    "domain": [f"v{i}" for i in range(fleet.DOMAIN)], "epoch": "day", "min_reports": 1,
}
PREFIX = "sim.m"
ACCEPT_HOURS = 720
WORKERS = 2
CACHE = 65_536  # verified tokens each collector process keeps


@dataclass(frozen=True)
class Run:
    """What one fleet run cost, in totals (per report: the properties)."""

    metrics: int
    devices: int
    batch: int
    epoch: int
    requests: int
    reports: int
    accepted: int
    errors: int
    seconds: float
    collector_cpu: float
    redis_cpu: float
    script_calls: int
    script_usec: float
    index_calls: int
    state_bytes: int
    tally_bytes: int
    used_memory: int
    bytes_sent: int
    bytes_received: int
    tokens: int
    checks: int  #: token verifications the collector should do (one per token per batch)
    mint_seconds: float
    #: the machine's speed while the fleet ran: CPU ms per ``speed.unit_ms`` (0: not probed)
    speed_ms: float = 0.0
    #: CPU s of the masters' forked children (append-only-file rewrites), apart from
    #: ``redis_cpu``: ``INFO cpu`` used_cpu_*_children
    redis_child_cpu: float = 0.0

    def per_report(self, total: float) -> float:
        return total / max(self.reports, 1)

    @property
    def hits(self) -> int:
        """Token look-ups the verifiers' caches answered: each request looks its distinct
        tokens up (one per device batch; one per report of a relay batch, each from
        another device), and every look-up that is not one of ``checks`` is a hit."""
        lookups = self.requests if not self.batch else self.reports
        return max(0, lookups - self.checks)

    @property
    def collector_us(self) -> float:
        return 1e6 * self.per_report(self.collector_cpu)

    @property
    def redis_us(self) -> float:
        return 1e6 * self.per_report(self.redis_cpu)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _checks(metrics: int, devices: int, batch: int) -> int:
    """RSA checks the collector runs: one per device batch; for relay batches (metric
    after metric) one per token and worker while the tokens fit each worker's cache
    of verified tokens (``collector.token_crypto.Verifier``), else one per report."""
    if not batch:
        return devices
    if devices > CACHE:
        return devices * metrics
    return devices * min(metrics, WORKERS)


def _family(pid: int) -> list[int]:
    """``pid`` and every descendant (the uvicorn supervisor and its workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").iterdir():
            todo += [int(c) for c in (task / "children").read_text().split()]
    return out


@dataclass
class Sim:
    """The cluster, the collector and the registered metrics of one simulation."""

    cluster: RedisClusterProcesses
    collector: Service
    pem: bytes
    folder: Path
    metrics: int
    probe: Probe

    @classmethod
    def start(cls, folder: Path, metrics: int, workers: int = WORKERS,
              key_bits: int = 2048) -> Sim:
        """3 masters, an issuer key, the collector (``workers``), ``metrics`` specs,
        the speed probe."""
        cluster = RedisClusterProcesses.start(folder / "cluster")
        probe = None
        try:
            probe = Probe.start()
            pem = TokenKey.generate(key_bits).to_pem()
            (folder / "token_key.pem").write_bytes(pem)
            env = {
                "LDP_ENV": "dev", "LDP_REDIS_CLUSTER_NODES": cluster.nodes_env,
                "LDP_ADMIN_KEYS": ADMIN_KEY, "LDP_INGEST_KEYS": INGEST_KEY,
                "LDP_ANALYST_KEYS": ANALYST_KEY,
                "LDP_TOKEN_KEY_FILE": str(folder / "token_key.pem"),
                "LDP_RATE_LIMIT_PER_SECOND": "0", "LDP_LOG_LEVEL": "WARNING",
                **DEV_POW,  # the simulated devices register: a trivial proof of work
                # 30 days: each run gets an epoch of its own, from tomorrow back
                "LDP_ACCEPTANCE_HOURS": str(ACCEPT_HOURS),
            }
            collector = start_uvicorn("collector.app:create_app", env, folder, workers=workers)
        except BaseException:
            if probe is not None:
                probe.stop()
            cluster.stop()
            raise
        sim = cls(cluster, collector, pem, folder, metrics, probe)
        try:
            for name in fleet.metric_names(PREFIX, metrics):
                Stack.register(collector.url, {**SPEC, "name": name})
        except BaseException:
            sim.stop()
            raise
        return sim

    def stop(self) -> None:
        """Stop the collector, then every master (by pid), then the probe."""
        self.collector.stop()
        self.cluster.stop()
        self.probe.stop()

    def _nodes(self) -> list[redis.Redis]:
        return [redis.Redis(port=s.port) for s in self.cluster.servers]

    def _redis_totals(self) -> tuple[float, int, float, int, int, float]:
        """(CPU s, script calls, usec in scripts, SADDs, used_memory, children's CPU s)
        over the masters."""
        cpu, calls, usec, sadds, memory, children = 0.0, 0, 0.0, 0, 0, 0.0
        for node in self._nodes():
            with node:
                info = node.info("cpu")
                cpu += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
                children += (float(info["used_cpu_user_children"])
                             + float(info["used_cpu_sys_children"]))
                for name, stat in node.info("commandstats").items():
                    if name == "cmdstat_sadd":
                        sadds += int(stat["calls"])
                    if name in ("cmdstat_evalsha", "cmdstat_eval"):
                        calls += int(stat["calls"])
                        usec += float(stat["usec"])
                memory += int(node.info("memory")["used_memory"])
        return cpu, calls, usec, sadds, memory, children

    def _key_bytes(self, epoch: int) -> tuple[int, int]:
        """MEMORY USAGE of the epoch's state (``:d``) and tally (``:t``) hashes."""
        state = tally = 0
        for node in self._nodes():
            with node:
                for key in node.scan_iter(match=f"ldp:{{m:{PREFIX}*:{epoch}:*}}:*", count=1000):
                    size = int(node.memory_usage(key, samples=0) or 0)
                    if key.endswith(b":d"):
                        state += size
                    else:
                        tally += size
        return state, tally

    def run(self, metrics: int, devices: int, epoch: int, *, batch: int = 0,
            connections: int = 0, seed: int = 0) -> Run:
        """Mint the fleet's tokens, send its batches, measure what they cost.

        ``connections`` (0: 4 for relay batches, 2 for device batches): a device batch
        of many metrics makes one Redis call per metric at once, and more than about
        100 calls in flight to one master exhaust the cluster client's connection pool
        (``MaxConnectionsError`` -> 503).
        """
        connections = connections or (4 if batch else 2)
        units: list[fleet.Unit] = [("day", epoch)] * devices
        started = time.perf_counter()
        tokens = fleet.mint_tokens(self.pem, units)
        mint_seconds = time.perf_counter() - started
        token_file = self.folder / f"tokens-{epoch}.txt"
        token_file.write_text("\n".join(tokens))
        del tokens
        pids = _family(self.collector.pid)
        cpu0 = sum(_cpu_seconds(p) for p in pids)
        r0 = self._redis_totals()
        t0 = time.monotonic()
        argv = [sys.executable, str(REPO_ROOT / "benchmarks" / "fleet.py"),
                "--url", self.collector.url, "--key", INGEST_KEY, "--prefix", PREFIX,
                "--metrics", str(metrics), "--epoch", str(epoch), "--devices", str(devices),
                "--tokens", str(token_file), "--connections", str(connections),
                "--seed", str(seed), "--batch", str(batch)]
        out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO_ROOT,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        result = json.loads(out.stdout.strip().splitlines()[-1])
        t1 = time.monotonic()
        cpu1 = sum(_cpu_seconds(p) for p in pids)
        r1 = self._redis_totals()
        token_file.unlink()
        state, tally = self._key_bytes(epoch)
        return Run(
            metrics, devices, batch, epoch, int(result["requests"]), int(result["reports"]),
            int(result["accepted"]), int(result["errors"]), float(result["seconds"]),
            cpu1 - cpu0, r1[0] - r0[0], r1[1] - r0[1], r1[2] - r0[2], r1[3] - r0[3],
            state, tally, r1[4] - r0[4], int(result["bytes_sent"]),
            int(result["bytes_received"]), len(units),
            _checks(metrics, devices, batch), mint_seconds, self.probe.speed(t0, t1),
            r1[5] - r0[5],
        )


def run_table(runs: list[Run]) -> list[tuple[str, ...]]:
    """One row per run: the per-report costs."""
    return [(
        f"{r.devices:,} x {r.metrics}", f"{r.reports / r.requests:,.0f}", f"{r.reports:,}",
        f"{r.accepted:,}" + (f" ({r.errors} errors)" if r.errors else ""),
        f"{r.reports / r.seconds:,.0f}", f"{r.speed_ms:.2f}", f"{r.collector_us:.1f}",
        f"{r.redis_us:.1f}", f"{1e6 * r.per_report(r.redis_child_cpu):.1f}",
        f"{r.script_calls / r.reports:.2f}", f"{r.script_usec / max(r.script_calls, 1):.1f}",
        f"{r.per_report(r.state_bytes):.1f}", f"{r.per_report(r.used_memory):.1f}",
        f"{r.per_report(r.bytes_sent):.0f} / {r.per_report(r.bytes_received):.0f}",
    ) for r in runs]


RUN_HEADER = ("devices x metrics", "reports/request", "reports", "accepted", "reports/s",
              "speed (ms/unit)", "collector CPU us/report", "Redis CPU us/report",
              "Redis children CPU us/report",
              "script calls/report",
              "us/script call (in Redis)",
              "state B/report", "used_memory B/report", "wire B/report (up / down)")


def _report(costs: Any, runs: list[Run]) -> None:
    """Print the runs, the model against them and the model's tables."""
    from benchmarks import capacity
    from benchmarks._table import table

    print("\n" + table(RUN_HEADER, run_table(list(costs.runs) + runs)))
    print("\n" + capacity.check_table(costs, runs))
    for title, kwargs in capacity.SCENARIOS:
        print(f"\n{title}:\n\n" + capacity.model_table(costs, **kwargs))


def save(path: Path, costs: Any, runs: list[Run]) -> None:
    """Every run's totals and the costs timed alone (JSON), for ``--refit``."""
    path.write_text(json.dumps({
        "calibration": [asdict(r) for r in costs.runs],
        "runs": [asdict(r) for r in runs],
        "costs": {k: v for k, v in asdict(costs).items() if k != "runs"},
    }, indent=1))


def load(path: Path) -> tuple[Any, list[Run]]:
    """``save``'s file -> (costs refitted to its calibration runs, the other runs)."""
    from benchmarks import capacity
    from benchmarks.unit_costs import Slot

    data = json.loads(path.read_text())
    fields = dict(data["costs"])
    fields.update(slots=tuple(Slot(**slot) for slot in fields["slots"]),
                  runs=tuple(Run(**run) for run in data["calibration"]))
    for pair in ("collector", "redis", "up", "down"):
        fields[pair] = tuple(fields[pair])
    costs = capacity.Costs(**fields)
    return capacity.refit(costs, costs.runs), [Run(**run) for run in data["runs"]]


def main(argv: list[str] | None = None) -> int:
    from benchmarks import capacity
    from benchmarks._table import table

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="1e5",
                    help="reports per relay-batch run (batches of --batch), comma-separated")
    ap.add_argument("--device-sizes", default="1e5",
                    help="reports per device-batch run (one request per device)")
    ap.add_argument("--metrics", type=int, default=200, help="metrics per device (relay runs)")
    ap.add_argument("--device-metrics", type=int, default=100,
                    help="metrics per device in device-batch runs (one Redis call each, at once)")
    ap.add_argument("--batch", type=int, default=1000, help="reports per relay batch")
    ap.add_argument("--key-bits", type=int, default=2048, help="issuer key size")
    ap.add_argument("--save", type=Path, default=None,
                    help="write every run's totals here (JSON), to refit without rerunning")
    ap.add_argument("--refit", type=Path, default=None,
                    help="run nothing: refit the model to a --save file and print the tables")
    args = ap.parse_args(argv)
    _smoke.announce("bench_cluster_sim")
    if args.refit:
        costs, runs = load(args.refit)
        print(capacity.costs_table(costs) + "\n\n" + capacity.check_table(costs, costs.runs))
        _report(costs, runs)
        return 0
    def sizes(text: str, metrics: int) -> list[int]:  # a smoke run: 20 devices a fleet
        return [_smoke.size(int(float(s)), 20 * metrics) for s in text.split(",") if s]

    plan = [(n, args.device_metrics, 0) for n in sizes(args.device_sizes, args.device_metrics)]
    plan += [(n, args.metrics, args.batch) for n in sizes(args.sizes, args.metrics)]
    # the short fleets (a few seconds each) REPEATS times, in turn; check_table takes medians
    repeats = _smoke.size(capacity.REPEATS, 1)
    short = [shape for shape in plan if shape[0] <= 10**5]
    plan = short * (repeats - 1) + plan
    today = int(time.time() // 86400)
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ldp-sim-") as tmp:
        sim = Sim.start(Path(tmp), args.metrics, key_bits=args.key_bits)
        try:
            epochs = [today + 1 - i for i in range(ACCEPT_HOURS // 24)]
            calibration = 1 + len(capacity.CALIBRATION) * repeats
            if len(plan) > len(epochs) - calibration:
                raise SystemExit(f"{len(plan)} fleets and {calibration} calibration fleets "
                                 f"need more than the {len(epochs)} epochs accepted")
            costs = capacity.calibrate(sim.run, epochs[-calibration:], args.key_bits, sim.probe)
            print(capacity.costs_table(costs), flush=True)
            print("\n" + capacity.check_table(costs, costs.runs), flush=True)
            runs: list[Run] = []
            for (n, metrics, batch), epoch in zip(plan, epochs, strict=False):
                runs.append(sim.run(metrics, n // metrics, epoch, batch=batch, seed=len(runs)))
                print(table(RUN_HEADER, run_table(runs[-1:])), flush=True)
            if args.save:
                save(_smoke.output(args.save), costs, runs)
            _report(costs, runs)
        finally:
            sim.stop()
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
