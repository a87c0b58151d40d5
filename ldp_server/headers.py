"""Security headers, one middleware for both services.

The collector answers JSON to devices and to pages (the browser SDK posts
cross-origin), so it forbids every kind of content and framing but leaves
cross-origin reads to CORS; the aggregator serves the script-free dashboard
and locks itself to its own origin.

>>> API_HEADERS["X-Content-Type-Options"], "'none'" in PAGE_HEADERS["Content-Security-Policy"]
('nosniff', True)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp

__all__ = ["API_HEADERS", "PAGE_HEADERS", "SecurityHeaders", "install_security_headers"]

API_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'none'; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class SecurityHeaders:
    """Pure ASGI middleware: ``headers`` on every HTTP answer that does not set them.

    Not ``@app.middleware("http")``: Starlette's BaseHTTPMiddleware runs each
    request through an extra task and stream, about a sixth of a single-report
    request's CPU in the collector's profile.
    """

    def __init__(self, app: ASGIApp, headers: Mapping[str, str]) -> None:
        self.app = app
        self.headers = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                        for k, v in headers.items()]

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                raw = message.get("headers", ())
                present = {bytes(k).lower() for k, _ in raw}
                missing = [h for h in self.headers if h[0] not in present]
                if missing:
                    message = {**message, "headers": [*raw, *missing]}
            await send(message)

        await self.app(scope, receive, sending)


def install_security_headers(app: FastAPI, headers: Mapping[str, str]) -> None:
    """Add ``headers`` to every answer that does not set them itself."""
    app.add_middleware(SecurityHeaders, headers=headers)
