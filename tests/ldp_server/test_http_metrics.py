"""The HTTP metrics' labels stay a bounded set whatever method a client sends."""

from __future__ import annotations

import asyncio
from typing import Any

from ldp_server.telemetry import HttpMetrics, ServiceMetrics


async def _answer(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _request(app: HttpMetrics, method: str) -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        return None

    asyncio.run(app({"type": "http", "method": method, "path": "/x"}, receive, send))


def test_unknown_methods_share_one_label() -> None:
    metrics = ServiceMetrics("test", multiproc_dir=None)
    app = HttpMetrics(_answer, metrics)
    for method in ("GET", "POST", "BREW", "X-1", "FOO"):
        _request(app, method)
    samples = [s for family in metrics.registry.collect() for s in family.samples
               if s.name == "ldp_http_request_duration_seconds_count"]
    methods = sorted(s.labels["method"] for s in samples)
    assert methods == ["GET", "POST", "other"]
    assert {s.labels["method"]: s.value for s in samples}["other"] == 3
