"""A loopback HTTP proxy in front of the collector that notes what arrives, and when.

It stands where the operator does: every request is noted on arrival (the time
of ``clock``, the devices' simulated clock, so that a simulated day has real
minutes between its requests), then forwarded to the collector unchanged and
its answer returned unchanged.  ``actor`` and ``action`` are set by the test
before each device action (ground truth the operator does not have).

>>> with RecordingProxy(collector_port, clock) as proxy:      # doctest: +SKIP
...     client = Client(proxy.url, ...)
...     [a.path for a in proxy.arrivals]
['/v1/tokens/key', '/v1/tokens', '/v1/reports']
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

__all__ = ["Arrival", "RecordingProxy"]

_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "host", "content-length"})


@dataclass(frozen=True)
class Arrival:
    """One request as the collector's side saw it."""

    at: float              # the simulated clock on arrival
    method: str
    path: str
    install: str           # its LDP-Install-Key header ('' if none)
    body: bytes
    actor: int             # the device the test was driving (-1: none)
    action: int            # the test's action counter ("one flush")


class RecordingProxy:
    """Forward 127.0.0.1:<port> to 127.0.0.1:``upstream_port``, noting each request."""

    def __init__(self, upstream_port: int, clock: Callable[[], float]) -> None:
        self.arrivals: list[Arrival] = []
        self.actor = -1
        self.action = 0
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    proxy.arrivals.append(Arrival(
                        clock(), self.command, self.path.split("?")[0],
                        self.headers.get("LDP-Install-Key", ""), body, proxy.actor,
                        proxy.action))
                upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
                try:
                    upstream.request(self.command, self.path, body or None,
                                     {k: v for k, v in self.headers.items()
                                      if k.lower() not in _HOP})
                    answer = upstream.getresponse()
                    data = answer.read()
                    self.send_response(answer.status)
                    for key, value in answer.getheaders():
                        if key.lower() not in _HOP:
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    upstream.close()

            do_GET = do_POST = _forward

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> RecordingProxy:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
