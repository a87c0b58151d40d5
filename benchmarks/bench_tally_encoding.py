"""Redis CPU of the ingest script by how a slot's tally hash is stored, by domain size.

A tally hash (``<tag>:t``: one field per counter, and ``n``) of at most
``hash-max-listpack-entries`` fields (512 compiled in) is a listpack, and each
counter the ingest script reads (one HMGET) or writes (one HSET) is found by
scanning it.  This benchmark drives the collector's own ``INGEST_LUA`` without
HTTP into slots whose tally already holds every counter of a domain of ``d``
values, stored either as Redis leaves it (a listpack below 512 fields) or as a
hash table (converted by a 65-byte field, then the field deleted), and reads
Redis's CPU per call (``INFO cpu``) in ABBA rounds (a shared machine's drift
weighs on both sides alike): device calls (one report) and relay calls (250
reports, values uniform over the domain).  It also gives each encoding's
``MEMORY USAGE`` for one tally of ``d`` counters of 6 digits.

    >>> rows = compare(redis.Redis.from_url(url), domains=(8,), rounds=2, slots=4)  # doctest: +SKIP
    >>> rows[0].listpack_us > 0 and rows[0].encodings == ("listpack", "hashtable")  # doctest: +SKIP
    True

Run: ``.venv/bin/python benchmarks/bench_tally_encoding.py [--rounds 16]``; the
table is also written to ``benchmarks/results/<UTC date>-<time>-tally-encoding.md``
(``--no-write``: not).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from benchmarks._services import Stack, client_cpu_seconds
from benchmarks._table import header, table
from benchmarks.bench_ingest import write_result
from collector.store.schema import INGEST_LUA

__all__ = ["DOMAINS", "Row", "compare", "main"]

#: Domain sizes compared: the bench metric's 64, then up to the listpack limit.
DOMAINS = (64, 128, 256, 384, 500)
#: Reports per call: a device's one report, a relay batch of 1000 over 4 shards.
CALL_SIZES = (1, 250)


@dataclass(frozen=True)
class Row:
    """One (domain, reports per call) comparison: Redis CPU us per call, each encoding."""

    domain: int
    reports: int
    listpack_us: float
    table_us: float
    encodings: tuple[str, str]
    listpack_bytes: int
    table_bytes: int


def _fill(client: redis.Redis, keys: Sequence[str], domain: int, as_table: bool) -> None:
    """Every counter of the domain in each tally (6-digit values), and ``n``."""
    fields: dict[Any, Any] = {str(v): 100_000 + v for v in range(domain)}
    fields["n"] = 100_000 * domain
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hset(key, mapping=fields)
        if as_table:
            pipe.hset(key, "~", "-" * 65)  # over hash-max-listpack-value: a hash table
            pipe.hdel(key, "~")  # Redis never turns a hash table back at run time
    pipe.execute()


def _calls(pipe: redis.client.Pipeline, sha: str, tags: Sequence[str], reports: int,
           domain: int, rng: random.Random) -> None:
    """One INGEST_LUA call per tag: ``reports`` fresh reports, values uniform."""
    for tag in tags:
        values = [rng.randrange(domain) for _ in range(reports)]
        merged = ",".join(f"{v}:{n}" for v, n in Counter(values).items())
        pipe.evalsha(sha, 2, f"{tag}:t", f"{tag}:d", 2**40, reports, os.urandom(8 * reports),
                     "".join(f"{v};" for v in values), merged, 2**40)


def compare(client: redis.Redis, domains: Sequence[int] = DOMAINS,
            sizes: Sequence[int] = CALL_SIZES, rounds: int = 16, slots: int = 200,
            seed: int = 0) -> list[Row]:
    """A row per (domain, call size): the median over ``rounds`` ABBA rounds of Redis's
    CPU per call, ``slots`` calls a round and side, each into its own slot.  It runs
    FLUSHALL before each row: give it a private Redis (``section`` starts one)."""
    rng = random.Random(seed)
    rows = []
    for domain in domains:
        for reports in sizes:
            client.flushall()
            sha = client.script_load(INGEST_LUA)
            tags = {side: [f"{side}{domain}.{s}" for s in range(slots)] for side in "LT"}
            for side in "LT":
                _fill(client, [f"{t}:t" for t in tags[side]], domain, side == "T")
            per_call: dict[str, list[float]] = {"L": [], "T": []}
            for r in range(rounds):
                for side in ("LT" if r % 2 == 0 else "TL"):
                    pipe = client.pipeline(transaction=False)
                    _calls(pipe, sha, tags[side], reports, domain, rng)
                    before = client_cpu_seconds(client)
                    pipe.execute()
                    per_call[side].append(1e6 * (client_cpu_seconds(client) - before) / slots)
            encodings = tuple(str(client.object("encoding", f"{tags[side][0]}:t"), "ascii")
                              for side in "LT")
            probe = {side: f"probe:{side}" for side in "LT"}
            for side in "LT":
                _fill(client, [probe[side]], domain, side == "T")
            usage = {side: int(client.memory_usage(probe[side], samples=0) or 0)
                     for side in "LT"}
            rows.append(Row(domain, reports, statistics.median(per_call["L"]),
                            statistics.median(per_call["T"]),
                            (encodings[0], encodings[1]), usage["L"], usage["T"]))
    return rows


def section(rounds: int = 16, slots: int = 200) -> str:
    """The table (Markdown), on a private redis-server (append-only, everysec)."""
    with Stack.start() as stack:
        client = redis.Redis.from_url(stack.redis_url)
        try:
            rows = compare(client, rounds=rounds, slots=slots)
        finally:
            client.close()
    body = [(r.domain, r.reports, f"{r.listpack_us:,.1f}", f"{r.table_us:,.1f}",
             f"{r.listpack_us / r.table_us:.2f}", " / ".join(r.encodings),
             f"{r.listpack_bytes:,} / {r.table_bytes:,}") for r in rows]
    return "\n".join([
        header("Tally hash encoding: Redis CPU of the ingest script"),
        f"Load average at the start {os.getloadavg()[0]:.2f}.  INGEST_LUA called directly "
        f"on a private redis-server, {rounds} ABBA rounds of {slots} calls a side, each "
        "call into its own slot whose tally already holds every counter of the domain "
        "(6-digit values); median of the rounds.  Memory: MEMORY USAGE of one such tally.\n",
        table(("domain d", "reports per call", "listpack us/call", "hash table us/call",
               "ratio", "encodings", "bytes per tally (listpack / table)"), body),
    ]) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--slots", type=int, default=200)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    text = section(args.rounds, args.slots)
    print(text)
    if not args.no_write:
        print(f"wrote {write_result(text, 'tally-encoding')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
