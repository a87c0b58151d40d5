"""Production entry point ``ldp serve`` with 2 workers: metrics, docs, JSON logs, metrics key.

With ``--workers 2`` consecutive scrapes of ``ldp_reports_accepted_total``
(each on a new connection, so both workers answer) never decrease and equal
what was sent after every batch.  HTTP latency and per-worker process metrics
are there on both services; /docs is plain HTML with nothing from outside;
every line either service prints is one JSON object; LDP_METRICS_KEY guards
/metrics, and prod without it does not serve it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson

from ldp_core.version import package_version
from ldp_core.wire import encode_batch
from ldp_server import processes
from ldp_server.redis_server import free_port
from tests.support.reports import SPECS, envelope, today
from tests.support.servers import (
    ADMIN_KEY,
    ANALYST_KEY,
    INGEST_KEY,
    REPO_ROOT,
    auth,
    start_uvicorn,
)

BATCHES, PER_BATCH, SCRAPES = 6, 50, 8
METRICS_KEY = "metrics-key-0123456789abcdefXYZ"
SECRET = "ab" * 24


class Served:
    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.process, self.url, self.log = process, url, log


@contextmanager
def serve(service: str, env: dict[str, str], log: Path, workers: int = 2) -> Iterator[Served]:
    port = free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith(("LDP_", "PROMETHEUS"))}
    full.update(env, PYTHONPATH=str(REPO_ROOT))
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "ldp_cli.main", "serve", service, "--port", str(port),
             "--workers", str(workers)],
            env=full, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        assert processes.wait_http_ok(url + "/healthz", process, 60), log.read_text()
        yield Served(process, url, log)
    finally:
        processes.stop(process, 30)
    # A graceful shutdown on SIGTERM: one worker re-raises the signal (uvicorn), the parent
    # of several exits 0; both are a clean stop for systemd and podman.
    assert process.returncode in (0, -15), log.read_text()
    assert "Application shutdown complete." in log.read_text()


def value(text: str, pattern: str) -> float:
    found = re.search(rf"^{pattern} (\S+)$", text, re.M)
    assert found, (pattern, text[:2000])
    return float(found.group(1))


def scrape(url: str, key: str | None = None) -> httpx.Response:
    headers = auth(key) if key else {}
    return httpx.get(url + "/metrics", headers=headers, timeout=10)  # a new connection


def assert_json_lines(log: Path) -> list[dict[str, object]]:
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert lines
    return [json.loads(line) for line in lines]  # raises on any plain-text line


def test_two_workers_count_everything_once(redis_url: str, tmp_path: Path) -> None:
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis_url, "LDP_ADMIN_KEYS": ADMIN_KEY,
           "LDP_INGEST_KEYS": INGEST_KEY, "LDP_ANALYST_KEYS": ANALYST_KEY,
           # The issuer key the test reports' tokens are signed with (tests/support/tokens).
           "LDP_TOKEN_KEY_FILE": str(REPO_ROOT / "tests" / "support" / "token_key.pem")}
    epoch = today()
    seen: list[float] = []
    with serve("collector", env, tmp_path / "collector.log") as c:
        assert httpx.post(c.url + "/v1/metrics", json=SPECS["browser"],
                          headers=auth(ADMIN_KEY)).status_code == 201
        headers = {**auth(INGEST_KEY), "Content-Type": "application/json"}
        pids: set[str] = set()
        for b in range(BATCHES):
            envs = [envelope("browser", 1, epoch, i % 4, device=b * PER_BATCH + i)
                    for i in range(PER_BATCH)]
            r = httpx.post(c.url + "/v1/reports", content=orjson.dumps(encode_batch(envs)),
                           headers=headers, timeout=10)
            assert r.json()["accepted"] == PER_BATCH
            for _ in range(SCRAPES):
                text = scrape(c.url).text
                seen.append(value(text, "ldp_reports_accepted_total"))
                assert seen[-1] == (b + 1) * PER_BATCH, seen
                pids |= set(re.findall(r'ldp_process_resident_memory_bytes\{pid="(\d+)"\}', text))
        assert seen == sorted(seen)
        assert value(text, "ldp_workers") == 2 and len(pids) == 2
        assert value(text, 'ldp_http_request_duration_seconds_count{method="POST",'
                     'route="/v1/reports",service="collector",status="200"}') == BATCHES
        assert value(text, "ldp_batch_seconds_count") == BATCHES
        docs = httpx.get(c.url + "/docs")
        assert docs.status_code == 200 and "POST /v1/reports" in docs.text
        assert "<script" not in docs.text and not re.search(r'(src|href)="http', docs.text)
    events = assert_json_lines(tmp_path / "collector.log")
    assert {"collector_started", "collector_stopped"} <= {str(e["event"]) for e in events}
    assert sum("Started server process" in str(e["event"]) for e in events) == 2


def test_aggregator_metrics_docs_key_and_json_access_lines(
    redis_url: str, tmp_path: Path
) -> None:
    env = {"LDP_ENV": "prod", "LDP_REDIS_URL": redis_url, "LDP_ANALYST_KEYS": ANALYST_KEY,
           "LDP_METRICS_KEY": METRICS_KEY}
    with serve("aggregator", env, tmp_path / "aggregator.log") as a:
        assert scrape(a.url).status_code == 401
        assert scrape(a.url, ANALYST_KEY).status_code == 401
        for _ in range(3):
            assert httpx.get(a.url + "/v1/metrics", headers=auth(ANALYST_KEY)).status_code == 200
        counts = []
        for _ in range(4):
            r = scrape(a.url, METRICS_KEY)
            assert r.status_code == 200
            counts.append(value(r.text, 'ldp_http_request_duration_seconds_count{method="GET",'
                                'route="/v1/metrics",service="aggregator",status="200"}'))
        assert counts == [3.0] * 4
        docs = httpx.get(a.url + "/docs")
        assert docs.status_code == 200 and "GET /v1/estimates/{name}" in docs.text
        assert "script-src 'none'" in docs.headers["content-security-policy"]
        httpx.get(a.url + "/?key=" + ANALYST_KEY)
    events = assert_json_lines(tmp_path / "aggregator.log")
    access = [e for e in events if e["event"] == "http_request"]
    line = {"method": "GET", "path": "/v1/metrics", "status": 200}
    assert sum(line.items() <= e.items() for e in access) == 3
    assert any(e["path"] == "/" for e in access)  # the query string (?key=) is not logged
    text = (tmp_path / "aggregator.log").read_text()
    assert ANALYST_KEY not in text and METRICS_KEY not in text
    # No client address: an access line holds only these fields.
    assert all(set(e) == {"ts", "level", "event", "logger", "method", "path", "status"}
               for e in access)
    del env["LDP_METRICS_KEY"]
    with serve("aggregator", env, tmp_path / "off.log", workers=1) as a:
        assert scrape(a.url).status_code == 404


def test_the_factories_ldp_up_starts_time_requests_and_report_their_version(
    redis_url: str, tmp_path: Path
) -> None:
    """``ldp up`` runs ``uvicorn --factory <service>.app:create_app``, not ``ldp serve``:
    the latency histogram and the release in /healthz and OpenAPI come from the factory."""
    release = package_version()
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis_url, "LDP_ADMIN_KEYS": ADMIN_KEY,
           "LDP_INGEST_KEYS": INGEST_KEY, "LDP_ANALYST_KEYS": ANALYST_KEY,
           "LDP_TOKEN_KEY_FILE": str(REPO_ROOT / "tests" / "support" / "token_key.pem")}
    for service in ("collector", "aggregator"):
        with start_uvicorn(f"{service}.app:create_app", env, log_dir=tmp_path) as svc:
            health = httpx.get(svc.url + "/healthz").json()
            assert health == {"status": "ok", "service": service, "version": release}
            assert httpx.get(svc.url + "/openapi.json").json()["info"]["version"] == release
            for _ in range(3):
                assert httpx.get(svc.url + "/v1/metrics",
                                 headers=auth(ANALYST_KEY if service == "aggregator"
                                              else INGEST_KEY)).status_code == 200
            text = scrape(svc.url).text
            assert value(text, f'ldp_http_request_duration_seconds_count{{method="GET",'
                         f'route="/v1/metrics",service="{service}",status="200"}}') == 3
