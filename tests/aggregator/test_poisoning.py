"""The estimate's poisoning signals, read through the real store from a real Redis.

Honest OUE tallies: not flagged (the set-bit total is within SUM_Z_FLAG = 5
standard deviations of its honest law: false-flag rate 6e-7 per window).
Crafted reports that each set many bits (below the per-report limit) shift
that total by far more; reports the collector refused as implausible are
counted and flag the window too.
"""

from __future__ import annotations

import asyncio
import secrets
import time

import numpy as np
import redis

from aggregator.service import poisoning
from collector.store import Store, ValidReport
from ldp_core.simulate import tallies
from ldp_server.redis_server import RedisServer
from tests.support.tallies import register, write_tallies

#: Today's epoch: the refused-report set expires with the epoch's retention window.
EPOCH = int(time.time() // 86400)
SPEC = {
    "name": "poison.target",
    "kind": "categorical",
    "domain": [f"v{i}" for i in range(32)],
    "epsilon": 1.0,
    "mechanism": "oue",
}


def _signals(url: str, spec_name: str) -> dict[str, object]:
    async def run() -> dict[str, object]:
        store = Store.connect(url)
        try:
            spec = await store.get_metric(spec_name)
            assert spec is not None
            found = await store.read_tallies(spec, [EPOCH])
            vector, n = found[EPOCH]
            return await poisoning(store, spec, [EPOCH], vector, n)
        finally:
            await store.close()

    return asyncio.run(run())


def test_honest_tallies_are_not_flagged_and_crafted_ones_are(redis_server: RedisServer) -> None:
    redis.Redis.from_url(redis_server.url).flushall()
    spec = register(redis_server.url, SPEC)
    m = spec.build()
    values = np.random.default_rng(3).integers(0, 32, size=20_000)
    t, n = tallies(m, values, seed=4)
    write_tallies(redis_server.url, spec, {EPOCH: (t.tolist(), n)})
    honest = _signals(redis_server.url, spec.name)
    assert honest["flagged"] is False and honest["implausible_reports"] == 0
    assert isinstance(honest["tally_sum_z"], float) and abs(honest["tally_sum_z"]) < 5

    # 5% more clients, each setting the target bit and 16 others: an honest OUE
    # report at eps = 1 over 32 bits sets 8.8 bits on average (sd 2.5), so 17 is
    # rare but below the per-report limit.  Together they add about 8,200 bits
    # to a total whose honest sd is about 365: z near 22.
    crafted = [tuple(sorted({0, *range(10, 26)})) for _ in range(1000)]
    write_tallies(
        redis_server.url,
        spec,
        {EPOCH: (np.bincount([c for r in crafted for c in r], minlength=32).tolist(), 1000)},
    )
    poisoned = _signals(redis_server.url, spec.name)
    assert poisoned["flagged"] is True
    assert isinstance(poisoned["tally_sum_z"], float) and poisoned["tally_sum_z"] > 15


def test_refused_implausible_reports_flag_the_window(redis_server: RedisServer) -> None:
    redis.Redis.from_url(redis_server.url).flushall()
    spec = register(redis_server.url, {**SPEC, "name": "poison.refused"})
    m = spec.build()
    t, n = tallies(m, np.arange(32).repeat(100), seed=5)
    write_tallies(redis_server.url, spec, {EPOCH: (t.tolist(), n)})

    async def refuse() -> None:
        store = Store.connect(redis_server.url)
        try:
            everything = tuple(range(32))
            await store.record_implausible(
                [
                    ValidReport(
                        spec, EPOCH, secrets.token_hex(16), secrets.token_hex(32), everything
                    )
                    for _ in range(3)
                ]
            )
        finally:
            await store.close()

    asyncio.run(refuse())
    signals = _signals(redis_server.url, spec.name)
    assert signals["implausible_reports"] == 3
    assert signals["flagged"] is True
