"""A capacity model to a billion devices, from per-report costs measured on this machine.

The cost of a request is linear in what it does (fitted by least squares over
calibration fleets of different shapes through the real collector, 2 workers,
into a 3-master Redis Cluster: ``benchmarks/bench_cluster_sim.py``):

    collector CPU = a + b * reports + c * Redis commands + v * tokens verified
                    + h * tokens found in the verifier's cache
    Redis CPU     = p + q * reports + r * Redis commands

where a Redis command is one ingest script call (one per (metric, epoch,
shard) slot of the batch) or one write of the read index (one per metric of
the batch, cluster mode); ``v`` (OpenSSL RSASSA-PSS, 2048 bits) is timed
alone; ``h`` is what a token costs when a worker's cache of verified tokens
already holds it (a relay's batches carry each device's token once per metric),
timed alone too (``Verifier.check_all`` over a batch of cached tokens: fitted
with the others it came out negative, -4.4 us, below what small fleets
resolve).  Memory:
the per-report state of a slot holding n reports is
``bucket_bytes * B * (1 - exp(-n / B)) + rest_bytes * n`` (B = 65,536 buckets),
fitted from ``MEMORY USAGE`` of slots filled to several depths, which also
give the Redis CPU of a script call as the buckets fill (where the flat model
ends); the counters are ``MEMORY USAGE`` of the simulated tally hashes.  The
issuer's CPU per token (``TokenKey.blind_sign``, 2048 bits) and the
aggregator's time per estimate are timed alone.

Deployment assumptions (stated, change them here): every device sends its
reports of a day in one request (an SDK flush); peak-to-average ``PEAK``;
cores and masters run at ``UTIL``; state kept for the epoch plus the acceptance
window (``ACCEPT_HOURS``), counters for ``TALLY_DAYS``; at least ``SHARDS``
slots per metric-epoch (more for hot metrics: ``shards_for``); ``MASTER_GIB``
usable per master; one token per device and day (tokens-v2), checked once
per device batch.

    .venv/bin/python benchmarks/bench_cluster_sim.py --metrics 200 --sizes 1e5,1e6,1e7 \
        --device-sizes 1e5      # calibrates, checks, prints the model (docs/tokens.md)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from benchmarks._table import table
from benchmarks.bench_cluster_sim import Run
from benchmarks.unit_costs import Slot, estimate_ms, hit_us, sign_ms, slot_profile, verify_us

__all__ = ["Costs", "calibrate", "check_table", "costs_table", "model_table", "predict", "refit"]

PEAK = 3.0
UTIL = 0.6
ACCEPT_HOURS = 96
STATE_DAYS = 1 + (ACCEPT_HOURS + 1) / 24  # the epoch, the acceptance window, 1 h margin
TALLY_DAYS = 400
SHARDS = 4
MASTER_GIB = 25.0
BUCKETS = 65_536
DEVICES = (10**6, 10**8, 10**9)
METRICS = (1, 20, 100)
SCENARIOS: tuple[tuple[str, dict[str, int]], ...] = (
    ("Device batches, one token per device and day (tokens-v2)", {}),
    ("Device batches, one token per report (tokens v1, before)", {"tokens_per_device": 0}),
    ("Relay batches of 1000 reports of one metric, every token checked", {"relay": 1000}),
)
TOKEN_WIRE_BYTES = 288  # a 2048-bit token: 288 random bytes, in 384 base64url characters
FLAT_DEPTH = 38  # rests per bucket up to which a script call costs about a fresh one


@dataclass(frozen=True)
class Costs:
    """The model's measured coefficients (see the module docstring)."""

    collector: tuple[float, float, float]  # a, b, c in us
    verify_us: float
    redis: tuple[float, float, float]  # p, q, r in us
    up: tuple[float, float]  # bytes per request, per report (device batches)
    down: tuple[float, float]
    bucket_bytes: float
    rest_bytes: float
    tally_bytes: float  # per metric-epoch (GRR d = 64, SHARDS shards)
    sign_ms: float
    estimate_ms: float
    slots: tuple[Slot, ...]
    runs: tuple[Run, ...]
    key_bits: int
    deploy_verify_us: float  # the same check with a 2048-bit key (the deployed size)
    hit_us: float = 0.0  # h: a token answered by the verifier's cache


def _commands(run: Run) -> float:
    return (run.script_calls + run.index_calls) / run.requests


def predict(costs: Costs, reports: float, commands: float, tokens: float,
            verify: float | None = None, hits: float = 0.0) -> tuple[float, float]:
    """(collector us, Redis us) per report for requests of that shape: ``tokens``
    checked, ``hits`` answered by the verifier's cache (``verify``: us per token
    check, default the simulation's key size)."""
    a, b, c = costs.collector
    p, q, r = costs.redis
    v = costs.verify_us if verify is None else verify
    return ((a + b * reports + c * commands + v * tokens + costs.hit_us * hits) / reports,
            (p + q * reports + r * commands) / reports)


def _fit(runs: Sequence[Run], y: Callable[[Run], float]) -> tuple[float, float, float]:
    """Least squares of ``y`` (per request) on (1, reports, commands), each run
    weighted by 1 / its value: the relative errors are what is minimised."""
    ys = np.array([y(r) for r in runs])
    x = np.array([[1.0, r.reports / r.requests, _commands(r)] for r in runs]) / ys[:, None]
    a, b, c = np.linalg.lstsq(x, np.ones(len(runs)), rcond=None)[0]
    return float(a), float(b), float(c)


def _collector_fit(runs: Sequence[Run], v: float, h: float) -> tuple[float, float, float]:
    """a, b, c: collector CPU per request less the token checks (``v`` each) and the
    cache answers (``h`` each), both timed alone."""
    return _fit(runs, lambda r: 1e6 * r.collector_cpu / r.requests
                - (v * r.checks + h * r.hits) / r.requests)


def refit(costs: Costs, runs: Sequence[Run], hits: bool) -> Costs:
    """``costs`` with a, b, c and p, q, r fitted to ``runs``; without ``hits`` the
    cache answers cost nothing apart (h = 0): the model as it was before h, for the
    record.  ``v`` and ``h`` stay as timed."""
    h = costs.hit_us if hits else 0.0
    red = _fit(runs, lambda r: 1e6 * r.redis_cpu / r.requests)
    return replace(costs, collector=_collector_fit(runs, costs.verify_us, h), hit_us=h,
                   redis=red)


def calibrate(run: Callable[..., Run], epochs: Sequence[int], key_bits: int = 2048) -> Costs:
    """Fleets of five shapes (1, 20 and 100 metrics per device; relay batches of 1000
    with fresh tokens, and with each token repeated in 20 metrics' batches as a relay
    sends them), after a warm-up fleet, then the costs timed alone; ``run`` is
    ``Sim.run``, one epoch each (six).  The relay fleets hold 10^5 reports each: at
    ~5 us of Redis CPU per report, 10^4 gave Redis 50 ms to measure, a few of its
    accounting ticks (q came out 4.5 us with either size: docs/tokens.md)."""
    run(10, 100, epochs[4], seed=9)
    runs = (run(1, 1000, epochs[0]), run(20, 100, epochs[1], seed=1),
            run(100, 30, epochs[2], seed=2), run(1, 100_000, epochs[3], batch=1000, seed=3),
            run(20, 5_000, epochs[5], batch=1000, seed=4))
    v, h = verify_us(key_bits), hit_us(key_bits)
    collector = _collector_fit(runs, v, h)
    red = _fit(runs, lambda r: 1e6 * r.redis_cpu / r.requests)
    device = [r for r in runs if r.batch == 0]
    x = np.array([[1.0, r.reports / r.requests] for r in device])
    up = np.linalg.lstsq(x, np.array([r.bytes_sent / r.requests for r in device]), rcond=None)[0]
    down = np.linalg.lstsq(x, np.array([r.bytes_received / r.requests for r in device]),
                           rcond=None)[0]
    slots = slot_profile()
    # Bytes per bucket at depth k = bucket_bytes + rest_bytes * k (two deepest fills).
    deep, deeper = slots[-2], slots[-1]
    rest = (deeper.bytes_per_bucket - deep.bytes_per_bucket) / (deeper.depth - deep.depth)
    bucket = slots[0].bytes_per_bucket - rest * slots[0].depth
    tally = statistics.median(r.tally_bytes / r.metrics for r in runs)
    return Costs(collector, v, red, (float(up[0]), float(up[1])),
                 (float(down[0]), float(down[1])), bucket, rest, tally, sign_ms(),
                 estimate_ms(), tuple(slots), runs, key_bits,
                 v if key_bits == 2048 else verify_us(2048), h)


def state_bytes(costs: Costs, n_slot: float) -> float:
    """Bytes of the per-report state of one slot holding ``n_slot`` reports."""
    return costs.bucket_bytes * BUCKETS * -math.expm1(-n_slot / BUCKETS) + costs.rest_bytes * n_slot


def costs_table(costs: Costs) -> str:
    """The measured coefficients."""
    a, b, c = costs.collector
    p, q, r = costs.redis
    rows = [
        ("collector CPU per request / report / Redis command", f"{a:.0f} / {b:.1f} / {c:.1f} us"),
        (f"collector CPU per token check ({costs.key_bits} / 2048 bits)",
         f"{costs.verify_us:.1f} / {costs.deploy_verify_us:.1f} us"),
        ("collector CPU per token found in the verifier's cache (h)", f"{costs.hit_us:.1f} us"),
        ("Redis CPU per request / report / command", f"{p:.1f} / {q:.1f} / {r:.1f} us"),
        ("upload per request / report (device batch, gzip)",
         f"{costs.up[0]:.0f} / {costs.up[1]:.0f} B"),
        ("answer per request / report", f"{costs.down[0]:.0f} / {costs.down[1]:.0f} B"),
        ("state per occupied bucket / per report", f"{costs.bucket_bytes:.1f} / "
         f"{costs.rest_bytes:.2f} B"),
        ("counters per metric-epoch (GRR d = 64, 4 shards)", f"{costs.tally_bytes:,.0f} B"),
        ("issuer CPU per token (blind signature, 2048 bits)", f"{costs.sign_ms:.2f} ms"),
        ("aggregator per estimate (GRR d = 64, n = 10^6)", f"{costs.estimate_ms:.2f} ms"),
    ]
    slots = [(f"{s.depth:,}", f"{s.depth * BUCKETS:,.0f}", f"{s.bytes_per_bucket / s.depth:.2f}",
              f"{s.redis_us_per_call:.1f}", f"{s.aof_bytes_per_call:,.0f}") for s in costs.slots]
    return (table(("measure", "value"), rows) + "\n\n" + table(
        ("rests per bucket", "n per slot", "state B/report", "Redis CPU us per 1-report call",
         "AOF B per call"), slots))


def check_table(costs: Costs, runs: Sequence[Run]) -> str:
    """Each simulated fleet against the model's prediction for its shape."""
    rows = []
    for run in runs:
        col, red = predict(costs, run.reports / run.requests, _commands(run),
                           run.checks / run.requests, hits=run.hits / run.requests)
        rows.append((
            f"{run.reports:,}", f"{run.reports / run.requests:,.0f}",
            f"{run.collector_us:.1f}", f"{col:.1f}", f"{run.collector_us / col - 1:+.0%}",
            f"{run.redis_us:.1f}", f"{red:.1f}", f"{run.redis_us / red - 1:+.0%}",
        ))
    return table(("reports", "reports/request", "collector us/report measured", "model",
                  "error", "Redis us/report measured", "model", "error"), rows)


def shards_for(devices: float) -> int:
    """Shards per metric-epoch that keep a slot at most ``FLAT_DEPTH`` rests per bucket
    (at least ``SHARDS``, at most 256, LDP_SHARDS' bound)."""
    return max(SHARDS, min(256, math.ceil(devices / (BUCKETS * FLAT_DEPTH))))


def depth_us(costs: Costs, depth: float) -> float:
    """Extra Redis CPU of a one-report script call at ``depth`` rests per bucket, over
    a fresh slot's (interpolated in log depth from the slot profile)."""
    xs = [math.log(s.depth) for s in costs.slots]
    ys = [s.redis_us_per_call for s in costs.slots]
    return max(0.0, float(np.interp(math.log(max(depth, 1.0)), xs, ys)) - ys[0])


def model_table(costs: Costs, tokens_per_device: int = 1, relay: int = 0) -> str:
    """Resources for DEVICES x METRICS per day under the stated assumptions;
    ``tokens_per_device``: tokens a device spends per day (0: one per report);
    ``relay``: 0 for device batches (one request per device and day), else
    batches of ``relay`` reports of one metric (a relay or an ingest tier that
    regroups reports by metric; every report's token checked)."""
    rows = []
    for devices in DEVICES:
        for metrics in METRICS:
            requests = devices * PEAK / 86_400
            tokens = tokens_per_device or metrics
            shards = shards_for(devices)
            n_slot = devices / shards
            depth = n_slot / BUCKETS
            if relay:
                # a batch of one metric: one script call per shard it touches, one index write
                requests = devices * metrics * PEAK / 86_400 / relay
                calls = shards * -math.expm1(-relay / shards)
                col, red = predict(costs, relay, calls + 1, relay, costs.deploy_verify_us)
                reports = requests * relay
                red += depth_us(costs, depth) * calls / relay
            else:
                # one script call and one index write per metric of a device's batch
                col, red = predict(costs, metrics, 2 * metrics, tokens, costs.deploy_verify_us)
                reports = requests * metrics
                red += depth_us(costs, depth)
            state = metrics * shards * state_bytes(costs, n_slot) * STATE_DAYS
            counters = metrics * TALLY_DAYS * costs.tally_bytes
            memory_gib = (state + counters) / 2**30
            redis_cores = reports * red / 1e6 / UTIL
            masters = max(math.ceil(redis_cores), math.ceil(memory_gib / MASTER_GIB), 1)
            issuer = devices * tokens * costs.sign_ms / 1e3 / 86_400 / UTIL
            # costs.up is fitted to device batches with one token each: every further
            # distinct token adds its incompressible bytes (a relay batch: one per report)
            distinct = relay if relay else tokens
            up = (requests * (costs.up[0] + costs.up[1] * reports / requests
                              + TOKEN_WIRE_BYTES * (distinct - 1)) * 8 / 1e6)
            rows.append((
                f"{devices:.0e}", str(metrics), f"{reports:,.0f}",
                f"{reports * col / 1e6 / UTIL:,.1f}", f"{issuer:,.1f}",
                f"{masters:,}", f"{redis_cores:,.1f}", f"{memory_gib:,.1f}",
                f"{shards} ({depth:,.0f})", f"{up:,.1f}",
            ))
    return table(("devices", "metrics/day", "peak reports/s", "collector cores",
                  "issuer cores", "Redis masters", "Redis cores", "Redis GiB",
                  "shards (rests/bucket)", "ingress Mbit/s"), rows)
