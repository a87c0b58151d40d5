"""Costs the capacity model times alone, outside the simulated fleets.

- ``verify_us``: one token check (OpenSSL RSASSA-PSS, no cache), CPU time;
- ``hit_us``: one token answered by the verifier's cache (``Verifier.check_all``
  over a relay batch of distinct, already verified tokens), CPU time;
- ``sign_ms``: one blind signature of the issuer (``TokenKey.blind_sign``);
- ``estimate_ms``: one estimate with intervals (``aggregator.estimate``);
- ``slot_profile``: one per-report state hash filled to several depths (rests
  per bucket) on a private redis-server: its bytes per bucket (``MEMORY USAGE``)
  and the Redis CPU and append-only bytes of a one-report ingest script call;
- ``counter_us``: the Redis CPU of one more tally counter written by an ingest
  script call (calls of the same reports with 64 distinct counters against 1).

Run one alone: ``.venv/bin/python -m benchmarks.unit_costs sign_ms`` (or
``verify_us``, ``hit_us``, ``estimate_ms``, ``counter_us``); ``benchmarks/capacity.py``
runs them all.

>>> DEPTHS[0], DEPTHS[-1] * 65_536
(1, 249036800)
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import redis

from benchmarks._services import client_cpu_seconds
from collector.store.schema import INGEST_LUA
from collector.token_crypto import TokenKey, Verifier
from ldp_server.redis_server import RedisServer

__all__ = ["DEPTHS", "Slot", "counter_calls", "counter_us", "estimate_ms", "hit_us", "sign_ms",
           "slot_profile", "verify_us"]

DEPTHS = (1, 8, 38, 380, 3800)  # spent tokens per bucket: n per slot = depth * 65,536


@dataclass(frozen=True)
class Slot:
    """One slot filled to ``depth`` rests per bucket: its memory and one script call's cost."""

    depth: int
    bytes_per_bucket: float
    redis_us_per_call: float
    aof_bytes_per_call: float


def verify_us(bits: int = 2048, count: int = 300) -> float:
    """CPU us per token check (OpenSSL), median of 3 rounds."""
    from benchmarks.fleet import mint_tokens
    from ldp_core.tokens import unit_digest

    key = TokenKey.generate(bits)
    tokens = mint_tokens(key.to_pem(), [("day", 1)] * count, processes=1)
    verifier = Verifier([key.public], cache_size=0)
    units = [unit_digest("day", 1)]
    rounds = []
    for _ in range(3):
        start = time.process_time()
        assert all(verifier.check(t, units) for t in tokens)
        rounds.append((time.process_time() - start) / count)
    return 1e6 * statistics.median(rounds)


def hit_us(bits: int = 2048, count: int = 1000, rounds: int = 20) -> float:
    """CPU us per token answered by the verifier's cache: ``check_all`` over a batch
    of ``count`` distinct tokens it verified before (a relay's batch of one metric,
    each device's token back from its batch of another metric), median of 3 rounds
    of ``rounds`` batches."""
    from benchmarks.fleet import mint_tokens
    from ldp_core.tokens import unit_digest

    key = TokenKey.generate(bits)
    units = (unit_digest("day", 1),)
    tokens = mint_tokens(key.to_pem(), [("day", 1)] * count, processes=1)
    verifier = Verifier([key.public])
    batch = [(t, units) for t in tokens]
    assert all(verifier.check_all(batch))
    checked = verifier.verifications
    times = []
    for _ in range(3):
        start = time.process_time()
        for _ in range(rounds):
            verifier.check_all(batch)
        times.append((time.process_time() - start) / (rounds * count))
    assert verifier.verifications == checked  # every answer came from the cache
    return 1e6 * statistics.median(times)


def sign_ms(count: int = 200) -> float:
    """Issuer CPU ms per blind signature (``TokenKey.blind_sign``, 2048 bits)."""
    from ldp_core import tokens

    key = TokenKey.generate(2048)
    blinded = [tokens.prepare(key.public, "day", 1).blinded for _ in range(count)]
    start = time.process_time()
    for b in blinded:
        key.blind_sign(b)
    return 1e3 * (time.process_time() - start) / count


def estimate_ms() -> float:
    """Aggregator ms per estimate with intervals (GRR d = 64, n = 10^6 reports)."""
    from aggregator import estimate
    from ldp_core import mechanism
    from ldp_core.simulate import tallies

    m = mechanism("grr", epsilon=1.0, domain_size=64)
    t, n = tallies(m, np.random.default_rng(0).integers(0, 64, 10**6), seed=0)
    start = time.perf_counter()
    for _ in range(20):
        estimate(m, t, n, confidence=0.95)
    return 1e3 * (time.perf_counter() - start) / 20


def slot_profile(depths: Sequence[int] = DEPTHS, buckets: int = 2048,
                 calls: int = 2000) -> list[Slot]:
    """Fill ``buckets`` buckets of one state hash with ``depth`` rests each, then
    time ``calls`` one-report script calls into those buckets (the collector's
    INGEST_LUA, pipelined; Redis with append-only everysec, as deployed)."""
    out = []
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer.start(folder)
        try:
            client = redis.Redis(port=server.port)
            sha = client.script_load(INGEST_LUA)
            for depth in depths:
                client.flushall()
                pipe = client.pipeline(transaction=False)
                for i in range(buckets):
                    pipe.hset("s:{x}:d", i.to_bytes(2, "big"), os.urandom(6 * depth))
                pipe.execute()
                size = int(client.memory_usage("s:{x}:d", samples=0) or 0)
                cpu0, aof0 = client_cpu_seconds(client), _aof(client)
                pipe = client.pipeline(transaction=False)
                for i in range(calls):
                    record = (i % buckets).to_bytes(2, "big") + os.urandom(6)
                    pipe.evalsha(sha, 2, "s:{x}:t", "s:{x}:d", 2**40, 1, record, "0;", "0:1",
                                 2**40)
                    if i % 100 == 99:
                        pipe.execute()
                pipe.execute()
                cpu = client_cpu_seconds(client) - cpu0
                out.append(Slot(depth, size / buckets, 1e6 * cpu / calls,
                                (_aof(client) - aof0) / calls))
            client.close()
        finally:
            server.stop()
    return out


def counter_us(reports: int = 250, slots: int = 100, rounds: int = 48,
               distinct: int = 64) -> float:
    """Redis CPU us per tally counter an ingest script call writes (the collector's
    INGEST_LUA on a private redis-server, append-only everysec): calls of ``reports``
    reports into fresh slots whose reports hold ``distinct`` counters against calls
    whose reports all hold one, the two alternated (ABBA) over ``rounds`` rounds of
    ``slots`` calls (``counter_calls``): the median over the rounds of the round's
    difference, over ``distinct - 1``.  (Paired rounds of 100 calls, ~0.1 s each:
    the difference of the two sides' medians over rounds of 400 calls ranged over
    1.1-4.1 us in five runs on a quiet machine, the paired one 1.6-1.9 in three.)

    A call reads and writes each counter its reports touch once (one HMGET and one
    HSET of the merged increments), so a relay's batch of 1000 reports of a GRR
    metric over 64 values writes about 64 counters per slot, a device's one report
    one: what the model's Redis term ``w`` counts (``capacity.counter_writes``).
    """
    extra: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer.start(folder)
        try:
            client = redis.Redis(port=server.port)
            sha = client.script_load(INGEST_LUA)
            for step in range(rounds):
                per_call = {}
                for d in (1, distinct) if step % 2 else (distinct, 1):
                    pipe = client.pipeline(transaction=False)
                    counter_calls(pipe, sha, reports, d, [f"c:{{{step}:{d}:{s}}}"
                                                         for s in range(slots)])
                    cpu0 = client_cpu_seconds(client)
                    pipe.execute()
                    per_call[d] = 1e6 * (client_cpu_seconds(client) - cpu0) / slots
                extra.append((per_call[distinct] - per_call[1]) / (distinct - 1))
            client.close()
        finally:
            server.stop()
    return statistics.median(extra)


def counter_calls(pipe: redis.client.Pipeline, sha: str, reports: int, distinct: int,
                  tags: Sequence[str]) -> None:
    """Queue one INGEST_LUA call (by ``sha``) per tag: ``reports`` fresh reports into
    the slot ``<tag>:t`` (tally) / ``<tag>:d`` (state), report i holding counter
    ``i % distinct``."""
    counters = "".join(f"{i % distinct};" for i in range(reports))
    merged = ",".join(f"{v}:{len(range(v, reports, distinct))}" for v in range(distinct))
    for tag in tags:
        pipe.evalsha(sha, 2, f"{tag}:t", f"{tag}:d", 2**40, reports, os.urandom(8 * reports),
                     counters, merged, 2**40)


def _aof(client: redis.Redis) -> int:
    return int(client.info("persistence").get("aof_current_size", 0))


if __name__ == "__main__":
    import sys

    costs = {"sign_ms": sign_ms, "verify_us": verify_us, "hit_us": hit_us,
             "estimate_ms": estimate_ms, "counter_us": counter_us}
    for name in sys.argv[1:] or list(costs):
        print(f"{name} = {costs[name]():.4g}; load average {os.getloadavg()[0]:.2f}")
