"""A capacity model to a billion devices, from per-report costs measured on this machine.

The cost of a request is linear in what it does (fitted by least squares over
calibration fleets of different shapes through the real collector, 2 workers,
into a 3-master Redis Cluster: ``benchmarks/bench_cluster_sim.py``; ``REPEATS``
runs of each shape, the fit taking each shape's median run):

    collector CPU = a + b * reports + c * Redis commands + v * tokens verified
                    + h * tokens found in the verifier's cache
    Redis CPU     = p + q * reports + r * Redis commands + w * tally counters written
                    + f * reports * ln(fields of the state hash)

where a Redis command is one ingest script call (one per (metric, epoch,
shard) slot of the batch) or one write of the read index (one per metric of
the batch, cluster mode); ``v`` is a token checked (OpenSSL RSASSA-PSS, 2048
bits, and what the server does around it) and ``h`` a token found in a
worker's cache of verified tokens (a relay's batches carry each device's token
once per metric).  ``v`` is fitted in the server with a, b, c: timed alone
it came out lower than in the server (a check 50 us alone against 64 in the
server, in one run), and b absorbed the rest, moving fourfold between two
runs; the relay fleets with fresh tokens and with each device's token
repeated over 20 and over 100 metrics' batches pin it.  ``h`` cannot be fitted
with them: every report of a relay batch is a check or a cache answer, so
those fleets fix b + h (b apart only through a request's few commands), and
device fleets (one script call and one index write per report) b + 2c;
fitting all five to measured fleets gave coefficients of +-2 million us that
cancel.  So ``h`` is timed alone (``unit_costs.hit_us``).
On the Redis side, a script call reads and writes each tally counter its
reports touch once: a device's call of one report writes one, a relay's call of
~250 reports of a GRR metric over 64 values ~64 (``counter_writes``); in every
calibration fleet that count follows the reports (device fleets) or the
requests (relay fleets, ~251 per request of 1000), so ``w`` is timed alone too
(``unit_costs.counter_us``).  A report also costs more the more fields its
slot's state hash holds (a bigger hash table, more cache misses): the relay
fleets' Redis CPU per report rose from 2.5 us at 250 reports per slot to 4.0 at
25,000 in every run of 2026-12-02, which a flat ``q`` averaged away (the
10^7 fleet, 12,500 per slot, came out 8-26 % over it in five runs of five).
A script call's cost is also concave in its reports (in-script 180 us for 25,
550 for 125, 845 for 250), so the calibration has relay batches of 250 as well
as of 1000 (``CALIBRATION``).  ``f`` is fitted
with p, q, r on each fleet's mean of ln(fields) over its reports
(``fill_log``; the table stops growing at 65,536 buckets, where the slot
profile's depth term takes over).
Memory: the per-report state of a slot holding n reports is
``bucket_bytes * B * (1 - exp(-n / B)) + rest_bytes * n`` (B = 65,536 buckets),
fitted from ``MEMORY USAGE`` of slots filled to several depths, which also
give the Redis CPU of a script call as the buckets fill (where the flat model
ends); the counters are ``MEMORY USAGE`` of the simulated tally hashes.  The
issuer's CPU per token (``TokenKey.blind_sign``, 2048 bits) and the
aggregator's time per estimate are timed alone.

The machine's speed is part of every measurement: this shared machine's cores
run the same code 1.5x slower from one second to the next and 2x slower from
one hour to the next (``benchmarks/speed.py``).  So every CPU cost (a fleet's,
and ``v`` and ``h`` timed alone) is scaled to one reference speed, the median
speed of the calibration fleets, by the speed a probe measured while it ran:
``cost * ref_ms / speed_ms``.  The model's coefficients are microseconds at that
speed, and ``check_table`` compares each fleet at that speed (it shows the
measured cost and the speed too).

Deployment assumptions (stated, change them here): every device sends its
reports of a day in one request (an SDK flush); peak-to-average ``PEAK``;
cores and masters run at ``UTIL``; state kept for the epoch plus the acceptance
window (``ACCEPT_HOURS``), counters for ``TALLY_DAYS``; at least ``SHARDS``
slots per metric-epoch (more for hot metrics: ``shards_for``); ``MASTER_GIB``
usable per master; one token per device and day (tokens-v2), checked once
per device batch.

    .venv/bin/python benchmarks/bench_cluster_sim.py --metrics 200 --sizes 1e5,1e6,1e7 \
        --device-sizes 1e5      # calibrates, checks, prints the model (docs/token-operations.md)
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from benchmarks import _smoke
from benchmarks._table import table
from benchmarks.bench_cluster_sim import Run
from benchmarks.unit_costs import (
    Slot,
    counter_us,
    estimate_ms,
    hit_us,
    sign_ms,
    slot_profile,
    verify_us,
)

if TYPE_CHECKING:
    from benchmarks.speed import Probe

__all__ = ["Costs", "at_ref", "calibrate", "call_counters", "check_table", "costs_table",
           "counter_writes", "fill_log", "model_table", "predict", "refit"]

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
DOMAIN = 64  # the simulated metrics' values (GRR; ``fleet.DOMAIN``), one counter per report
#: Runs of each calibration fleet (and of each check fleet of 10^5 reports or fewer),
#: on epochs of their own; a shape's cost is the median of its runs.
REPEATS = 3
#: The calibration fleets: (metrics, devices, relay batch or 0 for device batches).
CALIBRATION = ((1, 3000, 0), (20, 300, 0), (100, 100, 0), (1, 100_000, 1000),
               (20, 5_000, 1000), (100, 1_000, 1000), (100, 1_000, 250))
#: ``LDP_BENCH_SMOKE`` (benchmarks/_smoke.py): the same shapes, run once, each fleet
#: still big enough for its collector CPU to read many of /proc's 10 ms ticks (the
#: fits weigh each run by 1 / its cost: a run that reads 0 has no weight to give).
SMOKE_CALIBRATION = ((1, 300, 0), (20, 30, 0), (100, 5, 0), (1, 3_000, 1000), (20, 250, 1000),
                     (100, 50, 1000), (100, 50, 250))


@dataclass(frozen=True)
class Costs:
    """The model's measured coefficients (see the module docstring)."""

    collector: tuple[float, float, float]  # a, b, c in us
    verify_us: float  # v, fitted in the server (the simulation's key size)
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
    ref_ms: float = 0.0  # the speed the CPU costs are at (ms per speed unit; 0: as measured)
    alone_verify_us: float = 0.0  # v timed alone (OpenSSL only), for comparison
    counter_us: float = 0.0  # w: Redis CPU per tally counter a script call writes (timed alone)
    fill_us: float = 0.0  # f: Redis CPU per report per unit of ln(fields of its state hash)


def _commands(run: Run) -> float:
    return (run.script_calls + run.index_calls) / run.requests


def at_ref(ref_ms: float, speed_ms: float) -> float:
    """The factor that takes a CPU cost measured at ``speed_ms`` to the reference
    speed (1 if either was not probed).

    >>> at_ref(10.0, 15.0), at_ref(0.0, 15.0)
    (0.6666666666666666, 1.0)
    """
    return ref_ms / speed_ms if ref_ms > 0 and speed_ms > 0 else 1.0


def predict(costs: Costs, reports: float, commands: float, tokens: float,
            verify: float | None = None, hits: float = 0.0, counters: float = 0.0,
            fill: float = 0.0) -> tuple[float, float]:
    """(collector us, Redis us) per report for requests of that shape: ``tokens``
    checked, ``hits`` answered by the verifier's cache (``verify``: us per token
    check, default the simulation's key size), ``counters`` tally counters written,
    ``fill`` the reports' mean ln(fields of their slot's state hash) (``fill_log``)."""
    a, b, c = costs.collector
    p, q, r = costs.redis
    v = costs.verify_us if verify is None else verify
    return ((a + b * reports + c * commands + v * tokens + costs.hit_us * hits) / reports,
            (p + q * reports + r * commands + costs.counter_us * counters
             + costs.fill_us * reports * fill) / reports)


def fill_log(n_slot: float) -> float:
    """The mean over a slot's reports of ln(fields its state hash holds when the
    report arrives), the slot filling from empty to ``n_slot`` reports: ln n - 1
    while the fields follow the reports, then ln BUCKETS once every bucket is taken
    (deeper slots cost more through ``depth_us``, from the slot profile).

    >>> round(fill_log(1000), 3), round(fill_log(10**9), 3), fill_log(1.0)
    (5.908, 11.09, 0.0)
    """
    if n_slot <= BUCKETS:
        return max(0.0, math.log(n_slot) - 1) if n_slot > 0 else 0.0
    return math.log(BUCKETS) - BUCKETS / n_slot


def call_counters(reports: float, slots: float) -> float:
    """Tally counters written by a request of ``reports`` reports of one metric over
    ``slots`` shards, expected: the (shard, value) cells at least one report falls
    in, the values uniform over DOMAIN (GRR of uniform truths, as simulated).

    >>> round(call_counters(1000, 4), 1), round(call_counters(1, 4), 3)
    (250.9, 1.0)
    """
    cells = slots * DOMAIN
    return cells * -math.expm1(reports * math.log1p(-1 / cells))


def counter_writes(run: Run) -> float:
    """Tally counters the run's script calls wrote (expected): one per report of a
    device batch (a call per report), ``call_counters`` per relay request (one metric
    over SHARDS slots)."""
    if not run.batch:
        return float(run.reports)
    return run.requests * call_counters(run.reports / run.requests, SHARDS)


def _fill(run: Run) -> float:
    """``fill_log`` of the run's slots (each fleet has an epoch of its own)."""
    return fill_log(run.reports / (run.metrics * SHARDS))


Column = Callable[[Run], float]


def medians(runs: Sequence[Run], cost: Column) -> list[Run]:
    """One run per shape (metrics, devices, batch), shapes in first-seen order: the run
    whose ``cost`` is its shape's median (the upper one of an even count).

    A fleet of a few seconds can meet one of this shared machine's slow spells (the
    probe's fixed unit takes 1.5x longer from one second to the next, and the speed it
    reads does not follow every spell the servers meet:
    benchmarks/results/history/2026-12-capacity.md); the median
    of three runs of a shape ignores one such spell.
    """
    groups: dict[tuple[int, int, int], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.metrics, run.devices, run.batch), []).append(run)
    return [sorted(group, key=cost)[len(group) // 2] for group in groups.values()]


def _at_ref(ref_ms: float, total: Callable[[Run], float]) -> Column:
    """``total`` (us per report) taken to the reference speed."""
    return lambda run: total(run) * at_ref(ref_ms, run.speed_ms)


_SHAPE: tuple[Column, ...] = (lambda r: 1.0, lambda r: r.reports / r.requests, _commands)


def _fit(runs: Sequence[Run], y: Column, columns: Sequence[Column],
         ref_ms: float = 0.0) -> tuple[float, ...]:
    """Least squares of ``y`` (per request, at the reference speed) on ``columns``
    (per request), each run weighted by 1 / its value: the relative errors are what
    is minimised."""
    ys = np.array([y(r) * at_ref(ref_ms, r.speed_ms) for r in runs])
    x = np.array([[f(r) for f in columns] for r in runs]) / ys[:, None]
    return tuple(float(t) for t in np.linalg.lstsq(x, np.ones(len(runs)), rcond=None)[0])


def _collector_fit(runs: Sequence[Run], h: float,
                   ref_ms: float = 0.0) -> tuple[float, float, float, float]:
    """a, b, c, v: collector CPU per request (at the reference speed) less the cache
    answers (``h`` each, timed alone) on (1, reports, commands, token checks)."""
    runs = medians(runs, _at_ref(ref_ms, lambda r: r.collector_us))
    a, b, c, v = _fit(runs, lambda r: 1e6 * r.collector_cpu / r.requests
                      - h * r.hits / r.requests / at_ref(ref_ms, r.speed_ms),
                      (*_SHAPE, lambda r: r.checks / r.requests), ref_ms)
    return a, b, c, v


def _redis_fit(runs: Sequence[Run], ref_ms: float,
               w: float = 0.0) -> tuple[float, float, float, float]:
    """p, q, r, f: Redis CPU per request (at the reference speed) less the tally
    counters written (``w`` each, timed alone) on (1, reports, commands,
    reports * ``fill_log`` of the run's slots)."""
    runs = medians(runs, _at_ref(ref_ms, lambda r: r.redis_us))
    p, q, r, f = _fit(runs, lambda r: 1e6 * r.redis_cpu / r.requests
                      - w * counter_writes(r) / r.requests / at_ref(ref_ms, r.speed_ms),
                      (*_SHAPE, lambda r: r.reports / r.requests * _fill(r)), ref_ms)
    return p, q, r, f


def refit(costs: Costs, runs: Sequence[Run]) -> Costs:
    """``costs`` with a, b, c, v and p, q, r fitted to ``runs`` (``h`` as timed); the
    deployed key size's v keeps its ratio to v."""
    h = costs.hit_us
    a, b, c, v = _collector_fit(runs, h, costs.ref_ms)
    deploy = costs.deploy_verify_us * v / costs.verify_us if costs.verify_us else v
    p, q, r, f = _redis_fit(runs, costs.ref_ms, costs.counter_us)
    return replace(costs, collector=(a, b, c), verify_us=v, deploy_verify_us=deploy,
                   hit_us=h, redis=(p, q, r), fill_us=f)


def _timed(probe: Probe | None, ref_ms: float, cost: Callable[[], float]) -> float:
    """``cost()`` (a CPU cost timed alone) at the reference speed."""
    t0 = time.monotonic()
    value = cost()
    if probe is None:
        return value
    return value * at_ref(ref_ms, probe.speed(t0, time.monotonic()))


def calibrate(run: Callable[..., Run], epochs: Sequence[int], key_bits: int = 2048,
              probe: Probe | None = None) -> Costs:
    """Fleets of seven shapes (``CALIBRATION``: 1, 20 and 100 metrics per device; relay
    batches of 1000 with fresh tokens, and with each token repeated in 20 and in 100
    metrics' batches as a relay sends them; relay batches of 250, whose script calls
    hold ~62 reports where the others' hold ~250, so that the fit sees what a call's
    size changes), ``REPEATS`` runs of each (the shapes in turn, so a shape's
    runs are minutes apart; the fits take each shape's median), after a warm-up fleet,
    then the costs timed alone; ``run`` is ``Sim.run``, one epoch each
    (``1 + len(CALIBRATION) * REPEATS``).  The relay fleets hold 10^5 reports each: at
    ~5 us of Redis CPU per report, 10^4 gave Redis 50 ms to measure, a few of its
    accounting ticks (q came out 4.5 us with either size:
    benchmarks/results/history/2026-12-capacity.md).  The
    device fleets last a few seconds each, so that the speed probe (``probe``, which
    sets the reference speed: module docstring) samples each many times."""
    shapes, repeats = _smoke.size((CALIBRATION, REPEATS), (SMOKE_CALIBRATION, 1))
    if len(epochs) < 1 + len(shapes) * repeats:
        raise ValueError(f"calibrate needs {1 + len(shapes) * repeats} epochs, "
                         f"got {len(epochs)}")
    run(10, _smoke.size(100, 5), epochs[0], seed=99)
    plan = [shape for _ in range(repeats) for shape in shapes]
    runs = tuple(run(m, d, epoch, batch=batch, seed=i)
                 for i, ((m, d, batch), epoch) in enumerate(zip(plan, epochs[1:], strict=False)))
    speeds = [r.speed_ms for r in runs]
    ref = statistics.median(speeds) if probe is not None and min(speeds) > 0 else 0.0
    alone = _timed(probe, ref, lambda: verify_us(key_bits, count=_smoke.size(300, 20)))
    h = _timed(probe, ref, lambda: hit_us(key_bits, count=_smoke.size(1000, 50),
                                          rounds=_smoke.size(20, 2)))
    a, b, c, v = _collector_fit(runs, h, ref)
    # the deployed key size: v scaled by the two sizes' costs timed alone
    deploy = v if key_bits == 2048 else v * _timed(
        probe, ref, lambda: verify_us(count=_smoke.size(300, 20))) / alone
    w = _timed(probe, ref, lambda: counter_us(**_smoke.size({}, {"slots": 4, "rounds": 2})))
    p, q, r, f = _redis_fit(runs, ref, w)
    device = [r for r in runs if r.batch == 0]
    x = np.array([[1.0, r.reports / r.requests] for r in device])
    up = np.linalg.lstsq(x, np.array([r.bytes_sent / r.requests for r in device]), rcond=None)[0]
    down = np.linalg.lstsq(x, np.array([r.bytes_received / r.requests for r in device]),
                           rcond=None)[0]
    slots = slot_profile(**_smoke.size({}, {"buckets": 16, "calls": 100}))
    # Bytes per bucket at depth k = bucket_bytes + rest_bytes * k (two deepest fills).
    deep, deeper = slots[-2], slots[-1]
    rest = (deeper.bytes_per_bucket - deep.bytes_per_bucket) / (deeper.depth - deep.depth)
    bucket = slots[0].bytes_per_bucket - rest * slots[0].depth
    tally = statistics.median(r.tally_bytes / r.metrics for r in runs)
    signed = sign_ms(_smoke.size(200, 5))
    return Costs((a, b, c), v, (p, q, r), (float(up[0]), float(up[1])),
                 (float(down[0]), float(down[1])), bucket, rest, tally, signed,
                 estimate_ms(), tuple(slots), runs, key_bits, deploy, h, ref, alone, w, f)


def state_bytes(costs: Costs, n_slot: float) -> float:
    """Bytes of the per-report state of one slot holding ``n_slot`` reports."""
    return costs.bucket_bytes * BUCKETS * -math.expm1(-n_slot / BUCKETS) + costs.rest_bytes * n_slot


def costs_table(costs: Costs) -> str:
    """The measured coefficients."""
    a, b, c = costs.collector
    p, q, r = costs.redis
    rows = [
        ("reference speed (median of the calibration fleets'; benchmarks/speed.py)",
         f"{costs.ref_ms:.2f} ms per unit"),
        ("collector CPU per request / report / Redis command", f"{a:.0f} / {b:.1f} / {c:.1f} us"),
        (f"collector CPU per token check ({costs.key_bits} / 2048 bits; fitted in the server)",
         f"{costs.verify_us:.1f} / {costs.deploy_verify_us:.1f} us"),
        (f"the same check timed alone (OpenSSL only, {costs.key_bits} bits)",
         f"{costs.alone_verify_us:.1f} us"),
        ("collector CPU per token found in the verifier's cache (h; timed alone)",
         f"{costs.hit_us:.1f} us"),
        ("Redis CPU per request / report / command", f"{p:.1f} / {q:.1f} / {r:.1f} us"),
        ("Redis CPU per tally counter a script call writes (w; timed alone)",
         f"{costs.counter_us:.2f} us"),
        ("Redis CPU per report per unit of ln(fields of its state hash) (f)",
         f"{costs.fill_us:.2f} us"),
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
    """Each simulated fleet shape against the model's prediction for it: the cost
    measured, the same at the reference speed (the check), and the error of each;
    a shape run more than once (``runs`` column) shows the median of its runs of
    each (``medians``)."""
    rows = []
    for run in medians(runs, lambda r: 0.0):  # one run per shape, in order
        group = [r for r in runs if (r.metrics, r.devices, r.batch)
                 == (run.metrics, run.devices, run.batch)]
        col, red = predict(costs, run.reports / run.requests, _commands(run),
                           run.checks / run.requests, hits=run.hits / run.requests,
                           counters=counter_writes(run) / run.requests, fill=_fill(run))

        def median(total: Column, ref: bool, of: list[Run] = group) -> float:
            return statistics.median(
                total(r) * (at_ref(costs.ref_ms, r.speed_ms) if ref else 1.0) for r in of)

        speed = statistics.median(r.speed_ms for r in group)
        cm, cr = median(lambda r: r.collector_us, False), median(lambda r: r.collector_us, True)
        rm, rr = median(lambda r: r.redis_us, False), median(lambda r: r.redis_us, True)
        rows.append((
            f"{run.reports:,}", f"{run.reports / run.requests:,.0f}", str(len(group)),
            f"{speed:.2f}", f"{cm:.1f}", f"{cr:.1f}", f"{col:.1f}", f"{cr / col - 1:+.0%}",
            f"{cm / col - 1:+.0%}", f"{rm:.1f}", f"{rr:.1f}", f"{red:.1f}",
            f"{rr / red - 1:+.0%}", f"{rm / red - 1:+.0%}",
        ))
    return table(("reports", "reports/request", "runs", "speed ms/unit",
                  "collector us/report measured", "at ref speed", "model", "error",
                  "error as measured", "Redis us/report measured", "at ref speed", "model",
                  "error", "error as measured"), rows)


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
                col, red = predict(costs, relay, calls + 1, relay, costs.deploy_verify_us,
                                   counters=call_counters(relay, shards),
                                   fill=fill_log(n_slot))
                reports = requests * relay
                red += depth_us(costs, depth) * calls / relay
            else:
                # one script call and one index write per metric of a device's batch
                col, red = predict(costs, metrics, 2 * metrics, tokens, costs.deploy_verify_us,
                                   counters=metrics, fill=fill_log(n_slot))
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
