"""The aggregator's OpenAPI document: FastAPI's, completed with what the routes answer.

FastAPI derives parameters and 200s from the signatures; it cannot see the
problem+json answers raised by the dependencies (401 without an analyst key,
404 unknown metric, 422 invalid_query, 503 store_unavailable with
Retry-After), the bearer scheme, the dashboard's redirects and login page, or
the stylesheet's media type.  ``install_openapi`` adds them, so that every
answer matches the document (tests/aggregator/test_schema_aggregator.py runs
schemathesis against it).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

__all__ = ["install_openapi"]

_PROBLEM: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string"},
    },
}
_RETRY_AFTER = {"Retry-After": {"required": True, "schema": {"type": "string"}}}


def _problem(description: str, retry_after: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": description,
        "content": {"application/problem+json": {
            "schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    if retry_after:
        out["headers"] = _RETRY_AFTER
    return out


def _html(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/html": {"schema": {"type": "string"}}}}


def _complete(doc: dict[str, Any]) -> dict[str, Any]:
    components = doc.setdefault("components", {})
    components.setdefault("schemas", {})["Problem"] = _PROBLEM
    components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, operations in doc.get("paths", {}).items():
        for method, op in operations.items():
            responses = op.setdefault("responses", {})
            if path.startswith("/v1/"):
                op["security"] = [{"bearer": []}]
                responses["401"] = _problem("no analyst key, or an unknown one")
                responses["503"] = _problem("Redis did not answer", retry_after=True)
                if "422" in responses:
                    responses["422"] = _problem("a query parameter is invalid")
            if path.startswith("/v1/estimates/"):
                responses["404"] = _problem("no metric (or version) with that name")
                responses["422"] = _problem("invalid query, window or comparison")
            if path == "/readyz":
                responses["503"] = _problem("Redis did not answer", retry_after=True)
            if path == "/" and method == "get":
                op["security"] = [{"bearer": []}, {}]
                responses["200"] = _html("the dashboard")
                responses["401"] = _html("the sign-in page (a key in the URL signs nobody in)")
                responses["422"] = _problem("a query parameter is invalid")
                responses["503"] = _problem("Redis did not answer", retry_after=True)
            if path == "/login" and method == "post":
                op["requestBody"] = {"content": {"application/x-www-form-urlencoded": {
                    "schema": {"type": "object", "properties": {"key": {"type": "string"}}}}}}
                op["responses"] = {
                    "303": {"description": "signed in: a redirect to / with the cookie"},
                    "401": _html("the sign-in page again"),
                    "403": _html("not posted from the dashboard's own origin"),
                    "413": _html("a body over 4 KiB"),
                }
            if path == "/login" and method == "get":
                op["responses"] = {
                    "303": {"description": "a live one-time ticket: signed in, redirect to /"},
                    "401": _html("the sign-in page: the ticket is used or expired"),
                    "422": _problem("a query parameter is invalid"),
                    "503": _problem("Redis did not answer", retry_after=True),
                }
            if path == "/logout":
                op["responses"] = {
                    "303": {"description": "signed out (session revoked): a redirect to /"},
                    "403": _html("not posted from the dashboard's own origin"),
                    "503": _problem("Redis did not answer", retry_after=True),
                }
            if path == "/static/dashboard.css":
                op["responses"] = {"200": {"description": "the stylesheet", "content": {
                    "text/css": {"schema": {"type": "string"}}}}}
    return doc


def install_openapi(app: FastAPI) -> None:
    """Serve the completed document at the app's openapi_url."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _complete(get_openapi(
                title=app.title, version=app.version, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
