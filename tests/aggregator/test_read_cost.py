"""What a window read costs: the counters stored, not the metric's declared width.

A string metric declares 325,632 counters, but an epoch stores only the
counters its reports set.  Tallies are ingested through the collector store's
own path into the session's real redis-server; the expected costs are counted
here independently (HLEN of every tally hash, minus its report count field).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest
import redis

from aggregator.paging import DEFAULT_BOUND, ReadBound
from aggregator.problems import Problem
from aggregator.service import estimate_response
from aggregator.settings import Settings
from aggregator.views import EstimateOptions
from collector.store import Store
from collector.store.reads import READ_SLICE
from ldp_core.metric import MetricSpec
from ldp_core.simulate import tallies
from ldp_server.redis_server import RedisServer
from tests.support.tallies import register, stored_counters, write_tallies

pytestmark = pytest.mark.anyio

E0 = 20_000
WEEK = 7
REPORTS = 2_000
STRING = {
    "name": "search",
    "kind": "string",
    "epsilon": 4.0,
    "max_length": 6,
    "alphabet": "a-z",
    "min_reports": 1,
}
WIDTH = 325_632
DENSE = {
    "name": "dense", "kind": "categorical", "epsilon": 2.0, "mechanism": "grr",
    "domain": [f"v{i}" for i in range(64)],
}


@pytest.fixture(scope="module")
def world(redis_server: RedisServer) -> Iterator[dict[str, Any]]:
    """A week of a string metric at 2,000 reports per epoch, and one wide epoch."""
    url = redis_server.url
    with redis.Redis.from_url(url) as client:
        client.flushall()
        spec = register(url, STRING)
        m = spec.build()
        codes = np.array([m.check_value(s) for s in ("hello", "world", "ab", "zz")])
        gen = np.random.default_rng(5)
        week = {}
        for k in range(WEEK):
            t = m.simulate_counts(codes, np.array([800, 600, 400, 200]), gen)  # type: ignore[attr-defined]
            week[E0 + k] = (t.tolist(), REPORTS)
        write_tallies(url, spec, week)
        # One epoch of 20,000 set counters over 3 reports: shards of several READ_SLICEs.
        wide = register(url, {**STRING, "name": "wide"})
        t = np.zeros(WIDTH, dtype=np.int64)
        t[gen.choice(WIDTH, size=20_000, replace=False)] = gen.integers(1, 4, size=20_000)
        write_tallies(url, wide, {E0: (t.tolist(), 3)})
        # A dense metric: 2,000 reports per epoch over 64 values fill every shard.
        dense = register(url, DENSE)
        dm = dense.build()
        week = {}
        for k in range(WEEK):
            dt = tallies(dm, gen.integers(0, 64, size=REPORTS), seed=100 + k)[0]
            week[E0 + k] = (dt.tolist(), REPORTS)
        write_tallies(url, dense, week)
        yield {
            "url": url,
            "dense": dense,
            "dense_stored": stored_counters(url, dense),
            "spec": spec,
            "stored": stored_counters(url, spec),
            "wide": wide,
            "wide_tally": t,
            "wide_stored": stored_counters(url, wide),
        }


@pytest.fixture()
async def store(world: dict[str, Any]) -> AsyncIterator[Store]:
    s = Store.connect(world["url"], shards=4)
    try:
        yield s
    finally:
        await s.close()


async def _estimate(store: Store, spec: MetricSpec, bound: ReadBound, **kw: Any) -> dict[str, Any]:
    return await estimate_response(
        store,
        spec,
        start=E0,
        end=E0 + WEEK,
        options=EstimateOptions(),
        max_epochs=10_000,
        bound=bound,
        **{"series": False, **kw},
    )


async def test_stored_counters_are_counted_per_epoch(world: dict[str, Any], store: Store) -> None:
    stored = await store.read_stored(world["spec"], range(E0 - 1, E0 + WEEK + 1))
    assert stored == world["stored"] and sorted(stored) == list(range(E0, E0 + WEEK))
    # About 2,000 distinct counters set per epoch: far below the declared width.
    assert all(1000 < c < REPORTS for c in stored.values()), stored


async def test_a_tally_of_several_slices_is_read_exactly(
    world: dict[str, Any], store: Store
) -> None:
    wide = world["wide"]
    assert max(world["wide_stored"].values()) > READ_SLICE  # the read takes several slices
    ((epoch, vector, n),) = [row async for row in store.read_vectors(wide, [E0])]
    assert (epoch, n) == (E0, 3)
    assert np.array_equal(vector, world["wide_tally"])


async def test_a_week_of_a_string_metric_is_answered_under_the_default_bound(
    world: dict[str, Any], store: Store
) -> None:
    # Declared, the week is 7 x 325,632 counters: over the default bound.
    assert WEEK * WIDTH > DEFAULT_BOUND.max_counters == Settings().max_read_counters
    body = await _estimate(store, world["spec"], DEFAULT_BOUND)
    assert body["window"]["epochs"] == WEEK and body["n"] == WEEK * REPORTS
    assert not body["suppressed"]
    found = {row["category"] for row in body["estimate"]["values"] if row["confident"]}
    assert {"hello", "world"} <= found


async def test_a_window_over_its_stored_counters_is_refused_with_the_numbers(
    world: dict[str, Any], store: Store
) -> None:
    total = sum(world["stored"].values())
    heaviest = max(world["stored"].values())
    tight = ReadBound(max_counters=total - 1)
    with pytest.raises(Problem) as refused:
        await _estimate(store, world["spec"], tight)
    assert (refused.value.status, refused.value.code) == (422, "window_too_costly")
    detail = refused.value.detail
    assert f"{WEEK} epochs with data and {total} stored counters" in detail, detail
    assert f"at most {heaviest} per epoch" in detail and f"at most {total - 1} (LDP_MAX" in detail
    assert f"at most {(total - 1) // heaviest} epochs with data" in detail
    exact = await _estimate(store, world["spec"], ReadBound(max_counters=total))
    assert exact["window"]["epochs"] == WEEK


async def test_series_pages_hold_what_the_stored_counters_allow(
    world: dict[str, Any], store: Store
) -> None:
    heaviest = max(world["stored"].values())
    bound = ReadBound(max_counters=3 * heaviest + 1)
    first = await _estimate(store, world["spec"], bound, series=True)
    assert first["suppressed"] and first["estimate"] is None
    assert "not computed: the window holds 7 epochs" in first["reason"]
    epochs, page = [p["epoch"] for p in first["series"]], first["page"]
    while page["next_cursor"] is not None:
        assert page["limit"] == 3
        more = await _estimate(store, world["spec"], bound, series=True, cursor=page["next_cursor"])
        epochs += [p["epoch"] for p in more["series"]]
        page = more["page"]
    assert epochs == list(range(E0, E0 + WEEK))


async def test_a_dense_metric_counts_every_shard_it_reads(
    world: dict[str, Any], store: Store
) -> None:
    # Each of the 4 shards of an epoch holds (nearly) all 64 counters: a read parses
    # about 4 x 64 fields per epoch, and the bound counts them all (it used to count
    # the declared 64, so 4x the bound could be read).
    stored = world["dense_stored"]
    assert sorted(stored) == list(range(E0, E0 + WEEK))
    assert all(3 * 64 < c <= 4 * 64 for c in stored.values()), stored
    declared = ReadBound(max_counters=64 * WEEK)
    with pytest.raises(Problem) as refused:
        await _estimate(store, world["dense"], declared)
    assert (refused.value.status, refused.value.code) == (422, "window_too_costly")
    assert f"{WEEK} epochs with data and {sum(stored.values())} stored counters" in (
        refused.value.detail
    )
    body = await _estimate(store, world["dense"], ReadBound(max_counters=sum(stored.values())))
    assert body["window"]["epochs"] == WEEK
