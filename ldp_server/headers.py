"""Security headers, one middleware for both services.

The collector answers JSON to devices and to pages (the browser SDK posts
cross-origin), so it forbids every kind of content and framing but leaves
cross-origin reads to CORS; the aggregator serves the script-free dashboard
and locks itself to its own origin.

>>> API_HEADERS["X-Content-Type-Options"], "'none'" in PAGE_HEADERS["Content-Security-Policy"]
('nosniff', True)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from fastapi import FastAPI, Request, Response

__all__ = ["API_HEADERS", "PAGE_HEADERS", "install_security_headers"]

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


def install_security_headers(app: FastAPI, headers: Mapping[str, str]) -> None:
    """Add ``headers`` to every answer that does not set them itself."""

    @app.middleware("http")
    async def security_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        for name, value in headers.items():
            response.headers.setdefault(name, value)
        return response
