"""A scripted collector for the SDK's fast tests: a real ``http.server`` on 127.0.0.1.

It speaks the collector's HTTP contract closely enough for delivery tests
(GET /v1/metrics, POST /v1/reports with gzip, per-report results, dedupe by
report_id and by token per metric) and lets a test script the answers: 429 with
Retry-After, 503, 400 problem+json, slow answers.  It is real HTTP over a real
socket, not a mock; the end-to-end tests use the real collector.

>>> with ScriptedCollector(metrics=[spec]) as server:          # doctest: +SKIP
...     server.script.append(Reply(429, {"Retry-After": "1"}))
...     client = Client(server.url, api_key="k", state_dir=tmp)
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ldp_core.wire import decode_batch
from tests.support.tokens import issue, test_key

__all__ = ["Reply", "ScriptedCollector", "Seen", "problem"]


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up (a killed sender) is expected here, not an error."""

    def handle_error(self, request: object, client_address: object) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Reply:
    """A scripted answer to the next POST /v1/reports (``delay`` before answering)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0
    store: bool = False  # count the batch as received before answering (crash tests)


@dataclass(frozen=True)
class Seen:
    """One request as the server saw it."""

    at: float
    method: str
    path: str
    headers: dict[str, str]
    body: bytes  # decompressed


def problem(status: int, code: str) -> Reply:
    body = json.dumps(
        {"type": "about:blank", "title": code, "status": status, "detail": code, "code": code}
    ).encode()
    return Reply(status, {"Content-Type": "application/problem+json"}, body)


class ScriptedCollector:
    """See the module docstring.  ``accepted`` holds every stored report_id."""

    def __init__(self, metrics: list[dict[str, Any]], *, port: int = 0) -> None:
        self.metrics = metrics
        self.script: deque[Reply] = deque()
        self.requests: list[Seen] = []
        self.accepted: list[str] = []
        self.payloads: list[object] = []
        self._ids: set[str] = set()
        self._tokens: set[tuple[str, int, str]] = set()
        #: The token issuer (not scripted, not in ``requests``): install key -> units.
        self.issued: dict[str, set[tuple[str, int]]] = {}
        self.token_requests = 0
        self.lock = threading.Lock()
        self.on_batch: Callable[[], None] | None = None
        self._server = _QuietServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedCollector:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def posts(self) -> list[Seen]:
        with self.lock:
            return [r for r in self.requests if r.method == "POST"]

    def wait_posts(self, n: int, timeout: float = 10.0) -> list[Seen]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            posts = self.posts()
            if len(posts) >= n:
                return posts
            time.sleep(0.01)
        raise AssertionError(f"expected {n} POSTs within {timeout}s, got {len(self.posts())}")

    # -- the handler ---------------------------------------------------------------------

    def _store(self, batch: object) -> list[dict[str, Any]]:
        results = []
        with self.lock:
            for env in decode_batch(batch):
                spent = (env.metric, env.version, env.token)
                if env.report_id in self._ids or spent in self._tokens:
                    # As the collector: a token spent in its metric is a duplicate there.
                    results.append({"status": "duplicate", "code": None})
                else:
                    self._ids.add(env.report_id)
                    self._tokens.add(spent)
                    self.accepted.append(env.report_id)
                    self.payloads.append(env.payload)
                    results.append({"status": "accepted", "code": None})
        return results

    def _issue(self, install: str, body: dict[str, Any]) -> bytes:
        """POST /v1/tokens as the collector answers it: one token per install and unit."""
        with self.lock:
            self.token_requests += 1
            return json.dumps(issue(install, body, self.issued)).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/v1/tokens/key":
                    body = json.dumps(test_key().public.to_json()).encode()
                    self._answer(200, {"Content-Type": "application/json"}, body)
                    return
                outer._record_request(self, b"")
                if self.path == "/v1/metrics":
                    body = json.dumps({"metrics": outer.metrics}).encode()
                    self._answer(200, {"Content-Type": "application/json"}, body)
                else:
                    self._answer(404, {}, b"{}")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                if self.path == "/v1/tokens":
                    body = outer._issue(self.headers.get("LDP-Install-Key", ""), json.loads(raw))
                    self._answer(200, {"Content-Type": "application/json"}, body)
                    return
                outer._record_request(self, raw)
                with outer.lock:
                    reply = outer.script.popleft() if outer.script else None
                if reply is not None:
                    if reply.store:
                        outer._store(json.loads(raw))
                        if outer.on_batch is not None:
                            outer.on_batch()
                    time.sleep(reply.delay)
                    self._answer(reply.status, reply.headers, reply.body)
                    return
                results = outer._store(json.loads(raw))
                counts = {
                    s: sum(r["status"] == s for r in results)
                    for s in ("accepted", "duplicate", "rejected")
                }
                body = json.dumps(
                    {
                        "accepted": counts["accepted"],
                        "duplicates": counts["duplicate"],
                        "rejected": counts["rejected"],
                        "results": results,
                    }
                ).encode()
                self._answer(200, {"Content-Type": "application/json"}, body)

        return Handler

    def _record_request(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        with self.lock:
            self.requests.append(
                Seen(
                    time.monotonic(),
                    handler.command,
                    handler.path,
                    {k.lower(): v for k, v in handler.headers.items()},
                    body,
                )
            )
