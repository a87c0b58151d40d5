"""schemathesis against the aggregator's OpenAPI document (its own GET /openapi.json).

The ASGI app runs in-process over a real redis-server holding three metrics
with reports (written through the collector).  Each GET operation gets
generated cases, schema-valid and schema-invalid, sent with the analyst key
(unless the case's own headers were generated invalid); every answer must
pass schemathesis' checks: no 5xx, documented status codes, content types,
headers and bodies, invalid data rejected.  1000 cases for each operation
with input (the estimates, the comparison, the dashboard and the sign-in
form), 5 for those without (hypothesis stops at the few distinct cases there
are); the role matrix (tests/system/test_security_access.py) covers signing in with
a real key.
Counts per operation go to test-artifacts/schemathesis-aggregator.json.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import given
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from aggregator.app import create_app
from aggregator.settings import Settings
from collector.store import Store, ValidReport
from ldp_core.metric import MetricSpec
from ldp_server.redis_server import RedisServer
from tests.support.reports import SPECS, envelope, today
from tests.support.schema_cases import (
    CaseCounts,
    asgi_schema,
    case_settings,
    headers_for,
    operation_params,
)
from tests.support.servers import ANALYST_KEY

CASES = 1000
#: What a schema-valid query can still be refused for (ldp_server.problems.CODES).
SEMANTIC_422 = {"bad_window", "bad_date", "window_too_large", "window_too_costly",
                "unknown_category", "bad_compare", "invalid_request"}
COUNTS = CaseCounts()

# quantiles= or buckets= asked of a metric that serves no distribution.
SEMANTIC_422.add("bad_quantiles")


@pytest.fixture(scope="module")
def aggregator_schema(redis_server: RedisServer) -> Iterator[Any]:
    with redis.Redis(port=redis_server.port) as client:
        client.flushall()

    async def fill() -> None:
        store = Store.connect(redis_server.url)
        try:
            for name in ("browser", "dark_mode", "load_ms"):
                spec, _ = await store.create_metric(MetricSpec.from_json(SPECS[name]))
                mech = spec.build()
                reports = []
                for i in range(300):
                    value = spec.domain[i % 4] if name == "browser" else (
                        bool(i % 2) if name == "dark_mode" else float(i))
                    env = envelope(name, 1, today() - i % 3,
                                   mech.encode(mech.randomize(spec.index_of(value))))
                    reports.append(ValidReport(spec, env.epoch, env.report_id, env.token,
                                               mech.counters(mech.decode(env.payload))))
                await store.ingest(reports)
        finally:
            await store.close()

    asyncio.run(fill())
    app = create_app(Settings(env="dev", redis_url=redis_server.url, analyst_keys=ANALYST_KEY))
    with asgi_schema(app) as schema:
        yield schema


@pytest.fixture(scope="module", autouse=True)
def _write_counts() -> Iterator[None]:
    yield
    COUNTS.write("schemathesis-aggregator")


OPERATIONS = [
    ("GET", "/v1/estimates/{name}", CASES),
    ("GET", "/v1/estimates/{name}/compare", CASES),
    ("GET", "/", CASES),
    ("POST", "/login", CASES),
    ("POST", "/logout", 5),
    ("GET", "/v1/metrics", 5),
    ("GET", "/healthz", 5),
    ("GET", "/readyz", 5),
    ("GET", "/static/dashboard.css", 5),
]
NO_INPUT = {"/v1/metrics", "/healthz", "/readyz", "/static/dashboard.css", "/logout"}


@pytest.mark.parametrize(("method", "path", "cases", "mode"),
                         operation_params(OPERATIONS, NO_INPUT, slow_at=CASES))
def test_operation_conforms(
    aggregator_schema: Any, method: str, path: str, cases: int, mode: GenerationMode
) -> None:
    operation = aggregator_schema[path][method]
    label = f"{method} {path}"

    # Schema-valid cases name a real metric (a random name is only ever a 404).
    fixed = {"name": "browser"} if "{name}" in path and mode.is_positive else None

    @case_settings(cases)
    @given(case=operation.as_strategy(mode, path_parameters=fixed))
    def run(case: Any) -> None:
        # "start < end", "a and b are categories of the metric", "the window is not too
        # long" are beyond JSON Schema: a schema-valid query may still be a 422, checked
        # below for a documented code instead of by positive_data_acceptance.
        response = case.call_and_validate(headers=headers_for(case, ANALYST_KEY),
                                          excluded_checks=[positive_data_acceptance])
        assert response.status_code < 500
        if mode.is_positive and response.status_code == 422:
            assert response.json()["code"] in SEMANTIC_422, response.text
        if mode.is_positive and "{name}" in path:
            # A real metric: 200, a semantic 422, or 404 for a version it does not have.
            version_asked = bool(case.query and "version" in case.query)
            assert response.status_code in ((200, 404, 422) if version_asked else (200, 422))
        COUNTS.record(label, mode, response.status_code)

    run()
