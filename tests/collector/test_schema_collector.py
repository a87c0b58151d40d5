"""schemathesis against the collector's OpenAPI document (GET /openapi.json).

The ASGI app runs in-process (schemathesis' ASGI transport runs its lifespan)
over a real redis-server with every test metric registered.  Each operation
gets generated cases, schema-valid and schema-invalid, sent with the key of
the role the operation needs; every answer must pass schemathesis' checks:
no 5xx, status code, content type, headers and body as documented, invalid
data rejected (4xx), and ``ignored_auth`` (the same request without the key,
or with a wrong one, must be refused).  The number of cases per operation is
``CASES`` (1000) for every operation with parameters or a body, and 5 for
the three without any input (hypothesis stops at the few distinct cases there are); the
counts run are written to
test-artifacts/schemathesis-collector.json.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import given
from pydantic import SecretStr
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from collector.app import create_app
from collector.settings import Settings
from collector.store import Store
from ldp_core.metric import MetricSpec
from ldp_server.redis_server import RedisServer
from tests.support.reports import NOW, SPECS
from tests.support.schema_cases import (
    CaseCounts,
    asgi_schema,
    case_settings,
    headers_for,
    operation_params,
)
from tests.support.servers import ADMIN_KEY, ANALYST_KEY, INGEST_KEY

CASES = 1000
COUNTS = CaseCounts()

#: The key each operation is called with (the role it needs).
KEYS = {
    "POST /v1/reports": INGEST_KEY,
    "POST /v1/metrics": ADMIN_KEY,
    "GET /v1/metrics": INGEST_KEY,
    "GET /v1/metrics/{name}": INGEST_KEY,
}


@pytest.fixture(scope="module")
def collector_schema(redis_server: RedisServer) -> Iterator[Any]:
    with redis.Redis(port=redis_server.port) as client:
        client.flushall()

    async def register() -> None:
        store = Store.connect(redis_server.url)
        try:
            for body in SPECS.values():
                await store.create_metric(MetricSpec.from_json(body))
        finally:
            await store.close()

    asyncio.run(register())
    app = create_app(
        Settings(env="dev", redis_url=redis_server.url, admin_keys=SecretStr(ADMIN_KEY),
                 ingest_keys=SecretStr(INGEST_KEY), analyst_keys=SecretStr(ANALYST_KEY),
                 rate_limit_per_second=0),
        clock=lambda: NOW,
    )
    with asgi_schema(app) as schema:
        yield schema


@pytest.fixture(scope="module", autouse=True)
def _write_counts() -> Iterator[None]:
    yield
    COUNTS.write("schemathesis-collector")


OPERATIONS = [
    ("POST", "/v1/reports", CASES),
    ("POST", "/v1/metrics", CASES),
    ("GET", "/v1/metrics/{name}", CASES),
    ("GET", "/v1/metrics", CASES),
    ("GET", "/healthz", 5),
    ("GET", "/readyz", 5),
    ("GET", "/metrics", 5),
]


#: Operations without parameters or body have no schema-invalid input to generate.
NO_INPUT = {"/healthz", "/readyz", "/metrics"}


@pytest.mark.parametrize(("method", "path", "cases", "mode"),
                         operation_params(OPERATIONS, NO_INPUT, slow_at=CASES))
def test_operation_conforms(
    collector_schema: Any, method: str, path: str, cases: int, mode: GenerationMode
) -> None:
    operation = collector_schema[path][method]
    label = f"{method} {path}"
    key = KEYS.get(label)

    @case_settings(cases)
    @given(case=operation.as_strategy(mode))
    def run(case: Any) -> None:
        excluded = []
        if label == "POST /v1/reports" and mode.is_positive and isinstance(case.body, dict):
            # JSON Schema cannot say "all columns have one length": cut them to the shortest,
            # so that every positive case is valid by the contract and must be answered 200.
            size = min(len(v) for v in case.body.values())
            case.body = {k: v[:size] for k, v in case.body.items()}
        if label == "POST /v1/metrics":
            # Nor "lo < hi", "epsilon_inf > epsilon", "a mechanism that fits the kind": a
            # schema-valid spec may still be a 422 (checked below instead).
            excluded.append(positive_data_acceptance)
        response = case.call(headers=headers_for(case, key))
        if response.status_code == 413:
            # A body over the byte limit is refused before its schema is read: a
            # rejection, though not one of the statuses schemathesis expects.
            assert response.json()["code"] == "body_too_large"
            excluded.append(negative_data_rejection)
        case.validate_response(response, excluded_checks=excluded)
        assert response.status_code < 500
        if label == "POST /v1/metrics" and mode.is_positive:
            assert response.status_code in (200, 201, 422), response.text
            if response.status_code == 422:
                assert response.json()["code"] == "invalid_spec" and response.json()["errors"]
        COUNTS.record(label, mode, response.status_code)

    run()
