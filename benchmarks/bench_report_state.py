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

Then the Redis CPU of that script by how full the slot already is (``fill_profile``):
calls of 250 reports (a relay batch of 1000 over 4 shards) into 40 slots at once,
each slot filled to 12,500 reports, with the script as it is and without the
filler field that makes a new state hash a hash table (``collector.store.schema``),
on one redis-server with its compiled-in ``hash-max-listpack-entries`` (512).
Without the filler a slot's hash is a listpack up to 512 buckets, and each field
the script reads or writes is found by scanning it.  The two scripts' steps
alternate (ABBA), so a shared machine's drift weighs on both alike; CPU from
``INFO cpu``.

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

from benchmarks import _smoke
from benchmarks._services import client_cpu_seconds
from collector.store.schema import INGEST_LUA
from ldp_server.redis_server import RedisServer

__all__ = ["FILL_BANDS", "fill_profile", "main", "measure", "without_filler"]

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


#: Bands of the reports a slot holds before a call: the listpack (up to 512 buckets),
#: the conversion, then hash tables.
FILL_BANDS = ((0, 250), (250, 500), (500, 1500), (1500, 5000), (5000, 12_500))

#: The line of INGEST_LUA that decides whether a state hash is new (and gets the filler).
_FRESH = "local fresh = redis.call('EXPIREAT', dkey, a1) == 0"


def without_filler(script: str = INGEST_LUA) -> str:
    """The ingest script as it was before the filler field: a new state hash is a
    listpack (same Redis calls but the one EXPIREAT of a new hash)."""
    if _FRESH not in script:
        raise ValueError("INGEST_LUA no longer decides 'fresh' as fill_profile expects")
    return script.replace(_FRESH, _FRESH + " and false")


def fill_profile(client: redis.Redis, scripts: tuple[str, ...], slots: int = 40,
                 per_call: int = 250, fill: int = 12_500, rounds: int = 2) -> list[list[float]]:
    """Redis CPU us per report of each of ``scripts`` (INGEST_LUA's layout), per
    FILL_BANDS band of the slot's reports before the call; each step is one call of
    ``per_call`` reports into each of ``slots`` slots (pipelined), the scripts in
    ABBA order, each into slots of its own."""
    shas = [client.script_load(script) for script in scripts]
    expire_at = int(time.time()) + 7 * 86400
    counters, merged = "0;" * per_call, f"0:{per_call}"
    cpu = [[0.0] * len(FILL_BANDS) for _ in scripts]
    reports = [[0] * len(FILL_BANDS) for _ in scripts]
    step = 0
    for epoch in range(21000, 21000 + rounds):
        for before in range(0, fill, per_call):
            band = next(i for i, (lo, hi) in enumerate(FILL_BANDS) if lo <= before < hi)
            order = list(range(len(scripts)))
            step += 1
            for side in order if step % 2 else order[::-1]:
                pipe = client.pipeline(transaction=False)
                for s in range(slots):
                    tag = f"ldp:{{m:fill{side}x{s}:1:{epoch}:0}}"
                    pipe.evalsha(shas[side], 3, f"{tag}:t", f"{tag}:d", "ldp:{x:fill:1}:slots",
                                 expire_at, per_call, os.urandom(8 * per_call), counters, merged,
                                 expire_at, f"{epoch}:0")
                start = client_cpu_seconds(client)
                pipe.execute()
                cpu[side][band] += client_cpu_seconds(client) - start
                reports[side][band] += slots * per_call
    return [[1e6 * c / n for c, n in zip(cs, ns, strict=True)]
            for cs, ns in zip(cpu, reports, strict=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=float, default=1e7, help="largest n (default 1e7)")
    args = parser.parse_args(argv)
    _smoke.announce("bench_report_state")
    sizes = [n for n in _smoke.size((10**5, 10**6, 10**7), (10**4,)) if n <= args.max]
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
        print("\nRedis CPU per report by the slot's fill (calls of 250 reports; "
              "hash-max-listpack-entries as compiled, 512):\n")
        server = RedisServer.start(Path(folder) / "fill", extra=("--appendonly", "no"))
        try:
            client = redis.Redis(port=server.port)
            now, before = fill_profile(client, (INGEST_LUA, without_filler()),
                                       **_smoke.size({}, {"slots": 1, "rounds": 1}))
            print("| reports in the slot before the call | Redis CPU us/report | "
                  "without the filler (a listpack up to 512 buckets) | ratio |")
            print("|---|---:|---:|---:|")
            for (lo, hi), a, b in zip(FILL_BANDS, now, before, strict=True):
                print(f"| {lo:,} to {hi - 250:,} | {a:.2f} | {b:.2f} | {b / a:.2f} |", flush=True)
            client.close()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
