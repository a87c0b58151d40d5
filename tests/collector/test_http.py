"""End to end over real HTTP: uvicorn (a subprocess on a free loopback port) + real Redis."""

from __future__ import annotations

import gzip
from pathlib import Path

import httpx
import orjson
import pytest

from ldp_core.wire import encode_batch
from ldp_server.redis_server import RedisServer
from tests.support.reports import SPECS, envelope, today
from tests.support.servers import (
    ADMIN_KEY,
    INGEST_KEY,
    ServiceProcess,
    auth,
    start_collector,
)


def test_end_to_end_over_http(collector_service: ServiceProcess) -> None:
    epoch = today()
    with httpx.Client(base_url=collector_service.url, timeout=10) as client:
        r = client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        assert r.status_code == 201
        spec = client.get("/v1/metrics/browser", headers=auth(INGEST_KEY)).json()
        assert spec["version"] == 1 and spec["params"]["num_counters"] == 4
        envs = [envelope("browser", 1, epoch, i % 4, device=i) for i in range(200)]
        body = gzip.compress(orjson.dumps(encode_batch(envs)))
        headers = {
            **auth(INGEST_KEY),
            "Content-Encoding": "gzip",
            "Content-Type": "application/json",
        }
        first = client.post("/v1/reports", content=body, headers=headers).json()
        assert (first["accepted"], first["duplicates"], first["rejected"]) == (200, 0, 0)
        retry = client.post("/v1/reports", content=body, headers=headers).json()
        assert (retry["accepted"], retry["duplicates"]) == (0, 200)
        r = client.post("/v1/reports", content=b"[", headers=auth(INGEST_KEY))
        assert r.status_code == 400
        assert r.headers["content-type"].startswith("application/problem+json")
        assert client.get("/readyz").json() == {"ready": True}
        text = client.get("/metrics").text
        assert "ldp_reports_accepted_total 200\n" in text
        assert "ldp_reports_duplicate_total 200\n" in text
    collector_service.stop()
    log = collector_service.log()
    assert '"event":"collector_stopped"' in log  # graceful shutdown ran the lifespan
    for secret in (ADMIN_KEY, INGEST_KEY, envs[0].report_id, envs[0].token):
        assert secret not in log


def test_prod_mode_refuses_unsafe_settings(redis_server: RedisServer, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="refuses unsafe settings") as info:
        start_collector(
            redis_server.url,
            log_dir=tmp_path,
            extra_env={"LDP_ENV": "prod", "LDP_ADMIN_KEYS": "short-key-9z"},
        )
    assert "short-key-9z" not in str(info.value)  # the error never echoes a key


def test_a_killed_collector_loses_nothing_and_counts_nothing_twice(
    collector_service: ServiceProcess, redis_server: RedisServer, tmp_path: Path
) -> None:
    epoch = today()
    envs = [envelope("browser", 1, epoch, i % 4, device=i) for i in range(500)]
    batches = [orjson.dumps(encode_batch(envs[i:i + 100])) for i in range(0, 500, 100)]
    headers = {**auth(INGEST_KEY), "Content-Type": "application/json"}
    with httpx.Client(base_url=collector_service.url, timeout=10) as client:
        client.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        for body in batches[:3]:
            assert client.post("/v1/reports", content=body, headers=headers).status_code == 200
    collector_service.kill()  # SIGKILL: no graceful shutdown
    with start_collector(redis_server.url, log_dir=tmp_path / "again") as again, \
            httpx.Client(base_url=again.url, timeout=10) as client:
        # The device never saw the answers, so it sends everything again.
        replies = [client.post("/v1/reports", content=b, headers=headers).json()
                   for b in batches]
        assert [r["duplicates"] for r in replies] == [100, 100, 100, 0, 0]
        assert [r["accepted"] for r in replies] == [0, 0, 0, 100, 100]


def test_the_collector_sends_security_headers(collector_service: ServiceProcess) -> None:
    """Every answer, good or bad, forbids sniffing, framing and any active content."""
    with httpx.Client(base_url=collector_service.url, timeout=10) as client:
        answers = [
            client.get("/healthz"),
            client.get("/v1/metrics", headers=auth(INGEST_KEY)),
            client.post("/v1/reports", content=b"{", headers=auth(INGEST_KEY)),
            client.get("/nowhere"),
        ]
    for answer in answers:
        assert answer.headers["X-Content-Type-Options"] == "nosniff", answer.url
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert "default-src 'none'" in answer.headers["Content-Security-Policy"]
        assert answer.headers["Referrer-Policy"] == "no-referrer"


def test_the_issues_stalling_specs_are_refused_quickly(collector_service: ServiceProcess) -> None:
    """`auto` at eps = 50 used to hang the collector in OLH's search for g, and an OUE
    metric over 65,536 labels made its first batch take 88 s on the event loop: both
    are refused at registration (422, a stable code); the service keeps answering."""
    labels = [f"c{i}" for i in range(65536)]
    attacks = [
        {"name": "hang", "kind": "categorical", "epsilon": 50.0, "mechanism": "auto",
         "domain": labels[:1024]},
        {"name": "wide", "kind": "categorical", "epsilon": 1.0, "mechanism": "oue",
         "domain": labels},
    ]
    with httpx.Client(base_url=collector_service.url, timeout=30) as client:
        for body in attacks:
            answer = client.post("/v1/metrics", json=body, headers=auth(ADMIN_KEY))
            assert answer.status_code == 422, answer.text
            assert answer.json()["code"] == "invalid_spec"
            assert client.get("/healthz").status_code == 200


def test_registry_quotas_refuse_without_changing_anything(tmp_path: Path) -> None:
    """LDP_MAX_METRICS and LDP_MAX_CATALOG_BYTES: 409 quota_exceeded, nothing stored
    (a private Redis, so that the count starts at zero)."""
    extra = {"LDP_MAX_METRICS": "2", "LDP_MAX_CATALOG_BYTES": "4096"}
    redis = RedisServer.start(tmp_path / "redis")
    try:
        _quotas(redis.url, tmp_path, extra)
    finally:
        redis.stop()


def _quotas(redis_url: str, tmp_path: Path, extra: dict[str, str]) -> None:
    with start_collector(redis_url, log_dir=tmp_path, extra_env=extra) as svc, httpx.Client(
        base_url=svc.url, timeout=10
    ) as client:
        def post(body: dict[str, object]) -> httpx.Response:
            return client.post("/v1/metrics", json=body, headers=auth(ADMIN_KEY))

        small = {"kind": "boolean", "epsilon": 1.0}
        assert post({"name": "q.one", **small}).status_code == 201
        big = {"name": "q.big", "kind": "categorical", "epsilon": 1.0,
               "domain": [f"label-{i:04d}" for i in range(400)]}
        refused = post(big)
        assert refused.status_code == 409 and refused.json()["code"] == "quota_exceeded"
        assert post({"name": "q.two", **small}).status_code == 201
        third = post({"name": "q.three", **small})
        assert third.status_code == 409 and third.json()["code"] == "quota_exceeded"
        assert post({"name": "q.one", **small}).status_code == 200  # an existing name is fine
        names = {m["name"] for m in client.get("/v1/metrics", headers=auth(INGEST_KEY)).json()[
            "metrics"]}
        assert names == {"q.one", "q.two"}
