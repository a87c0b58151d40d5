"""Hypothesis: any malformed report is refused with a reason and changes no counter.

test_collector_fuzz.py already proves "never a 500" for arbitrary JSON in every
column.  This file proves the stronger property per malformed report: each is
either a 4xx for the whole batch (JSON that is not JSON: NaN, Infinity) or
answered ``rejected`` with the expected reason code, and afterwards every
tally, every report count and every dedupe/flag key in Redis is exactly what
it was (a snapshot of the whole keyspace, before and after).

Malformations: payload of the wrong length or encoding, bucket or seed out of
range, wrong JSON types, NaN and Infinity, numbers beyond 64 bits, unknown
metric or version, epochs far in the past or future, report ids and tokens of
the wrong shape.  Each example sends 1 to 5 malformed reports of one batch.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from collector.app import create_app
from collector.settings import Settings
from ldp_core.metric import MetricSpec
from ldp_core.wire import encode_batch
from tests.support.asgi import asgi_client
from tests.support.reports import NOW, SPECS, envelope, today
from tests.support.servers import ADMIN_KEY, INGEST_KEY, auth

pytestmark = pytest.mark.anyio

EXAMPLES = 200
BIG = [2**63, -(2**63) - 1, 10**30, -(10**40)]
#: Never a valid payload of any mechanism here (a pair of ints would be an OLH report).
WRONG_TYPES: list[Any] = [None, True, False, 1.5, -0.0, [], {}, [1, 2, 3], {"a": 1}, [[0], 1]]


@pytest.fixture()
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(env="dev", redis_url=redis_url, admin_keys=SecretStr(ADMIN_KEY),
                              ingest_keys=SecretStr(INGEST_KEY), rate_limit_per_second=0),
                     clock=lambda: NOW)
    async with asgi_client(app) as c:
        for body in SPECS.values():
            assert (await c.post("/v1/metrics", json=body, headers=auth(ADMIN_KEY))).is_success
        # Some honest data first, so that "no counter changed" is about non-empty tallies.
        page = MetricSpec.from_json(SPECS["page"]).build()
        olh = MetricSpec.from_json(SPECS["country"]).build()
        envs = [envelope("browser", 1, today(), i % 4, device=i) for i in range(50)]
        envs += [envelope("page", 1, today(), page.encode(page.randomize(i % 20)), device=i)
                 for i in range(50)]
        envs += [envelope("country", 1, today(), olh.encode(olh.randomize(i % 50)), device=i)
                 for i in range(50)]
        r = await c.post("/v1/reports", json=encode_batch(envs), headers=auth(INGEST_KEY))
        assert r.json()["accepted"] == 150
        yield c


def snapshot(url: str) -> dict[bytes, Any]:
    """Every key of Redis with its value (hashes, sets and strings)."""
    out: dict[bytes, Any] = {}
    with redis.Redis.from_url(url) as r:
        for key in r.scan_iter(count=1000):
            kind = r.type(key)
            if kind == b"hash":
                out[key] = r.hgetall(key)
            elif kind == b"set":
                out[key] = r.smembers(key)
            else:
                out[key] = r.get(key)
    return out


#: (field, bad value, the rejection code it must get).  "json" means the whole batch is
#: not JSON and must be a 400.
@st.composite
def malformed(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    epoch = today()
    metric = draw(st.sampled_from(["browser", "page", "country", "dark_mode"]))
    good_payload: dict[str, Any] = {"browser": 1, "page": "AAAA", "country": [0, 1],
                                    "dark_mode": 1}
    report: dict[str, Any] = {
        "metric": metric, "version": 1, "epoch": epoch,
        "report_id": draw(st.text("0123456789abcdef", min_size=32, max_size=32)),
        "token": draw(st.text("0123456789abcdef", min_size=64, max_size=64)),
        "payload": good_payload[metric],
    }
    kind = draw(st.sampled_from([
        "length", "range", "seed", "types", "nan", "big", "metric", "version", "past",
        "future", "report_id", "token", "epoch_type",
    ]))
    code: str
    if kind == "length":
        report["metric"] = "page"  # 20 bits -> 3 bytes -> 4 base64url characters
        report["payload"] = draw(st.sampled_from(["", "AA", "AAAAA", "AAAAAAAA", "A" * 400]))
        code = "bitvector_length"
    elif kind == "range":
        if draw(st.booleans()):
            report["metric"], report["payload"] = "browser", draw(
                st.integers(4, 2**62) | st.integers(-(2**62), -1))
            code = "bucket_out_of_range"
        else:
            report["metric"], report["payload"] = "country", [0, draw(
                st.integers(10**6, 2**62) | st.integers(-(2**62), -1))]
            code = "bucket_out_of_range"
    elif kind == "seed":
        report["metric"] = "country"
        report["payload"] = [draw(st.integers(10**9, 2**62) | st.integers(-(2**62), -1)), 0]
        code = "seed_out_of_range"
    elif kind == "types":
        report["payload"] = draw(st.sampled_from(WRONG_TYPES))
        code = "payload"
    elif kind == "nan":
        report[draw(st.sampled_from(["payload", "epoch", "version"]))] = draw(
            st.sampled_from([math.nan, math.inf, -math.inf]))
        code = "json"
    elif kind == "big":
        field = draw(st.sampled_from(["payload", "epoch", "version"]))
        report[field] = draw(st.sampled_from(BIG))
        code = {"payload": "payload", "epoch": "epoch", "version": "unknown_version"}[field]
    elif kind == "metric":
        report["metric"] = draw(st.sampled_from(["nosuch", "Bad Name", "", "x" * 200]) | st.text())
        if report["metric"] in SPECS:
            report["metric"] = "nosuch"
        code = "unknown_metric"
    elif kind == "version":
        report["version"] = draw(st.sampled_from([0, -1, 2, 99, 2**31]))
        code = "unknown_version"
    elif kind == "past":
        report["epoch"] = epoch - draw(st.integers(33, 10**9))
        code = "epoch_expired"
    elif kind == "future":
        report["epoch"] = epoch + draw(st.integers(2, 10**9))
        code = "epoch_in_future"
    elif kind == "epoch_type":
        report["epoch"] = draw(st.sampled_from(["20000", 1.5, None, [1], True]))
        code = "bad_epoch"
    elif kind == "report_id":
        report["report_id"] = draw(st.sampled_from(["", "0" * 31, "0" * 33, "G" * 32,
                                                    "ABCDEF" + "0" * 26, 12345, None]))
        code = "bad_report_id"
    else:
        report["token"] = draw(st.sampled_from(["", "0" * 63, "0" * 65, "g" * 64, 7, None]))
        code = "bad_token"
    return report, code


def _payload_code(report: dict[str, Any]) -> set[str]:
    """Codes a wrong payload may get, by mechanism (GRR: range or type; OUE: type;
    OLH: type, range; binary: range or type)."""
    return {"payload_type", "bucket_out_of_range", "bitvector_length", "payload_encoding",
            "seed_out_of_range", "bit_out_of_range"}


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(reports=st.lists(malformed(), min_size=1, max_size=5))
async def test_malformed_reports_are_refused_with_a_reason_and_change_nothing(
    client: httpx.AsyncClient, redis_url: str, reports: list[tuple[dict[str, Any], str]]
) -> None:
    before = snapshot(redis_url)
    columns = {c: [r[c] for r, _ in reports] for c in
               ("metric", "version", "epoch", "report_id", "token", "payload")}
    body = json.dumps(columns, allow_nan=True).encode()  # NaN/Infinity and 2**64 as written
    r = await client.post("/v1/reports", content=body,
                          headers={**auth(INGEST_KEY), "Content-Type": "application/json"})
    codes = [code for _, code in reports]
    if "json" in codes:
        assert r.status_code == 400 and r.json()["code"] == "invalid_json", r.text
    elif r.status_code != 200:
        # orjson refuses integers beyond 64 bits as invalid JSON: a 400 for the batch.
        assert r.status_code == 400 and r.json()["code"] == "invalid_json", r.text
        assert any(abs(v) >= 2**63 for rep, _ in reports for v in (rep["payload"], rep["epoch"],
                   rep["version"]) if isinstance(v, int) and not isinstance(v, bool))
    else:
        out = r.json()
        assert out["accepted"] == out["duplicates"] == 0, out
        assert out["rejected"] == len(reports)
        for (report, code), result in zip(reports, out["results"], strict=True):
            assert result["status"] == "rejected"
            if code == "payload":
                assert result["code"] in _payload_code(report), (report, result)
            elif code == "epoch":
                assert result["code"] in ("epoch_in_future", "epoch_expired", "bad_epoch")
            else:
                assert result["code"] == code, (report, result)
    assert snapshot(redis_url) == before
