"""Bounded work per request: series pages, over-bound windows refused, a free event loop.

A real Redis (tallies written through the collector store's own ingest path)
and the aggregator as a uvicorn subprocess on a loopback port.  One aggregator
runs with the smallest read bound (``LDP_MAX_READ_COUNTERS=1024``) so that
small metrics cross it; another with the defaults serves the heavy request of
the event-loop test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from aggregator.client import Client
from ldp_core.simulate import tallies
from ldp_server.redis_server import RedisServer
from tests.support.servers import ANALYST_KEY, REPO_ROOT, auth, start_uvicorn
from tests.support.tallies import register, stored_counters, write_tallies

E0 = 20_000
LONG_EPOCHS = 20  # "long": grr over 4 values, 4 counters x 4 shards: <= 320, under 1024 / 3
WIDE_EPOCHS = 20  # "wide": grr over 64 values, up to 64 counters in each of 4 shards: > 1024
HEAVY = (4096, 64)  # "heavy": counters, epochs (~1,050,000 values with 4 shards)
BOUND = 1024


def _grr(name: str, d: int) -> dict[str, Any]:
    return {"name": name, "kind": "categorical", "domain": [f"v{i}" for i in range(d)],
            "epsilon": 1.0, "mechanism": "grr", "epoch": "day", "min_reports": 1}


@pytest.fixture(scope="module")
def services(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    url = redis_server.url
    redis.Redis.from_url(url).flushall()
    rng = np.random.default_rng(13)
    stored = {}
    for name, d, count in (("long", 4, LONG_EPOCHS), ("wide", 64, WIDE_EPOCHS)):
        spec = register(url, _grr(name, d))
        m = spec.build()
        epochs = {}
        for k in range(count):
            values = rng.integers(0, d, size=300)
            t, n = tallies(m, values, seed=100 + k)
            epochs[E0 + k] = (t.tolist(), n)
        write_tallies(url, spec, epochs)
        stored[name] = stored_counters(url, spec)
    heavy = register(url, _grr("heavy", HEAVY[0]))
    # Dense tallies: every counter set in every shard, four reports per epoch
    # (each holds every counter; only the cost of reading matters here).
    write_tallies(url, heavy, {E0 + k: ([4] * HEAVY[0], 4) for k in range(HEAVY[1])})
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": url, "LDP_ANALYST_KEYS": ANALYST_KEY}
    logs = tmp_path_factory.mktemp("agg")
    small = start_uvicorn("aggregator.app:create_app",
                          {**env, "LDP_MAX_READ_COUNTERS": str(BOUND)}, log_dir=logs)
    try:
        default = start_uvicorn("aggregator.app:create_app", env, log_dir=logs)
        try:
            yield {"small": small.url, "default": default.url, "redis": url, "stored": stored}
        finally:
            default.stop()
    finally:
        small.stop()


def _get(base: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(base + path, params=params, headers=auth(ANALYST_KEY), timeout=120)


def _all_pages(base: str, first: httpx.Response) -> list[dict[str, Any]]:
    """Every page, following the body's next link (checked against the Link header)."""
    pages = [first.json()]
    while pages[-1]["page"]["next"] is not None:
        link = pages[-1]["page"]["next"]
        assert link.startswith("/v1/estimates/")
        resp = httpx.get(base + link, headers=auth(ANALYST_KEY), timeout=120)
        assert resp.status_code == 200, resp.text
        pages.append(resp.json())
        if pages[-1]["page"]["next"] is not None:
            assert resp.headers["link"] == f'<{pages[-1]["page"]["next"]}>; rel="next"'
        else:
            assert "link" not in resp.headers
    return pages


def test_paged_series_gives_exactly_the_unpaged_points(services: dict[str, Any]) -> None:
    base = services["small"]
    whole = _get(base, "/v1/estimates/long", series="epoch")
    assert whole.status_code == 200, whole.text
    body = whole.json()
    assert body["page"]["next"] is None and "link" not in whole.headers
    assert [p["epoch"] for p in body["series"]] == [E0 + k for k in range(LONG_EPOCHS)]
    first = _get(base, "/v1/estimates/long", series="epoch", limit=7)
    assert first.headers["link"] == f'<{first.json()["page"]["next"]}>; rel="next"'
    pages = _all_pages(base, first)
    assert [len(p["series"]) for p in pages] == [7, 7, 6]
    assert [pt for p in pages for pt in p["series"]] == body["series"]
    # The first page has the window's estimate; the others carry points only.
    assert pages[0]["estimate"] == body["estimate"] and pages[0]["n"] == body["n"]
    assert all("estimate" not in p and "n" not in p for p in pages[1:])


def test_clients_follow_next_links(services: dict[str, Any]) -> None:
    base = services["small"]
    client = Client(base, ANALYST_KEY)
    unpaged = client.estimate("long", series=True)
    paged = client.estimate("long", series=True, limit=6)
    assert paged["series"] == unpaged["series"] and paged["estimate"] == unpaged["estimate"]
    assert paged["page"]["next"] is None
    assert client.rows("long", series="epoch", limit=6) == client.rows("long", series="epoch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}

    def ldp(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "ldp_cli.main", "estimate", "long", "--series", *args,
             "--url", base, "--key", ANALYST_KEY],
            capture_output=True, text=True, timeout=120, check=False,
            env={**env, "PYTHONPATH": str(REPO_ROOT), "LDP_DATA_DIR": "/nonexistent"},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert ldp("--page-size", "9", "--format", "csv") == ldp("--format", "csv")
    assert ldp("--page-size", "9", "--format", "jsonl") == ldp("--format", "jsonl")
    assert ldp("--page-size", "9") == ldp()


def _dump(url: str) -> dict[bytes, bytes | None]:
    with redis.Redis.from_url(url) as r:
        return {k: r.dump(k) for k in sorted(r.scan_iter(count=1000))}


def _most(services: dict[str, Any]) -> int:
    """Epochs of "wide" one request of the small aggregator may read: as many as the
    bound holds at its heaviest epoch's stored counters (all shards)."""
    stored = services["stored"]["wide"]
    assert len(stored) == WIDE_EPOCHS and sum(stored.values()) > BOUND
    return BOUND // max(stored.values())


def test_over_bound_window_is_refused_and_changes_nothing(services: dict[str, Any]) -> None:
    base = services["small"]
    most = _most(services)
    before = _dump(services["redis"])
    refused = _get(base, "/v1/estimates/wide")
    assert refused.status_code == 422
    problem = refused.json()
    assert problem["code"] == "window_too_costly"
    assert refused.headers["content-type"].startswith("application/problem+json")
    # It names the stored counters, the bound and both ways to ask.
    total = sum(services["stored"]["wide"].values())
    assert f"{WIDE_EPOCHS} epochs with data and {total} stored counters" in problem["detail"]
    assert "at most 1024" in problem["detail"] and f"at most {most} epochs" in problem["detail"]
    assert f"series=epoch&limit={most}" in problem["detail"]
    compare = _get(base, "/v1/estimates/wide/compare", a="v0", b="v1")
    assert compare.status_code == 422 and compare.json()["code"] == "window_too_costly"
    fits = _get(base, "/v1/estimates/wide", start=E0, end=E0 + most)
    assert fits.status_code == 200 and fits.json()["window"]["epochs"] == most
    assert _dump(services["redis"]) == before


def test_over_bound_series_is_served_in_pages(services: dict[str, Any]) -> None:
    base = services["small"]
    most = _most(services)
    first = _get(base, "/v1/estimates/wide", series="epoch")
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["suppressed"] and body["estimate"] is None
    assert "window_too_costly" not in body["reason"] and "at most 1024" in body["reason"]
    assert body["n"] == 300 * WIDE_EPOCHS  # counted without reading the counters
    pages = _all_pages(base, first)
    cuts = [*range(0, WIDE_EPOCHS, most), WIDE_EPOCHS]
    assert [len(p["series"]) for p in pages] == [b - a for a, b in pairwise(cuts)]
    points = [pt for p in pages for pt in p["series"]]
    # The same points as windows that each fit the bound.
    parts = [
        _get(base, "/v1/estimates/wide", series="epoch", start=E0 + a, end=E0 + b).json()
        for a, b in pairwise(cuts)
    ]
    assert points == [pt for part in parts for pt in part["series"]]
    assert _get(base, "/v1/estimates/wide", series="epoch", limit=500).json()["page"][
        "limit"] == most


@pytest.mark.parametrize(
    ("params", "code"),
    [({"limit": "5"}, "invalid_request"), ({"series": "epoch", "limit": "0"}, "invalid_request"),
     ({"series": "epoch", "cursor": "-1"}, "invalid_request"),
     # Past 64 bits the echoed cursor could not be written: once a 500 (the schema fuzzer).
     ({"series": "epoch", "cursor": "88259322327705039013384510504960"}, "invalid_request")],
)
def test_bad_paging_parameters(services: dict[str, Any], params: dict[str, str],
                               code: str) -> None:
    resp = _get(services["small"], "/v1/estimates/long", **params)
    assert resp.status_code == 422 and resp.json()["code"] == code


def test_event_loop_answers_healthz_during_a_heavy_request(services: dict[str, Any]) -> None:
    """While one request reads ~1,050,000 counters, /healthz keeps answering.

    Before, the whole read was parsed on the event loop: /healthz waited for
    the heavy request (its worst latency was the heavy request's duration).
    The bound here is a quarter of that duration: far from the slices the loop
    is now held for, and far below what a blocked loop gives.  The same request
    is made once first: a fresh aggregator's first estimate of a metric paid a
    one-time warm-up that held /healthz for 1.3-1.8 s (a GIL-holding table build,
    gone: docs/analysts.md, tests/aggregator/test_cold_estimate.py), which is not
    what this test measures.
    """
    base = services["default"]
    assert _get(base, "/v1/estimates/heavy").status_code == 200
    done: dict[str, Any] = {}

    def heavy() -> None:
        started = time.perf_counter()
        done["response"] = _get(base, "/v1/estimates/heavy")
        done["seconds"] = time.perf_counter() - started

    worker = threading.Thread(target=heavy)
    latencies = []
    with httpx.Client(base_url=base, timeout=120) as http:
        assert http.get("/healthz").status_code == 200
        worker.start()
        time.sleep(0.2)
        while worker.is_alive():
            started = time.perf_counter()
            assert http.get("/healthz").status_code == 200
            latencies.append(time.perf_counter() - started)
            time.sleep(0.05)
    worker.join()
    assert done["response"].status_code == 200, done["response"].text
    assert done["response"].json()["window"]["epochs"] == HEAVY[1]
    assert len(latencies) >= 5, (done["seconds"], latencies)
    assert max(latencies) < done["seconds"] / 4, (done["seconds"], max(latencies))


def test_dashboard_shares_the_bound_among_its_metrics(services: dict[str, Any]) -> None:
    """Three metrics share 1024 stored counters (341 each): "long" (at most 4 x 4
    shards x 20 epochs) is drawn, "wide" (up to 64 x 4 x 20) says why its window
    estimate is not computed; the page answers."""
    page = _get(services["small"], "/")
    assert page.status_code == 200
    text = page.text
    assert text.count("Suppressed: not computed") == 2  # wide and heavy
    assert "at most 341" in text and "at most 1024" not in text
    chosen = _get(services["small"], "/", metric="wide").text
    assert "at most 1024 (LDP_MAX_READ_COUNTERS)" in chosen
