"""Never a 500 for bad input: arbitrary JSON in every column of a batch (Hypothesis)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.app import create_app
from collector.settings import Settings
from ldp_core.wire import COLUMNS
from tests.support.asgi import asgi_client
from tests.support.reports import NOW, SPECS, today
from tests.support.servers import ADMIN_KEY, INGEST_KEY, auth

pytestmark = pytest.mark.anyio

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False) | st.text(max_size=70),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8,
)
NAMES = st.sampled_from([*SPECS, "nosuch", "Bad Name"]) | JSON
VERSIONS = st.sampled_from([1, 2, 0, -1, True]) | JSON
EPOCHS = st.sampled_from([today(), today() + 1, today() + 5, today() - 40]) | JSON
HEX = st.sampled_from(["0123456789abcdef" * 2, "f" * 64, "F" * 32]) | JSON
PAYLOADS = st.sampled_from([0, 1, 3, 4, 10**6, [0, 1], "AAA", "", [1]]) | JSON


@st.composite
def batches(draw: st.DrawFn) -> dict[str, list[Any]]:
    size = draw(st.integers(1, 6))
    return {
        "metric": [draw(NAMES) for _ in range(size)],
        "version": [draw(VERSIONS) for _ in range(size)],
        "epoch": [draw(EPOCHS) for _ in range(size)],
        "report_id": [draw(HEX) for _ in range(size)],
        "token": [draw(HEX) for _ in range(size)],
        "payload": [draw(PAYLOADS) for _ in range(size)],
    }


@pytest.fixture()
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(env="dev", redis_url=redis_url, admin_keys=ADMIN_KEY,
                              ingest_keys=INGEST_KEY), clock=lambda: NOW)
    async with asgi_client(app) as c:
        for body in SPECS.values():
            assert (await c.post("/v1/metrics", json=body, headers=auth(ADMIN_KEY))).is_success
        yield c


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches())
async def test_any_batch_gets_a_result_per_report_or_a_problem(
    client: httpx.AsyncClient, batch: dict[str, list[Any]]
) -> None:
    r = await client.post("/v1/reports", content=orjson.dumps(batch),
                          headers=auth(INGEST_KEY))
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["results"]) == len(batch["metric"])
    assert body["accepted"] + body["duplicates"] + body["rejected"] == len(batch["metric"])


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=JSON | st.dictionaries(st.sampled_from([*COLUMNS, "x"]), JSON, max_size=7))
async def test_any_json_body_is_a_result_or_a_400(client: httpx.AsyncClient, body: Any) -> None:
    r = await client.post("/v1/reports", content=orjson.dumps(body), headers=auth(INGEST_KEY))
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:
        assert r.json()["code"] in ("batch_shape", "batch_size")


@settings(max_examples=80, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=st.dictionaries(
    st.sampled_from(["name", "kind", "domain", "lo", "hi", "epsilon", "mechanism", "epoch",
                     "unit", "longitudinal", "min_reports", "params", "other"]),
    JSON, max_size=8))
async def test_any_spec_is_created_or_a_422(client: httpx.AsyncClient, spec: Any) -> None:
    r = await client.post("/v1/metrics", content=orjson.dumps(spec), headers=auth(ADMIN_KEY))
    assert r.status_code in (200, 201, 422), r.text
