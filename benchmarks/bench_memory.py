"""Memory: Redis per metric-epoch after ingesting, and the aggregator's peak.

Redis: reports go through the collector's real write path
(``collector.store.Store.ingest``: keyed digests, the Lua dedupe and counter
script, 4 shards) into a private redis-server, one metric-epoch per n; then the
keys of that metric-epoch are measured with ``MEMORY USAGE <key> SAMPLES 0``
(exact), split into tally hashes (``:t``, what the counters cost; grows with
the number of counters, not n) and dedupe hashes (``:d``, one small field per
report, expiring with the retention window), plus the ``INFO memory``
used_memory delta.

Aggregator: ``aggregator.estimate`` at d = 16384 in a fresh subprocess per
mechanism: tracemalloc peak of the estimate call alone, and the process'
peak resident set (VmHWM, which includes numpy and the simulated tallies).

Run: ``.venv/bin/python benchmarks/bench_memory.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._table import header, table
from ldp_server.redis_server import RedisServer

__all__ = ["aggregator_peak", "redis_memory", "section"]

MEM_SPEC: dict[str, Any] = {
    "kind": "categorical", "epsilon": 1.0, "mechanism": "olh",
    "domain": [f"v{i}" for i in range(1024)], "epoch": "day", "min_reports": 1,
}


async def _ingest(url: str, name: str, n: int, seed: int) -> dict[str, Any]:
    import os

    import redis.asyncio

    from collector.store import Store, ValidReport
    from ldp_core.metric import MetricSpec

    client = redis.asyncio.Redis.from_url(url)
    store = Store(client, shards=4)
    try:
        spec, _ = await store.create_metric(MetricSpec.from_json({"name": name, **MEM_SPEC}))
        m = spec.build()
        epoch = spec.epoch_at(time.time())
        rng = random.Random(seed)
        before = int((await client.info("memory"))["used_memory"])
        seconds = 0.0
        done = 0
        while done < n:
            size = min(1000, n - done)
            tokens = os.urandom(32 * size).hex()
            ids = os.urandom(16 * size).hex()
            batch = [
                ValidReport(spec, epoch, ids[32 * i:32 * i + 32], tokens[64 * i:64 * i + 64],
                            m.counters(m.randomize(rng.randrange(m.domain_size), rng=rng)))
                for i in range(size)
            ]
            started = time.perf_counter()
            outcomes = await store.ingest(batch)
            seconds += time.perf_counter() - started
            if any(o != "accepted" for o in outcomes):
                raise RuntimeError("a fresh report was not accepted")
            done += size
        after = int((await client.info("memory"))["used_memory"])
        tally = dedupe = other = 0
        keys = 0
        async for key in client.scan_iter(match=f"ldp:{{m:{name}:*", count=1000):
            usage = int(await client.memory_usage(key, samples=0) or 0)
            keys += 1
            if key.endswith(b":t"):
                tally += usage
            elif key.endswith(b":d"):
                dedupe += usage
            else:
                other += usage
        fields = await client.hlen(f"ldp:{{m:{name}:{spec.version}:{epoch}:0}}:t")
        return {"n": n, "counters": m.num_counters, "tally": tally, "dedupe": dedupe,
                "other": other, "used_memory_delta": after - before, "keys": keys,
                "fields_shard0": fields, "ingest_per_s": n / seconds}
    finally:
        await client.aclose()


def redis_memory(ns: tuple[int, ...]) -> list[dict[str, Any]]:
    """One metric-epoch per n in a private Redis; bytes by kind of key."""
    with tempfile.TemporaryDirectory(prefix="ldp-bench-mem-") as folder:
        server = RedisServer.start(Path(folder) / "redis")
        try:
            return [asyncio.run(_ingest(server.url, f"bench.mem{i}", n, seed=i))
                    for i, n in enumerate(ns)]
        finally:
            server.stop()


_PEAK = textwrap.dedent("""
    import json, sys, tracemalloc
    import numpy as np
    sys.path.insert(0, {root!r})
    from aggregator import estimate
    from ldp_core import mechanism
    from ldp_core.simulate import tallies
    m = mechanism({name!r}, epsilon=1.0, domain_size={d})
    t, n = tallies(m, np.random.default_rng(0).integers(0, {d}, size={n}), seed=1)
    estimate(m, t, n)
    tracemalloc.start()
    tracemalloc.reset_peak()
    estimate(m, t, n)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # VmHWM restarts at exec; ru_maxrss would inherit the forking parent's peak.
    rss = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
               if line.startswith("VmHWM:"))
    print(json.dumps({{"peak": peak, "rss": rss, "counters": m.num_counters}}))
""")


def aggregator_peak(name: str, d: int, n: int) -> dict[str, Any]:
    """tracemalloc peak of one estimate() and the subprocess' max RSS, in bytes."""
    root = str(Path(__file__).resolve().parent.parent)
    code = _PEAK.format(root=root, name=name, d=d, n=n)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _mb(x: float) -> str:
    return f"{x / 1e6:,.2f}"


def section(quick: bool = False) -> str:
    """The memory tables (Markdown)."""
    ns = (10_000, 100_000) if quick else (100_000, 1_000_000)
    rows = []
    for r in redis_memory(ns):
        rows.append((
            f"{r['n']:,}", r["counters"], r["keys"], _mb(r["tally"]), _mb(r["dedupe"]),
            _mb(r["tally"] + r["dedupe"] + r["other"]), _mb(r["used_memory_delta"]),
            f"{r['dedupe'] / r['n']:.1f}", f"{r['ingest_per_s']:,.0f}",
        ))
    peaks = []
    for name in ("grr", "oue", "olh"):
        p = aggregator_peak(name, 16384, 100_000 if not quick else 20_000)
        peaks.append((name, 16384, p["counters"], _mb(p["peak"]), _mb(p["rss"])))
    return "\n".join([
        header("Memory"),
        "### Redis per metric-epoch (OLH, d = 1024, eps = 1, 4 shards)\n"
        "Bytes from MEMORY USAGE (SAMPLES 0) over the metric-epoch's keys after ingesting "
        "through collector.store (the real Lua path); one run per n (memory is "
        "deterministic up to allocator rounding).\n",
        table(("n", "counters", "keys", "tally MB (without dedupe)", "dedupe MB",
               "total MB (with dedupe)", "INFO used_memory delta MB", "dedupe bytes/report",
               "store.ingest reports/s (in-process, batches of 1000)"), rows),
        "",
        "### Aggregator peak memory, estimate() at d = 16384\n",
        table(("mechanism", "d", "counters", "tracemalloc peak MB (estimate only)",
               "process max RSS MB"), peaks),
    ]) + "\n"


def main() -> None:
    """Print the memory section."""
    ap = argparse.ArgumentParser(description="memory benchmark")
    ap.add_argument("--quick", action="store_true")
    print(section(ap.parse_args().quick))


if __name__ == "__main__":
    main()
