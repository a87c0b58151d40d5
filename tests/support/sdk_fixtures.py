"""Specs and helpers shared by the SDK tests (tests/client_sdk/)."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from client_sdk import Response
from tests.support.tokens import issue, test_key

__all__ = ["BROWSERS", "CaptureTransport", "many_metrics", "specs", "spool_rows"]

#: Distinctive category names: a leak of a true value is a plain substring search.
BROWSERS = ["zebrafox-7f3a", "quokkachrome-91c2", "narwhalsafari-5be0"]


def specs() -> list[dict[str, Any]]:
    return [
        {"name": "browser", "kind": "categorical", "domain": BROWSERS, "epsilon": 1.0,
         "mechanism": "grr"},
        {"name": "session_minutes", "kind": "numeric", "lo": 0, "hi": 60, "epsilon": 1.0,
         "mechanism": "one_bit_mean"},
        {"name": "dark_mode", "kind": "boolean", "epsilon": 1.0},
        {"name": "theme", "kind": "categorical", "domain": BROWSERS, "epsilon": 1.0,
         "mechanism": "oue", "longitudinal": {"epsilon_inf": 4.0}},
        {"name": "page", "kind": "categorical", "domain": [f"p{i}" for i in range(64)],
         "epsilon": 2.0, "mechanism": "olh"},
    ]


def many_metrics(n: int, prefix: str = "m") -> list[dict[str, Any]]:
    """``n`` small GRR metrics: one device may send one report per metric per epoch."""
    return [{"name": f"{prefix}{i}", "kind": "categorical", "domain": ["a", "b", "c"],
             "epsilon": 1.0, "mechanism": "grr"} for i in range(n)]


def spool_rows(state_dir: str | os.PathLike[str]) -> list[tuple[Any, ...]]:
    """Every row of the spool table, read with a connection of the test's own."""
    conn = sqlite3.connect(Path(state_dir) / "spool.sqlite3")
    try:
        return conn.execute("SELECT * FROM spool ORDER BY seq").fetchall()
    finally:
        conn.close()


class CaptureTransport:
    """A Transport of the test's own (the injection seam): accepts every batch, keeps it."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []
        self.issued: dict[str, set[tuple[str, int]]] = {}

    def send(self, method: str, url: str, headers: Any, body: bytes | None,
             timeout: float) -> Response:
        if url.endswith("/v1/tokens/key"):
            return Response(200, {}, json.dumps(test_key().public.to_json()).encode())
        if method == "GET":
            return Response(404, {}, b"")
        assert body is not None
        if url.endswith("/v1/tokens"):
            answer = issue(headers["LDP-Install-Key"], json.loads(body), self.issued)
            return Response(200, {}, json.dumps(answer).encode())
        batch = json.loads(gzip.decompress(body))
        self.batches.append(batch)
        results = [{"status": "accepted", "code": None}] * len(batch["report_id"])
        return Response(200, {}, json.dumps({"results": results}).encode())

    def payloads(self) -> list[Any]:
        return [p for b in self.batches for p in b["payload"]]
