"""A fresh aggregator's first estimate of a metric: no wasted table, a free event loop.

The poisoning signals of a GRR window used to build the 4096 x 4096 support
matrix of a 4096-value metric although no statistic of GRR uses it (the
difference-of-shares Monte Carlo applies to unary, one-bit and CMS designs
only): 12 s of CPU and 600 MB of Python ints, then one numpy conversion that
held the GIL for 2.6 s, during which the event loop could answer nothing
(/healthz waited 1.3-2 s, docs/analysts.md).  The tables are now built only
where they are used, row by row.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from aggregator import drift, poisoning
from aggregator.drift import mga_laws
from aggregator.drift_memo import memoised_drift
from ldp_core import longitudinal, mechanism
from ldp_core.metric import MetricSpec
from ldp_server.redis_server import RedisServer
from tests.support.servers import ANALYST_KEY, ServiceProcess, auth, start_uvicorn
from tests.support.tallies import register, write_tallies

D = 4096


def _grr_json(name: str, d: int) -> dict[str, Any]:
    return {"name": name, "kind": "categorical", "domain": [f"v{i}" for i in range(d)],
            "epsilon": 1.0, "mechanism": "grr", "epoch": "day", "min_reports": 1}


def test_a_grr_window_builds_no_support_matrix() -> None:
    """Old code: one miss of ``_support_matrix`` (the 4096 x 4096 table) per metric."""
    spec = MetricSpec.from_json({**_grr_json("wide", D), "version": 1})
    rows = [(20_000 + k, np.full(D, 4, dtype=np.int64), 4) for k in range(3)]
    total = np.sum([v for _, v, _ in rows], axis=0)
    poisoning._support_matrix.cache_clear()
    out = poisoning.estimate_signals(spec, total, 12, per_epoch=rows)
    assert out["drift"] is not None  # the drift signal ran (normal thresholds: over the caps)
    assert poisoning._support_matrix.cache_info().misses == 0


def test_two_level_grr_over_the_caps_builds_no_fake_laws() -> None:
    """Old code: ``memoised_drift`` built ``mga_laws`` (counters x values) before the caps."""
    m = longitudinal("grr", epsilon=1.0, epsilon_inf=4.0, domain_size=1024)
    mga_laws.cache_clear()
    t = np.full(1024, 3, dtype=np.int64)
    assert memoised_drift(m, (t, 3072), (2 * t, 6144), 0.009, 0.0005, 1999) is None
    assert mga_laws.cache_info().misses == 0


@pytest.mark.parametrize(
    "m",
    [mechanism("grr", epsilon=1.0, domain_size=7), mechanism("oue", epsilon=1.0, domain_size=9),
     mechanism("olh", epsilon=2.0, domain_size=12),
     mechanism("one_bit_mean", epsilon=1.0, lo=0.0, hi=10.0), mechanism("binary_rr", epsilon=1.0)],
    ids=lambda m: m.name,
)
def test_support_rows_are_the_support_counts_of_unit_tallies(m: Any) -> None:
    """Row by row, the same table as the nested-list construction it replaces."""
    eye = np.eye(m.num_counters, dtype=np.int64)
    expected = np.array([m.support_counts(eye[c]) for c in range(m.num_counters)], dtype=float)
    np.testing.assert_array_equal(drift.support_rows(m), expected)


# -- a fresh aggregator over real HTTP ----------------------------------------------------

HEAVY = (D, 16)  # counters, epochs: dense tallies over 4 shards (~260,000 values read)
E0 = 20_000


@pytest.fixture()
def fresh_aggregator(redis_server: RedisServer, tmp_path: Path) -> Iterator[ServiceProcess]:
    url = redis_server.url
    redis.Redis.from_url(url).flushall()
    heavy = register(url, _grr_json("heavy", HEAVY[0]))
    write_tallies(url, heavy, {E0 + k: ([4] * HEAVY[0], 4) for k in range(HEAVY[1])})
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": url, "LDP_ANALYST_KEYS": ANALYST_KEY}
    service = start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path)
    try:
        yield service
    finally:
        service.stop()


def _scard_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_scard", {})
    return int(stats.get("calls", 0))


def test_healthz_answers_while_a_cold_estimate_computes(
    fresh_aggregator: ServiceProcess, redis_server: RedisServer
) -> None:
    """Ordering, not timing: the first estimate of a fresh aggregator (a series of
    every epoch: seconds of arithmetic after its last Redis read) is under way; once
    its last read is done (the SCARD of the poisoning flags: nothing but arithmetic
    is left), a /healthz sent then answers before the estimate's status line
    arrives.

    Arithmetic on the event loop fails this (checked: ``_window_body`` and
    ``_points`` called directly instead of through ``run_in_threadpool``: /healthz
    answered after the estimate).  The old GIL stall (one 2.6 s numpy call at the
    end of 12 s of table building) does not fail it reliably: an ordering cannot see
    a freeze of the whole process, only work that the loop itself does;
    ``test_a_grr_window_builds_no_support_matrix`` pins that cause.
    """
    events: list[str] = []
    lock = threading.Lock()
    done: dict[str, httpx.Response] = {}

    def estimate() -> None:
        # The estimate counts as answered at its status line: its body (MBs) may
        # still be on the way while the loop is free again.
        with httpx.stream("GET", fresh_aggregator.url + "/v1/estimates/heavy",
                          params={"series": "epoch"}, headers=auth(ANALYST_KEY),
                          timeout=300) as response:
            with lock:
                events.append("estimate")
            response.read()
            done["r"] = response

    with redis.Redis.from_url(redis_server.url) as client:
        before = _scard_calls(client)
        worker = threading.Thread(target=estimate)
        worker.start()
        while _scard_calls(client) == before and worker.is_alive():
            threading.Event().wait(0.005)
    assert worker.is_alive(), "the estimate ended before its reads were seen: make it larger"
    health = httpx.get(fresh_aggregator.url + "/healthz", timeout=300)
    with lock:
        events.append("healthz")
    worker.join()
    assert health.status_code == 200
    assert done["r"].status_code == 200, done["r"].text
    assert len(done["r"].json()["series"]) == HEAVY[1]
    assert events == ["healthz", "estimate"]
