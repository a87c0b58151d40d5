"""Nothing sensitive at rest or in logs; per-key rate limits that the SDK obeys.

1. A collector and an aggregator run as uvicorn subprocesses (log level DEBUG,
   their stdout and stderr captured) over a real Redis.  SDK devices record
   numeric values with distinctive digits; the test sends batches of its own
   (known report ids and tokens), with an X-Forwarded-For address, wrong keys,
   bad bodies, and reads estimates and the dashboard (key in the query string
   once, as ``ldp up``'s link does).  Then every Redis key and value and both
   logs are scanned: no true value, no IP address (any dotted quad, 127.0.0.1
   included), no report id or token in clear (hex or raw bytes), no API key in
   clear.  Redis is addressed as ``localhost`` so that the one address an
   operator configures (where Redis is, logged at start) is not an IP either.
2. A collector with a limit of 0.5 requests per second and a burst of 1 per
   key: an SDK fleet flushing 5 batches of 30 reports gets 429s with
   Retry-After, waits at least that long before each retry, and delivers
   everything exactly once.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from client_sdk import DeliveryConfig, Fleet
from ldp_core.tokens import unb64url
from ldp_core.wire import encode_batch
from ldp_server.redis_server import RedisServer
from tests.support.faults_run import account_ids
from tests.support.faults_sdk_child import LoggingTransport
from tests.support.reports import SPECS, envelope, today
from tests.support.servers import (
    ADMIN_KEY,
    ANALYST_KEY,
    INGEST_KEY,
    ServiceProcess,
    auth,
    start_collector,
    start_uvicorn,
)

DOTTED_QUAD = re.compile(rb"(?<![\d.])\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?![\d.])")
FORWARDED_IP = "203.0.113.77"
#: True values with digits that appear nowhere else.
TRUE_VALUES = [4817.293, 3391.517, 2718.281, 1234.875]


def redis_blobs(url: str) -> bytes:
    """Every key and value (hash fields and values, set members, strings), joined."""
    blobs: list[bytes] = []
    with redis.Redis.from_url(url) as r:
        for key in r.scan_iter(count=1000):
            blobs.append(key)
            kind = r.type(key)
            if kind == b"hash":
                for f, v in r.hgetall(key).items():
                    blobs += [f, v]
            elif kind == b"set":
                blobs += list(r.smembers(key))
            elif kind == b"string":
                blobs.append(r.get(key) or b"")
            else:
                raise AssertionError(f"unexpected {kind!r} at {key!r}")
    return b"\n".join(blobs)


def test_no_true_value_ip_id_token_or_key_in_redis_or_logs(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    local_url = f"redis://localhost:{fresh_redis.port}/0"
    debug = {"LDP_LOG_LEVEL": "DEBUG"}
    collector = start_collector(local_url, log_dir=tmp_path / "collector", extra_env=debug)
    aggregator: ServiceProcess | None = None
    sdk_log = tmp_path / "sdk.jsonl"
    try:
        aggregator = start_uvicorn(
            "aggregator.app:create_app",
            {"LDP_ENV": "dev", "LDP_REDIS_URL": local_url, "LDP_ANALYST_KEYS": ANALYST_KEY,
             **debug},
            log_dir=tmp_path / "aggregator")
        with httpx.Client(base_url=collector.url, timeout=10) as c:
            for name in ("browser", "load_ms", "page"):
                assert c.post("/v1/metrics", json=SPECS[name],
                              headers=auth(ADMIN_KEY)).is_success
            # SDK devices: numeric true values, randomised to one bit on the device.
            transport = LoggingTransport(sdk_log)
            fleet = Fleet(collector.url, api_key=INGEST_KEY, transport=transport,
                          background=False, delivery=DeliveryConfig(batch_size=200))
            try:
                assert fleet.refresh_metrics(5)
                for i in range(400):
                    assert fleet.device().record("load_ms", TRUE_VALUES[i % 4]).ok
                assert fleet.flush(30)
            finally:
                fleet.close(5)
                transport.close()
            # Our own reports, with an address in X-Forwarded-For.
            envs = [envelope("browser", 1, today(), i % 4) for i in range(300)]
            headers = {**auth(INGEST_KEY), "X-Forwarded-For": FORWARDED_IP,
                       "X-Real-IP": FORWARDED_IP}
            r = c.post("/v1/reports", json=encode_batch(envs), headers=headers)
            assert r.json()["accepted"] == 300
            r = c.post("/v1/reports", json=encode_batch(envs[:50]), headers=headers)
            assert r.json()["duplicates"] == 50
            # Refused requests: the presented keys and bodies must not be echoed to the log.
            wrong_key = "a-wrong-key-that-must-not-be-logged-0123"
            assert c.get("/v1/metrics", headers=auth(wrong_key)).status_code == 401
            bad = encode_batch(envs[:3])
            bad["payload"] = [99, 99, 99]
            c.post("/v1/reports", json=bad, headers=headers)
            c.post("/v1/reports", content=b"{not json " + envs[0].token.encode(),
                   headers=headers)
        with httpx.Client(base_url=aggregator.url, timeout=10) as a:
            assert a.get("/v1/estimates/browser", headers=auth(ANALYST_KEY)).is_success
            assert a.get("/v1/estimates/load_ms", headers=auth(ANALYST_KEY)).is_success
            assert a.get("/v1/estimates/browser", headers=auth(wrong_key)).status_code == 401
            a.get(f"/?key={ANALYST_KEY}", headers={"X-Forwarded-For": FORWARDED_IP})
        # A Redis outage, so that the error paths log too.
        fresh_redis.kill()
        with httpx.Client(timeout=10) as h:
            r = h.post(collector.url + "/v1/reports", json=encode_batch(envs[:5]),
                       headers=headers)
            assert r.status_code == 503
            r = h.get(aggregator.url + "/v1/estimates/browser", headers=auth(ANALYST_KEY))
            assert r.status_code == 503
            fresh_redis.restart()
            r = h.post(collector.url + "/v1/reports", json=encode_batch(envs[:5]),
                       headers=headers)
            assert r.status_code == 200
    finally:
        collector.stop()
        if aggregator is not None:
            aggregator.stop()
    sdk_rows = [json.loads(x) for x in sdk_log.read_text().splitlines()]
    ids = [e.report_id for e in envs] + [i for row in sdk_rows for i in row["ids"]]
    tokens = [e.token for e in envs] + [t for row in sdk_rows for t in row["tokens"]]
    assert len(ids) == 700
    needles: dict[str, list[bytes]] = {
        "report id": [x.encode() for x in ids] + [bytes.fromhex(x) for x in ids],
        # A token in clear, its raw bytes, its nonce, its signature, or 16 bytes of it.
        "token": [x.encode() for x in tokens] + [unb64url(x) for x in tokens]
        + [unb64url(x)[:32] for x in tokens] + [unb64url(x)[32:] for x in tokens]
        + [unb64url(x)[:16] for x in tokens],
        "api key": [k.encode() for k in (ADMIN_KEY, INGEST_KEY, ANALYST_KEY, wrong_key)],
        "true value": [repr(v).encode() for v in TRUE_VALUES]
        + [orjson.dumps(v) for v in TRUE_VALUES],
        "forwarded ip": [FORWARDED_IP.encode()],
    }
    logs = collector.log().encode() + b"\n" + aggregator.log().encode()
    assert b'"event":"collector_started"' in logs  # the logs really were captured
    assert b'"event":"redis_unavailable"' in logs and b"redis unavailable" in logs
    places = {"redis": redis_blobs(fresh_redis.url), "logs": logs}
    found: dict[str, list[str]] = {}
    for place, blob in places.items():
        for what, items in needles.items():
            hits = [x for x in items if x in blob]
            if hits:
                found[f"{place}: {what}"] = [repr(h[:40]) for h in hits[:3]]
        quads = DOTTED_QUAD.findall(blob)
        if quads:
            found[f"{place}: ip address"] = [repr(q) for q in quads[:3]]
    print(f"\nleak scan: {len(places['redis'])} bytes of Redis, {len(logs)} bytes of logs, "
          f"{sum(len(v) for v in needles.values())} needles; found {found}")
    assert found == {}


def test_rate_limited_sdk_honours_retry_after_and_delivers_everything(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    limits = {"LDP_RATE_LIMIT_PER_SECOND": "1", "LDP_RATE_LIMIT_BURST": "1"}
    collector = start_collector(fresh_redis.url, log_dir=tmp_path / "collector",
                                extra_env=limits)
    log = tmp_path / "sdk.jsonl"
    transport = LoggingTransport(log)
    try:
        with httpx.Client(base_url=collector.url, timeout=10) as c:
            assert c.post("/v1/metrics", json=SPECS["browser"],
                          headers=auth(ADMIN_KEY)).is_success
        fleet = Fleet(collector.url, api_key=INGEST_KEY, transport=transport, background=False,
                      delivery=DeliveryConfig(batch_size=10, backoff_base=0.01, backoff_max=0.05,
                                              retry_after_max=5, request_timeout=5))
        try:
            deadline = time.monotonic() + 10
            while not fleet.refresh_metrics(2):
                assert time.monotonic() < deadline
            started = time.monotonic()
            # Five flushes of one device: each device registers its install and asks
            # the issuer for its token, then one batch (the first device is asked to
            # register by a 403 and asks a challenge): 17 requests against one per second.
            for round_ in range(5):
                assert fleet.device().record("browser",
                                             SPECS["browser"]["domain"][round_ % 4]).ok
                assert fleet.flush(60), round_
            elapsed = time.monotonic() - started
            counters = fleet.counters()
        finally:
            fleet.close(5)
        with httpx.Client(base_url=collector.url, timeout=10) as c:
            prometheus = c.get("/metrics").text
    finally:
        transport.close()
        collector.stop()
    rows: list[dict[str, Any]] = [json.loads(x) for x in log.read_text().splitlines()]
    limited = [i for i, row in enumerate(rows) if row.get("status") == 429]
    gaps = [rows[i + 1]["t"] - rows[i]["t"] for i in limited if i + 1 < len(rows)]
    acc = account_ids(fresh_redis.url, "browser",
                      {rid for row in rows if row.get("status") == 200 for rid in row["ids"]})
    print(f"\nrate limit: {len(rows)} POSTs, {len(limited)} answered 429 "
          f"(Retry-After {sorted({rows[i]['retry_after'] for i in limited})}), "
          f"min gap after a 429 {min(gaps):.2f}s, {elapsed:.1f}s in all; {acc}")
    assert limited, "the limit never bit"
    assert all(rows[i]["retry_after"] is not None and int(rows[i]["retry_after"]) >= 1
               for i in limited)
    # Each retry after a 429 waited at least Retry-After (1 s here; small clock slack).
    assert all(g >= int(rows[i]["retry_after"]) - 0.05 for i, g in zip(limited, gaps,
                                                                      strict=False))
    assert 'ldp_batches_refused_total{code="rate_limited"}' in prometheus
    assert counters.sent == 5 and counters.pending == 0 and counters.dropped == {}
    assert counters.retries >= len(limited)
    assert (acc["counted"], acc["lost"], acc["double_counted"]) == (5, 0, 0)
