"""uvicorn's httptools protocol with deadlines and a connection cap: slow clients
cannot starve a worker.

uvicorn times a connection only between requests (keep-alive): one that sends
half a request line, or nothing, stays open for ever, and a few thousand of
them exhaust the worker's file descriptors, so that new connections (a health
probe's too) are never accepted.  ``GuardedHttpTools`` adds, per connection:

- a header deadline (``LDP_HEADER_TIMEOUT_SECONDS``, 10 s): from the moment the
  connection opens, or its previous response ends, to the end of the next
  request's headers; past it the connection is closed;
- a body deadline (``LDP_BODY_TIMEOUT_SECONDS``, 60 s): from the end of the
  headers to the end of the body;
- a cap on open connections per worker (``LDP_MAX_CONNECTIONS``, 2048, and at
  most the process's file limit less ``FD_RESERVE``): one more closes the
  connection that has waited longest for its headers (idle or half-sent,
  never one whose request is being served), else the new one.  A flood of
  half-open connections thus displaces its own oldest members, while a client
  that sends its request at once gets served.

Run through ``ldp_server.serve_asgi`` (``ldp up``, tests) or ``ldp serve``:
uvicorn's command line cannot name a protocol class.

>>> GuardedHttpTools.__mro__[1].__name__
'HttpToolsProtocol'
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass
from functools import cache
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ldp_server.settings import ListenSettings

__all__ = ["FD_RESERVE", "GuardLimits", "GuardedHttpTools", "guard_limits", "raise_file_limit"]

#: File descriptors kept for everything but client connections (Redis, logs, metrics).
FD_RESERVE = 128


@dataclass(frozen=True)
class GuardLimits:
    """The deadlines (seconds) and the cap of one worker."""

    header_seconds: float
    body_seconds: float
    max_connections: int


def raise_file_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; return the soft one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    return soft


@cache
def guard_limits() -> GuardLimits:
    """This process's limits: ``ListenSettings`` from the environment, the cap no
    higher than the file limit allows (read once per process).

    >>> guard_limits().max_connections >= 16
    True
    """
    listen = ListenSettings()
    files = raise_file_limit()
    cap = max(16, min(listen.max_connections, files - FD_RESERVE))
    return GuardLimits(listen.header_timeout_seconds, listen.body_timeout_seconds, cap)


def _waiting(state: Any) -> dict[GuardedHttpTools, None]:
    """The worker's connections waiting for headers, longest-waiting first."""
    waiting: dict[GuardedHttpTools, None] | None = getattr(state, "ldp_waiting", None)
    if waiting is None:
        waiting = {}
        state.ldp_waiting = waiting
    return waiting


class GuardedHttpTools(HttpToolsProtocol):
    """``HttpToolsProtocol`` with header and body deadlines and a connection cap."""

    _deadline: asyncio.TimerHandle | None = None
    #: "headers" (waiting for them), "body" (reading it), "served" (the app has it all).
    _phase = "headers"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits = guard_limits()
        waiting = _waiting(self.server_state)
        if len(self.connections) > limits.max_connections:
            victim = next(iter(waiting), None)
            if victim is None:  # every connection is being served: refuse this one
                transport.close()
                return
            victim._close()
        self._wait_for_headers(limits.header_seconds)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_clock()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._start_clock("body", guard_limits().body_seconds)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if self._phase == "body":
            self._stop_clock()
            self._phase = "served"
        super().on_message_complete()

    def on_response_complete(self) -> None:
        queued = bool(self.pipeline)  # a pipelined request starts: its headers are in
        super().on_response_complete()
        # An answer before the whole body (a 413, say) leaves the body deadline running.
        if not queued and self._phase != "body" and not self.transport.is_closing():
            self._wait_for_headers(guard_limits().header_seconds)

    def _wait_for_headers(self, seconds: float) -> None:
        self._start_clock("headers", seconds)
        _waiting(self.server_state)[self] = None

    def _start_clock(self, phase: str, seconds: float) -> None:
        self._stop_clock()
        self._phase = phase
        self._deadline = self.loop.call_later(seconds, self._close)

    def _stop_clock(self) -> None:
        _waiting(self.server_state).pop(self, None)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _close(self) -> None:
        self._stop_clock()
        if not self.transport.is_closing():
            self.transport.close()
