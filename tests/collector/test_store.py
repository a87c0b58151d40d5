"""collector.store against a real redis-server: specs, exactly-once tallies, the read side."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
import redis

from collector.store import STATE_MARGIN_SECONDS, Store, ValidReport
from ldp_core.metric import MetricSpec
from ldp_core.tokens import unit_digest
from tests.support.reports import SPECS, envelope, today
from tests.support.tokens import VERIFIER

pytestmark = pytest.mark.anyio


@pytest.fixture()
async def store(redis_url: str) -> AsyncIterator[Store]:
    s = Store.connect(redis_url, shards=4)
    try:
        yield s
    finally:
        await s.close()


def valid(
    spec: MetricSpec,
    epoch: int,
    payload: object,
    device: int | None = None,
    report_id: str | None = None,
) -> ValidReport:
    env = envelope(
        spec.name,
        spec.version,
        epoch,
        payload,
        device=device,  # type: ignore[arg-type]
        report_id=report_id,
        period=spec.epoch,
    )
    m = spec.build()
    # As the collector does before the store: the token checked, its nonce kept.
    nonce = VERIFIER.check(env.token, [unit_digest(spec.epoch, epoch)])
    assert nonce is not None
    return ValidReport(spec, epoch, env.report_id, nonce.hex(), m.counters(m.decode(env.payload)))


async def test_versions_are_assigned_and_identical_specs_are_not_duplicated(store: Store) -> None:
    first, created = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
    assert (first.version, created) == (1, True)
    again, created = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
    assert (again.version, created) == (1, False)
    changed = {**SPECS["browser"], "epsilon": 2.0}
    second, created = await store.create_metric(MetricSpec.from_json(changed))
    assert (second.version, created) == (2, True)
    assert second.epsilon == 2.0
    # An older spec posted again is a new version: versions only go up.
    third, created = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
    assert (third.version, created) == (3, True)
    latest = await store.get_metric("browser")
    assert latest is not None and latest.version == 3
    v1 = await store.get_metric("browser", 1)
    assert v1 is not None and v1.epsilon == 1.0
    assert await store.get_metric("browser", 9) is None
    assert await store.get_metric("nothing") is None


async def test_list_metrics_gives_latest_versions_and_specs_round_trip(store: Store) -> None:
    for body in SPECS.values():
        await store.create_metric(MetricSpec.from_json(body))
    await store.create_metric(MetricSpec.from_json({**SPECS["page"], "min_reports": 5}))
    listed = {s.name: s for s in await store.list_metrics()}
    assert sorted(listed) == sorted(SPECS)
    assert listed["page"].version == 2 and listed["page"].min_reports == 5
    # A fresh Store (no cache) rebuilds the same spec from Redis.
    other = Store(store.client)
    rebuilt = await other.get_metric("country", 1)
    assert rebuilt is not None
    assert rebuilt.to_json() == listed["country"].to_json()
    assert rebuilt.build().num_counters == listed["country"].build().num_counters


async def test_tallies_are_exact_sums_over_shards(store: Store) -> None:
    spec, _ = await store.create_metric(MetricSpec.from_json(SPECS["page"]))
    m = spec.build()
    rng = random.Random(4)
    epoch = today()
    reports = [
        valid(spec, epoch, m.encode(m.randomize(rng.randrange(20), rng=rng))) for _ in range(400)
    ]
    outcomes = await store.ingest(reports)
    assert outcomes == ["accepted"] * 400
    expected = [0] * m.num_counters
    for r in reports:
        for c in r.counters:
            expected[c] += 1
    tallies = await store.read_tallies(spec, [epoch, epoch + 1])
    assert tallies == {epoch: (expected, 400)}
    assert await store.epochs_with_data(spec) == [epoch]
    # The reports spread over all 4 shards (P[a shard empty] <= 4 * (3/4)^400 < 1e-49).
    with _sync(store) as client:
        keys = sorted(k.decode() for k in client.scan_iter(match="ldp:{m:page:1:*}:t"))
    assert keys == [f"ldp:{{m:page:1:{epoch}:{s}}}:t" for s in range(4)]


def _sync(store: Store) -> redis.Redis:
    kwargs = store.client.connection_pool.connection_kwargs  # type: ignore[union-attr]
    return redis.Redis(host=kwargs["host"], port=kwargs["port"])


async def test_retries_count_once_and_a_token_counts_once_per_epoch(store: Store) -> None:
    spec, _ = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
    epoch = today()
    a = valid(spec, epoch, 1, device=1)
    b = valid(spec, epoch, 2, device=2)
    assert await store.ingest([a, b]) == ["accepted", "accepted"]
    # The same reports again (a retry), and inside one batch twice.
    assert await store.ingest([a, b, a]) == ["duplicate", "duplicate", "duplicate"]
    # Device 1 sends a second, different report with its spent token: not counted
    # (a token reuse is told apart from a retry by nobody: both are "duplicate").
    a2 = valid(spec, epoch, 3, device=1)
    assert a2.token == a.token and a2.report_id != a.report_id
    assert await store.ingest([a2]) == ["duplicate"]
    # ...but in the next epoch it has another token and it counts.
    assert await store.ingest([valid(spec, epoch - 1, 3, device=1)]) == ["accepted"]
    # Within one batch: first wins, the second is refused, counters move once.
    c1 = valid(spec, epoch, 0, device=3)
    c2 = valid(spec, epoch, 0, device=3)
    assert await store.ingest([c1, c2, c1]) == ["accepted", "duplicate", "duplicate"]
    tallies = await store.read_tallies(spec, [epoch, epoch - 1])
    assert tallies[epoch] == ([1, 1, 1, 0], 3)
    assert tallies[epoch - 1] == ([0, 0, 0, 1], 1)
    assert await store.epochs_with_data(spec) == [epoch - 1, epoch]


async def test_one_token_is_spent_once_in_each_metric_of_its_epoch(store: Store) -> None:
    """A device's token of an epoch goes on its reports of every metric: the spent state
    is per (metric, version, epoch, shard) slot, so it counts once in each."""
    browser, _ = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
    dark, _ = await store.create_metric(MetricSpec.from_json(SPECS["dark_mode"]))
    epoch = today()
    a, b = valid(browser, epoch, 1, device=7), valid(dark, epoch, 1, device=7)
    assert a.token == b.token
    assert await store.ingest([a, b]) == ["accepted", "accepted"]
    again = [valid(browser, epoch, 2, device=7), valid(dark, epoch, 0, device=7)]
    assert await store.ingest(again) == ["duplicate", "duplicate"]
    assert (await store.read_tallies(browser, [epoch]))[epoch] == ([0, 1, 0, 0], 1)
    assert (await store.read_tallies(dark, [epoch]))[epoch] == ([0, 1], 1)


async def test_versions_and_epochs_do_not_mix(store: Store) -> None:
    v1, _ = await store.create_metric(MetricSpec.from_json(SPECS["dark_mode"]))
    v2, _ = await store.create_metric(MetricSpec.from_json({**SPECS["dark_mode"], "epsilon": 2}))
    epoch = today()
    await store.ingest([valid(v1, epoch, 1), valid(v1, epoch, 1), valid(v2, epoch, 0)])
    assert await store.read_tallies(v1, [epoch]) == {epoch: ([0, 2], 2)}
    assert await store.read_tallies(v2, [epoch]) == {epoch: ([1, 0], 1)}
    assert await store.read_tallies(v2, [epoch - 3]) == {}


async def test_per_report_state_and_tallies_expire_after_their_windows(store: Store) -> None:
    """Every key a report writes has a TTL: the per-report state at the end of the
    acceptance window, the counters after their retention (LDP_TALLY_RETENTION_DAYS)."""
    spec, _ = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
    epoch = today()
    await store.ingest([valid(spec, epoch, 1)])
    with _sync(store) as client:
        dedupe = [k for k in client.scan_iter(match="ldp:{m:browser:1:*}:d")]
        assert len(dedupe) == 1
        expire_at = client.expiretime(dedupe[0])
        tallies = [k for k in client.scan_iter(match="ldp:{m:browser:1:*}:t")]
        tally_expire_at = client.expiretime(tallies[0])
    assert expire_at == (epoch + 1) * 86400 + store.acceptance_seconds + STATE_MARGIN_SECONDS
    assert store.acceptance_seconds < store.retention_seconds
    assert tally_expire_at == (epoch + 1) * 86400 + store.tally_retention_seconds


async def test_a_state_hash_is_a_hash_table_from_its_first_report(redis_url: str) -> None:
    """A listpack is scanned by every field look-up (a slot's 251st to 1,500th reports
    cost 2-6x the Redis CPU: bench_report_state.py); the filler field "~" keeps the
    state hash out of it under any hash-max-listpack-entries, until the slot holds
    4,096 reports (~4,000 buckets: a hash table even after a reload)."""
    store = Store.connect(redis_url, shards=1)
    try:
        spec, _ = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
        epoch = today()
        m = spec.build()
        reports = [ValidReport(spec, epoch, f"{i:032x}", f"{i:064x}", m.counters(1))
                   for i in range(4097)]
        with _sync(store) as client:
            assert int(client.config_get("hash-max-listpack-entries")
                       ["hash-max-listpack-entries"]) > 1
            for lo, hi in ((0, 1), (1, 2), (2, 1000), (1000, 4095), (4095, 4096), (4096, 4097)):
                assert await store.ingest(reports[lo:hi]) == ["accepted"] * (hi - lo)
                (key,) = list(client.scan_iter(match="ldp:{m:browser:1:*}:d"))
                assert client.object("encoding", key) == b"hashtable"
                filler = client.hget(key, "~")
                assert len(filler or b"") == (65 if hi < 4096 else 0)
                # a field per bucket taken so far (at most one per report), and the filler
                assert 1 <= client.hlen(key) - (filler is not None) <= hi
    finally:
        await store.close()


async def test_thousands_of_tokens_in_one_slot_count_once_each(redis_url: str) -> None:
    """One shard, 3000 tokens: buckets hold many 6-byte rests, searched aligned;
    every token counts once, every one is a duplicate the second time."""
    store = Store.connect(redis_url, shards=1)
    try:
        spec, _ = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
        epoch = today() - 1
        m = spec.build()
        reports = [ValidReport(spec, epoch, f"{i:032x}", f"{i:064x}", m.counters(i % 4))
                   for i in range(3000)]
        for lo in range(0, 3000, 1000):
            assert await store.ingest(reports[lo:lo + 1000]) == ["accepted"] * 1000
        random.Random(5).shuffle(reports)
        assert await store.ingest(reports[:1000]) == ["duplicate"] * 1000
        assert await store.read_tallies(spec, [epoch]) == {epoch: ([750] * 4, 3000)}
    finally:
        await store.close()


async def test_refused_reports_take_back_their_counters(store: Store) -> None:
    """Multi-counter reports (OUE), an empty report, refusals inside one slot call."""
    spec, _ = await store.create_metric(MetricSpec.from_json(SPECS["page"]))
    m = spec.build()
    epoch = today()
    empty = valid(spec, epoch, m.encode(()), device=1)
    three = valid(spec, epoch, m.encode((0, 5, 19)), device=2)
    assert await store.ingest([empty, three]) == ["accepted", "accepted"]
    again = valid(spec, epoch, m.encode((5, 6)), device=2)  # token reused
    fresh = valid(spec, epoch, m.encode((6,)), device=3)
    out = await store.ingest([three, again, empty, fresh, again])
    assert out == ["duplicate", "duplicate", "duplicate", "accepted", "duplicate"]
    expected = [0] * 20
    for i in (0, 5, 19, 6):
        expected[i] += 1
    assert await store.read_tallies(spec, [epoch]) == {epoch: (expected, 3)}


async def test_a_long_server_secret_is_accepted(redis_url: str) -> None:
    store = Store.connect(redis_url, secret=b"s" * 100)
    try:
        spec, _ = await store.create_metric(MetricSpec.from_json(SPECS["browser"]))
        assert await store.ingest([valid(spec, today(), 1)]) == ["accepted"]
    finally:
        await store.close()


async def test_a_slot_with_tens_of_thousands_of_counters_is_ingested(redis_url: str) -> None:
    """OUE over 20,000 values at eps 4 (360 set bits per report, within the cost cap):
    one shard, 300 reports touch ~17,000 distinct counters in one slot.  The script's
    HMGET/HSET of that many fields once failed in Lua's unpack ("too many results to
    unpack", every batch refused); they now go in chunks."""
    store = Store.connect(redis_url, shards=1)
    try:
        spec, _ = await store.create_metric(MetricSpec.from_json({
            "name": "wide", "kind": "categorical", "epsilon": 4.0, "mechanism": "oue",
            "domain": [f"v{i}" for i in range(20000)]}))
        m = spec.build()
        rng = random.Random(11)
        epoch = today()
        reports = [
            ValidReport(spec, epoch, f"{i:032x}", f"{i:064x}",
                        m.counters(m.randomize(rng.randrange(20000), rng=rng)))
            for i in range(300)
        ]
        expected = [0] * m.num_counters
        for r in reports:
            for c in r.counters:
                expected[c] += 1
        assert sum(1 for x in expected if x) > 8000  # past the old unpack limit
        assert await store.ingest(reports) == ["accepted"] * 300
        assert await store.ingest(reports[:10]) == ["duplicate"] * 10
        assert await store.read_tallies(spec, [epoch]) == {epoch: (expected, 300)}
    finally:
        await store.close()
