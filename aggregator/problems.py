"""problem+json (RFC 9457) errors with stable, machine-readable codes.

Every error the aggregator returns has ``type`` (a URN naming the code),
``title``, ``status``, ``detail`` and ``code``; the codes below are stable
across releases.

>>> Problem(404, "unknown_metric", "no metric named 'x'").body()["type"]
'urn:ldp:problem:unknown_metric'
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = ["CODES", "MEDIA_TYPE", "Problem", "install_handlers", "problem_response"]

MEDIA_TYPE = "application/problem+json"

#: code -> what it means; the codes are part of the API.
CODES = {
    "unauthorized": "missing or unknown analyst key",
    "unknown_metric": "no metric (or version) with that name",
    "invalid_query": "a query parameter is malformed or out of range",
    "bad_window": "start must be below end",
    "window_too_large": "the window holds more epochs than the server allows",
    "unknown_category": "a compared value is not a category of the metric",
    "bad_compare": "the comparison asked does not fit the metric's kind",
    "not_found": "no such route",
    "method_not_allowed": "the route does not accept this method",
    "store_unavailable": "Redis did not answer; retry later",
    "internal": "an unexpected error (logged without request data)",
}


class Problem(Exception):
    """An error response: raise it anywhere in a request."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {
            "type": f"urn:ldp:problem:{self.code}",
            "title": HTTPStatus(self.status).phrase,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
            **self.extra,
        }


def problem_response(problem: Problem) -> JSONResponse:
    return JSONResponse(
        problem.body(),
        status_code=problem.status,
        headers=problem.headers,
        media_type=MEDIA_TYPE,
    )


async def _on_problem(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Problem)
    return problem_response(exc)


async def _on_validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = {
        ".".join(str(p) for p in err.get("loc", ()) if p != "query"): err.get("msg", "")
        for err in exc.errors()
    }
    detail = "; ".join(f"{k}: {v}" for k, v in errors.items())
    return problem_response(Problem(422, "invalid_query", detail, errors=errors))


async def _on_http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
        exc.status_code, "invalid_query"
    )
    return problem_response(
        Problem(exc.status_code, code, str(exc.detail), headers=dict(exc.headers or {}))
    )


def install_handlers(app: FastAPI) -> None:
    """Route every error through problem+json (store errors: see ``app``)."""
    app.add_exception_handler(Problem, _on_problem)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
