"""schemathesis against the collector's OpenAPI document (GET /openapi.json).

The ASGI app runs in-process (schemathesis' ASGI transport runs its lifespan)
over a real redis-server with every test metric registered.  Each operation
gets generated cases, schema-valid and schema-invalid, sent with the key of
the role the operation needs; every answer must pass schemathesis' checks:
no 5xx, status code, content type, headers and body as documented, invalid
data rejected (4xx), and ``ignored_auth`` (the same request without the key,
or with a wrong one, must be refused).  The number of cases per operation is
``CASES`` (1000 for the two POSTs that take untrusted bodies),
``OTHER_CASES`` (1000) for the GETs with parameters, and 5 for the three
without any input (hypothesis stops at the few distinct cases there are); the
counts run are written to
test-artifacts/schemathesis-collector.json.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from pydantic import SecretStr
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation
from schemathesis.python import asgi as st_asgi
from schemathesis.specs.openapi.checks import positive_data_acceptance

from collector.app import create_app
from collector.redis_server import RedisServer
from collector.settings import Settings
from collector.store import Store
from ldp_core.metric import MetricSpec
from tests.support.reports import NOW, SPECS
from tests.support.servers import ADMIN_KEY, ANALYST_KEY, INGEST_KEY, REPO_ROOT, auth

CASES = 1000
OTHER_CASES = 1000
SEEN: Counter[str] = Counter()
STATUSES: dict[str, Counter[str]] = {}

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
    try:
        yield schemathesis.openapi.from_asgi("/openapi.json", app)
    finally:
        st_asgi.shutdown_lifespans()


def _record(label: str, mode: str, status: int) -> None:
    SEEN[label] += 1
    STATUSES.setdefault(label, Counter())[f"{mode} {status}"] += 1


@pytest.fixture(scope="module", autouse=True)
def _write_counts() -> Iterator[None]:
    yield
    out = REPO_ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    (out / "schemathesis-collector.json").write_text(json.dumps(
        {k: {"cases": SEEN[k], "statuses": dict(v)} for k, v in STATUSES.items()}, indent=1))
    print("\nschemathesis collector", json.dumps(
        {k: {"cases": SEEN[k], "statuses": dict(v)} for k, v in STATUSES.items()}))


OPERATIONS = [
    ("POST", "/v1/reports", CASES),
    ("POST", "/v1/metrics", CASES),
    ("GET", "/v1/metrics/{name}", OTHER_CASES),
    ("GET", "/v1/metrics", OTHER_CASES),
    ("GET", "/healthz", 5),
    ("GET", "/readyz", 5),
    ("GET", "/metrics", 5),
]


#: Operations without parameters or body have no schema-invalid input to generate.
NO_INPUT = {"/healthz", "/readyz", "/metrics"}


@pytest.mark.parametrize(("method", "path", "cases", "mode"), [
    pytest.param(m, p, c, mode, marks=[pytest.mark.slow] if c >= CASES else [])
    for m, p, c in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode.is_positive or p not in NO_INPUT
])
def test_operation_conforms(
    collector_schema: Any, method: str, path: str, cases: int, mode: GenerationMode
) -> None:
    operation = collector_schema[path][method]
    label = f"{method} {path}"
    key = KEYS.get(label)

    @settings(max_examples=cases // 2 or 1, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
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
        # A case whose headers were generated invalid (e.g. Authorization left out) is sent
        # as generated; every other one carries the key of the operation's role.
        negative_headers = case.meta is not None and case.meta.is_negative_at(
            ParameterLocation.HEADER)
        headers = auth(key) if key and not negative_headers else None
        response = case.call_and_validate(headers=headers, excluded_checks=excluded)
        assert response.status_code < 500
        if label == "POST /v1/metrics" and mode.is_positive:
            assert response.status_code in (200, 201, 422), response.text
            if response.status_code == 422:
                assert response.json()["code"] == "invalid_spec" and response.json()["errors"]
        _record(label, mode.value, response.status_code)

    run()
