"""Bytes per report of the per-report state (spent tokens), by Redis's own accounting.

The state of a (metric, version, epoch, shard) slot is one hash: field = a
2-byte bucket, value = the 6-byte rests of the spent-token digests of that
bucket (``collector.store.schema``).  This benchmark drives the collector's
own ingest script (``INGEST_LUA``) directly, without HTTP, 1000 reports per
call over 4 shards (the collector's default), for n = 10^5, 10^6, 10^7 reports
of one metric-epoch, then measures

- ``MEMORY USAGE <key> SAMPLES 0`` (exact) of the state hashes, per report;
- the ``INFO memory`` used_memory delta (everything: state, tallies, index), per report;

and checks that no report was refused (a false duplicate, probability n_slot
/ 2^64 per report: printed).  Digests are uniform random bytes, as the keyed
BLAKE2b digests of real nonces are.

Run: ``.venv/bin/python benchmarks/bench_report_state.py [--max 1e6]`` (10^7
takes about a minute and a half on the 2-core reference machine).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from collector.store.schema import INGEST_LUA
from ldp_server.redis_server import RedisServer

__all__ = ["main", "measure"]

SHARDS = 4
BATCH = 1000
PIPELINE = 16


def measure(client: redis.Redis, n: int, epoch: int = 20000) -> dict[str, Any]:
    """Ingest ``n`` reports of one metric-epoch through INGEST_LUA; their state's cost."""
    client.flushall()
    sha = client.script_load(INGEST_LUA)
    before = int(client.info("memory")["used_memory"])
    expire_at = int(time.time()) + 7 * 86400
    counters = "0;" * BATCH
    merged = f"0:{BATCH}"
    started = time.perf_counter()
    refused = 0
    calls = n // BATCH
    done = 0
    while done < calls:
        pipe = client.pipeline(transaction=False)
        for i in range(done, min(calls, done + PIPELINE)):
            tag = f"ldp:{{m:bench:1:{epoch}:{i % SHARDS}}}"
            pipe.evalsha(sha, 3, f"{tag}:t", f"{tag}:d", "ldp:{x:bench:1}:slots",
                         expire_at, BATCH, os.urandom(8 * BATCH), counters, merged,
                         expire_at, f"{epoch}:{i % SHARDS}")
        for reply in pipe.execute():
            refused += BATCH - reply.count(b"0")
        done = min(calls, done + PIPELINE)
    seconds = time.perf_counter() - started
    after = int(client.info("memory")["used_memory"])
    state = sum(int(client.memory_usage(f"ldp:{{m:bench:1:{epoch}:{s}}}:d", samples=0) or 0)
                for s in range(SHARDS))
    encodings = {client.object("encoding", f"ldp:{{m:bench:1:{epoch}:{s}}}:d")
                 for s in range(SHARDS)}
    return {
        "n": n,
        "state_bytes_per_report": state / n,
        "used_memory_bytes_per_report": (after - before) / n,
        "refused": refused,
        "false_duplicate_per_report": (n / SHARDS) / 2**64,
        "reports_per_second": n / seconds,
        "encoding": ",".join(sorted(e.decode() if isinstance(e, bytes) else str(e)
                                    for e in encodings)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=float, default=1e7, help="largest n (default 1e7)")
    args = parser.parse_args(argv)
    sizes = [n for n in (10**5, 10**6, 10**7) if n <= args.max]
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer.start(folder, extra=("--appendonly", "no"))
        try:
            client = redis.Redis(port=server.port)
            print("| reports | state B/report (MEMORY USAGE) | used_memory B/report | "
                  "encoding | refused | P(false dup)/report | reports/s |")
            print("|---:|---:|---:|---|---:|---:|---:|")
            for n in sizes:
                r = measure(client, n)
                print(f"| {n:,} | {r['state_bytes_per_report']:.2f} | "
                      f"{r['used_memory_bytes_per_report']:.2f} | {r['encoding']} | "
                      f"{r['refused']} | {r['false_duplicate_per_report']:.1e} | "
                      f"{r['reports_per_second']:,.0f} |", flush=True)
            client.close()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
