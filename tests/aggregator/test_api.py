"""The aggregator's HTTP API over real HTTP against a real Redis.

Tallies come from the simulation path (``ldp_core.simulate.tallies``) and are
written with the collector store's own ingest path; the aggregator runs as a
uvicorn subprocess on a free loopback port.

Statistical checks use fixed seeds.  Where an interval must contain the truth
the test asks for confidence 1 - 1e-7 per interval; with at most 10 such
intervals per test the union bound puts the false-failure rate at <= 1e-6
(normal approximation, n >= 5000 reports).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from aggregator.estimate import estimate
from ldp_core.metric import MetricSpec
from ldp_core.simulate import tallies
from ldp_server.redis_server import RedisServer
from tests.support.servers import ANALYST_KEY, ServiceProcess, auth, start_uvicorn
from tests.support.tallies import register, write_tallies

#: Per-interval confidence for "the truth is inside": see the module docstring.
STRICT = 1 - 1e-7
E0 = 20_400
BROWSERS = ["chrome", "safari", "edge", "firefox", "samsung", "opera", "brave", "other"]
#: True shares; "brave" and "other" tie on purpose (the compare test abstains there).
SHARES = [0.40, 0.25, 0.12, 0.08, 0.05, 0.04, 0.03, 0.03]


def _values(shares: list[float], n: int) -> np.ndarray:
    counts = np.round(np.array(shares) * n).astype(int)
    counts[0] += n - counts.sum()
    return np.repeat(np.arange(len(shares)), counts)


def aggregator_env(url: str) -> dict[str, str]:
    return {"LDP_ENV": "dev", "LDP_REDIS_URL": url, "LDP_ANALYST_KEYS": ANALYST_KEY}


@pytest.fixture(scope="module")
def world(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Four metrics with simulated tallies over three epochs, and a live aggregator."""
    redis.Redis.from_url(redis_server.url).flushall()
    url = redis_server.url
    truth: dict[str, Any] = {}
    specs: dict[str, MetricSpec] = {}
    sums: dict[str, tuple[list[int], int]] = {}

    def add(spec_json: dict[str, Any], per_epoch: dict[int, np.ndarray], seed: int) -> None:
        spec = register(url, spec_json)
        m = spec.build()
        epochs = {}
        total = np.zeros(m.num_counters, dtype=np.int64)
        for k, (epoch, values) in enumerate(per_epoch.items()):
            t, n = tallies(m, values, seed=seed + k)
            epochs[epoch] = (t.tolist(), n)
            total += t
        write_tallies(url, spec, epochs)
        specs[spec.name] = spec
        sums[spec.name] = (total.tolist(), sum(n for _, n in epochs.values()))

    add(
        {
            "name": "browser",
            "kind": "categorical",
            "domain": BROWSERS,
            "epsilon": 2.0,
            "mechanism": "oue",
            "min_reports": 500,
        },
        {E0: _values(SHARES, 8000), E0 + 1: _values(SHARES, 6000), E0 + 2: _values(SHARES, 300)},
        seed=11,
    )
    truth["browser"] = SHARES
    crash = _values([0.7, 0.3], 20000)
    add(
        {"name": "crashed", "kind": "boolean", "epsilon": 1.0, "min_reports": 1000},
        {E0: crash[::2], E0 + 1: crash[1::2]},
        seed=21,
    )
    truth["crashed"] = 0.3
    latency = np.random.default_rng(5).uniform(10.0, 70.0, 20000).round(1)
    add(
        {
            "name": "latency",
            "kind": "numeric",
            "lo": 0.0,
            "hi": 100.0,
            "epsilon": 1.0,
            "min_reports": 1000,
        },
        {E0: latency},
        seed=31,
    )
    truth["latency"] = float(latency.mean())
    add(
        {"name": "rare", "kind": "boolean", "epsilon": 1.0, "min_reports": 1000},
        {E0: _values([0.5, 0.5], 200)},
        seed=41,
    )
    service = start_uvicorn(
        "aggregator.app:create_app", aggregator_env(url), log_dir=tmp_path_factory.mktemp("agg")
    )
    try:
        yield {
            "url": service.url,
            "truth": truth,
            "specs": specs,
            "sums": sums,
            "redis": url,
            "service": service,
        }
    finally:
        service.stop()


def get(
    world: dict[str, Any], path: str, key: str | None = ANALYST_KEY, **params: Any
) -> httpx.Response:
    headers = auth(key) if key else {}
    return httpx.get(world["url"] + path, params=params, headers=headers, timeout=10)


def test_categorical_estimate_covers_truth_and_matches_library(world: dict[str, Any]) -> None:
    r = get(world, "/v1/estimates/browser", confidence=STRICT)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["unit"] == "per device, per metric, per day"
    assert body["epsilon"] == 2.0 and body["mechanism"] == "oue"
    assert body["n"] == 14300 and not body["suppressed"] and body["reason"] is None
    assert body["window"]["epochs"] == 3
    values = body["estimate"]["values"]
    assert [v["category"] for v in values] == BROWSERS
    for v, share in zip(values, world["truth"]["browser"], strict=True):
        assert v["ci_low"] <= share <= v["ci_high"], v
        assert "consistent" not in v
    # Exactly the library's estimate of the simulated tallies: Redis summed them right.
    t, n = world["sums"]["browser"]
    lib = estimate(world["specs"]["browser"].build(), t, n, confidence=STRICT)
    np.testing.assert_allclose([v["value"] for v in values], lib.value, rtol=1e-12)
    np.testing.assert_allclose([v["stderr"] for v in values], lib.stderr, rtol=1e-12)


def test_consistent_is_a_separate_field(world: dict[str, Any]) -> None:
    body = get(world, "/v1/estimates/browser", consistent="true").json()
    values = body["estimate"]["values"]
    cons = [v["consistent"] for v in values]
    assert all(c >= 0 for c in cons) and abs(sum(cons) - 1) < 1e-9
    assert any(v["value"] != v["consistent"] for v in values)


def test_scalar_estimates_cover_truth(world: dict[str, Any]) -> None:
    for name in ("crashed", "latency"):
        body = get(world, f"/v1/estimates/{name}", confidence=STRICT).json()
        est = body["estimate"]
        assert est["ci_low"] <= world["truth"][name] <= est["ci_high"], (name, est)
        assert body["n"] == 20000
        assert body["unit"] == "per device, per metric, per day"
    assert get(world, "/v1/estimates/latency").json()["estimate"]["quantity"] == "mean"


def test_window_and_series(world: dict[str, Any]) -> None:
    body = get(world, "/v1/estimates/browser", start=E0 + 1, end=E0 + 3).json()
    assert body["n"] == 6300 and body["window"]["epochs"] == 2
    body = get(world, "/v1/estimates/browser", start=E0, end=E0 + 1).json()
    assert body["n"] == 8000
    body = get(world, "/v1/estimates/browser", series="epoch").json()
    points = body["series"]
    assert [p["epoch"] for p in points] == [E0, E0 + 1, E0 + 2]
    assert [p["n"] for p in points] == [8000, 6000, 300]
    assert points[0]["start_time"] == E0 * 86400
    # The last epoch has 300 < 500 reports: suppressed, with its reason and no values.
    assert points[2]["suppressed"] and points[2]["estimate"] is None
    assert "below the metric's minimum of 500" in points[2]["reason"]
    assert not points[0]["suppressed"] and len(points[0]["estimate"]["values"]) == 8
    empty = get(world, "/v1/estimates/browser", start=E0 + 10, end=E0 + 20).json()
    assert empty["suppressed"] and empty["reason"] == "no reports in the window"


def test_suppressed_metric_carries_no_values(world: dict[str, Any]) -> None:
    body = get(world, "/v1/estimates/rare", series="epoch").json()
    assert body["n"] == 200 and body["suppressed"] is True and body["estimate"] is None
    assert body["reason"] == "200 reports in the window, below the metric's minimum of 1000"
    assert "value" not in str(body["series"])
    compared = get(world, "/v1/estimates/rare/compare", threshold=0.5).json()
    assert compared["decision"] is None and compared["answer"].startswith("suppressed")


def test_compare_decides_when_clear_and_abstains_near_a_tie(world: dict[str, Any]) -> None:
    # At confidence 1 - 1e-7 a wrong verdict (on a tie: any verdict) has probability
    # <= 1e-7 per call (conservative stderr se_a + se_b); 7 calls: <= 7e-7 in all.  The
    # clear cases are >= 10 stderr apart (0.40 vs 0.25, 0.3 vs 0.2, ...), so an abstention
    # there has probability < 1e-9.
    conf = 1 - 1e-7
    clear = get(
        world, "/v1/estimates/browser/compare", a="chrome", b="safari", confidence=conf
    ).json()
    assert clear["decision"]["verdict"] == "greater", clear
    assert clear["answer"] == "'chrome' is larger than 'safari'"
    flipped = get(
        world, "/v1/estimates/browser/compare", a="safari", b="chrome", confidence=conf
    ).json()
    assert flipped["answer"] == "'chrome' is larger than 'safari'"
    tie = get(world, "/v1/estimates/browser/compare", a="brave", b="other", confidence=conf).json()
    assert tie["decision"]["verdict"] == "too_close_to_call"
    assert tie["answer"] == "too close to call"
    low, high = tie["decision"]["ci_low"], tie["decision"]["ci_high"]
    assert low < 0 < high
    above = get(world, "/v1/estimates/crashed/compare", threshold=0.2, confidence=conf).json()
    assert above["answer"] == "the proportion of true is larger than the threshold 0.2"
    near = get(world, "/v1/estimates/crashed/compare", threshold=0.3, confidence=conf).json()
    assert near["answer"] == "too close to call"
    mean = world["truth"]["latency"]
    below = get(world, "/v1/estimates/latency/compare", threshold=mean + 15, confidence=conf).json()
    assert below["decision"]["verdict"] == "less"
    share = get(
        world, "/v1/estimates/browser/compare", a="chrome", threshold=0.3, confidence=conf
    ).json()
    assert share["decision"]["verdict"] == "greater"


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/v1/estimates/nope", {}, 404, "unknown_metric"),
        ("/v1/estimates/%7Bspec%7D", {}, 404, "unknown_metric"),
        ("/v1/estimates/browser", {"start": E0 + 2, "end": E0 + 1}, 422, "bad_window"),
        ("/v1/estimates/browser", {"confidence": 1.5}, 422, "invalid_request"),
        ("/v1/estimates/browser", {"series": "week"}, 422, "invalid_request"),
        ("/v1/estimates/browser", {"version": 9}, 404, "unknown_metric"),
        (
            "/v1/estimates/browser/compare",
            {"a": "chrome", "b": "netscape"},
            422,
            "unknown_category",
        ),
        ("/v1/estimates/browser/compare", {"threshold": 0.1}, 422, "bad_compare"),
        ("/v1/estimates/crashed/compare", {"a": "x", "b": "y"}, 422, "bad_compare"),
        ("/v1/nowhere", {}, 404, "not_found"),
    ],
)
def test_errors_are_problem_json(
    world: dict[str, Any], path: str, params: dict[str, Any], status: int, code: str
) -> None:
    r = get(world, path, **params)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["code"] == code and body["status"] == status
    assert body["type"] == f"https://ldp-telemetry.dev/problems/{code}" and body["detail"]


def test_analyst_key_is_required(world: dict[str, Any]) -> None:
    # The collector's codes: no key is missing_key, a key that is not an analyst's invalid_key.
    for key, code in ((None, "missing_key"), ("not-a-key-0123456789abcdef", "invalid_key")):
        for path in ("/v1/estimates/browser", "/v1/metrics", "/v1/estimates/browser/compare"):
            r = get(world, path, key=key)
            assert r.status_code == 401, (path, r.text)
            assert r.json()["code"] == code
            assert r.headers["www-authenticate"].startswith("Bearer")


def test_metrics_list_health_and_headers(world: dict[str, Any]) -> None:
    r = get(world, "/v1/metrics")
    names = [m["name"] for m in r.json()["metrics"]]
    assert names == ["browser", "crashed", "latency", "rare"]
    assert r.json()["metrics"][0]["unit_text"] == "per device, per metric, per day"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert r.headers["referrer-policy"] == "no-referrer"
    assert get(world, "/healthz", key=None).json()["status"] == "ok"
    assert get(world, "/readyz", key=None).status_code == 200


def test_aggregator_never_writes_redis(world: dict[str, Any]) -> None:
    client = redis.Redis.from_url(world["redis"])

    def snapshot() -> dict[bytes, bytes | None]:
        return {k: client.dump(k) for k in client.scan_iter(count=1000)}

    before = snapshot()
    get(world, "/v1/estimates/browser", series="epoch", consistent="true")
    get(world, "/v1/estimates/browser/compare", a="chrome", b="edge")
    get(world, "/v1/metrics")
    get(world, "/", key=None)
    get(world, "/v1/estimates/nope")
    assert snapshot() == before


def test_redis_down_is_503_with_retry_after(fresh_redis: RedisServer, tmp_path: Path) -> None:
    register(fresh_redis.url, {"name": "flag", "kind": "boolean", "epsilon": 1.0})
    service: ServiceProcess = start_uvicorn(
        "aggregator.app:create_app", aggregator_env(fresh_redis.url), log_dir=tmp_path
    )
    try:
        r = httpx.get(service.url + "/v1/estimates/flag", headers=auth(ANALYST_KEY))
        assert r.status_code == 200 and r.json()["suppressed"]
        fresh_redis.stop()
        r = httpx.get(service.url + "/v1/estimates/flag", headers=auth(ANALYST_KEY), timeout=20)
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "store_unavailable" and r.headers["retry-after"] == "1"
        assert httpx.get(service.url + "/readyz").status_code == 503
        assert httpx.get(service.url + "/healthz").status_code == 200
    finally:
        service.stop()
    assert ANALYST_KEY not in service.log()
