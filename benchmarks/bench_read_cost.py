"""What one window estimate costs the aggregator: stored fields, time and memory.

A private redis-server holds the tallies of a string metric (``prefix_olh``,
eps = 4, strings of a-z up to 6 letters: 325,632 counters declared) and, for
reference, of a dense one (OUE over d = 1024), at n reports per epoch.  Each
epoch's tally is simulated (``PrefixOLH.simulate_counts`` of Zipf(1.1) counts
over 10,000 strings, as ``bench_strings.py``; ``ldp_core.simulate.tallies`` for
OUE), split over the store's 4 shards as the collector spreads reports (each
report to one shard, uniformly), and written in the store's key schema
(``collector.store.schema``: one tally hash per slot, only nonzero counters,
``n``, the slot in the read index).  Writing 10^6 reports per epoch through the
ingest script would take hours here; the layout is the same.

For each window of 1, 7 and 30 epochs, a fresh child process answers it
through the service path (``aggregator.service.estimate_response``, no bound)
with the store's read side, and reports: wall time, CPU time (the process: the
event loop and the worker thread), peak resident memory above the child's start
(VmHWM after resetting it, ``/proc/self/clear_refs``), and the time Redis spent
in the request's commands (``INFO commandstats``, summed; the rest of the wall
time is waiting for a core on a loaded machine).  ``stored`` is the
mean number of fields per epoch over its shards (HLEN summed; what HSCAN reads).

Run: ``nice .venv/bin/python benchmarks/bench_read_cost.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aggregator.paging import ReadBound
from aggregator.service import estimate_response
from aggregator.views import EstimateOptions
from benchmarks._table import header, table
from benchmarks.bench_strings import workload
from collector.store import Store
from collector.store.schema import index_key, tally_tag
from ldp_core.metric import MetricSpec
from ldp_core.simulate import tallies
from ldp_server.redis_server import RedisServer

__all__ = ["measure", "section"]

E0 = 20_000
SHARDS = 4
STRING = {
    "name": "search",
    "kind": "string",
    "epsilon": 4.0,
    "max_length": 6,
    "alphabet": "a-z",
    "min_reports": 1,
}
DENSE = {
    "name": "dense",
    "kind": "categorical",
    "mechanism": "oue",
    "epsilon": 1.0,
    "domain": [f"v{i}" for i in range(1024)],
    "min_reports": 1,
}
UNBOUNDED = ReadBound(max_counters=1 << 40)


def _split(t: npt.NDArray[np.int64], gen: np.random.Generator) -> list[npt.NDArray[np.int64]]:
    """The shards' tallies: each report lands in one of SHARDS shards uniformly."""
    parts, rest = [], t.copy()
    for k in range(SHARDS, 1, -1):
        part = gen.binomial(rest, 1.0 / k)
        parts.append(part)
        rest -= part
    return [*parts, rest]


def _epoch_tally(spec: MetricSpec, n: int, seed: int) -> npt.NDArray[np.int64]:
    gen = np.random.default_rng(seed)
    m = spec.build()
    if spec.kind == "string":
        strings, shares = workload(seed=1)
        codes = np.array([m.check_value(s) for s in strings], dtype=np.int64)
        return m.simulate_counts(codes, gen.multinomial(n, shares), gen)  # type: ignore[attr-defined,no-any-return]
    values = gen.zipf(1.5, size=n) % len(spec.domain)
    return tallies(m, values, seed=seed)[0]


async def _write(url: str, spec_json: dict[str, Any], n: int, epochs: int) -> MetricSpec:
    store = Store.connect(url, shards=SHARDS)
    try:
        spec, _ = await store.create_metric(MetricSpec.from_json(spec_json))
        gen = np.random.default_rng(7)
        for k in range(epochs):
            t = _epoch_tally(spec, n, seed=100 + k)
            shards = _split(t, gen)
            pipe = store.client.pipeline(transaction=False)
            for shard, part in enumerate(shards):
                (nonzero,) = np.nonzero(part)
                fields: dict[str, int] = {str(i): int(part[i]) for i in nonzero}
                # A report sets one counter of a string metric; OUE's n is split alike.
                fields["n"] = int(part.sum()) if spec.kind == "string" else n // SHARDS
                pipe.hset(f"{tally_tag(spec, E0 + k, shard)}:t", mapping=fields)
                pipe.sadd(index_key(spec.name, spec.version), f"{E0 + k}:{shard}")
            await pipe.execute()
        return spec
    finally:
        await store.close()


async def _stored(url: str, spec: MetricSpec, epochs: int) -> float:
    store = Store.connect(url, shards=SHARDS)
    try:
        pipe = store.client.pipeline(transaction=False)
        for k in range(epochs):
            for shard in range(SHARDS):
                pipe.hlen(f"{tally_tag(spec, E0 + k, shard)}:t")
        return sum(int(x) - 1 for x in await pipe.execute()) / epochs
    finally:
        await store.close()


def _kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _child(url: str, spec: MetricSpec, epochs: int, out: Any) -> None:
    async def run() -> dict[str, Any]:
        store = Store.connect(url, shards=SHARDS)
        try:
            return await estimate_response(
                store,
                spec,
                start=E0,
                end=E0 + epochs,
                options=EstimateOptions(),
                series=False,
                max_epochs=10_000,
                bound=UNBOUNDED,
            )
        finally:
            await store.close()

    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = _kb("VmRSS")
    wall, cpu = time.perf_counter(), time.process_time()
    body = asyncio.run(run())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    out.send((wall, cpu, (_kb("VmHWM") - base) / 1024, body["n"], body["window"]["epochs"]))


def _redis_seconds(url: str) -> float:
    """CPU time Redis has spent in commands so far (INFO commandstats)."""
    with redis.Redis.from_url(url) as client:
        stats = client.info("commandstats")
    return sum(float(v["usec"]) for v in stats.values()) / 1e6


def _answer(url: str, spec: MetricSpec, epochs: int) -> tuple[float, ...]:
    before = _redis_seconds(url)
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(url, spec, epochs, send))
    proc.start()
    result = recv.recv()
    proc.join()
    return (*result, _redis_seconds(url) - before)


def measure(cases: list[tuple[dict[str, Any], int, tuple[int, ...]]]) -> list[list[Any]]:
    """One row per (metric, n per epoch, window); see the module docstring."""
    rows = []
    for spec_json, n, windows in cases:
        with tempfile.TemporaryDirectory() as tmp:
            redis_server = RedisServer.start(Path(tmp) / "redis")
            try:
                spec = asyncio.run(_write(redis_server.url, spec_json, n, max(windows)))
                stored = asyncio.run(_stored(redis_server.url, spec, max(windows)))
                declared = spec.build().num_counters
                for w in windows:
                    wall, cpu, mb, reports, read, in_redis = _answer(redis_server.url, spec, w)
                    assert read == w and reports > 0, (read, reports)
                    rows.append(
                        [
                            spec.mechanism,
                            f"{n:,}",
                            f"{declared:,}",
                            f"{stored:,.0f}",
                            w,
                            f"{stored * w:,.0f}",
                            f"{wall:.2f} s",
                            f"{cpu:.2f} s",
                            f"{in_redis:.2f} s",
                            f"{mb:.0f} MB",
                            f"{stored * w / cpu:,.0f}",
                        ]
                    )
                    print(
                        rows[-1],
                        "load",
                        Path("/proc/loadavg").read_text().split()[0],
                        file=sys.stderr,
                        flush=True,
                    )
            finally:
                redis_server.stop()
    return rows


def section(quick: bool = False) -> str:
    if quick:
        cases = [(STRING, 10_000, (1, 7)), (DENSE, 10_000, (1, 7))]
    else:
        cases = [
            (STRING, 10_000, (1, 7, 30)),
            (STRING, 100_000, (1, 7, 30)),
            (STRING, 1_000_000, (1, 7)),
            (DENSE, 100_000, (1, 7, 30)),
        ]
    before = os.getloadavg()[0]
    rows = measure(cases)
    return (
        header("Read cost of one window estimate")
        + table(
            [
                "mechanism",
                "reports/epoch",
                "declared",
                "stored/epoch",
                "epochs",
                "stored read",
                "wall",
                "CPU",
                "Redis CPU",
                "peak memory",
                "fields/CPU s",
            ],
            rows,
        )
        + f"\nload average (1 min) before {before:.1f}, after {os.getloadavg()[0]:.1f}\n"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    print(section(ap.parse_args().quick))
