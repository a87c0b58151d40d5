"""Errors as problem+json (RFC 9457) with a stable machine-readable ``code``.

>>> p = Problem(429, "rate_limited", "too many requests", headers={"Retry-After": "1"})
>>> p.body()["title"], p.body()["type"]
('Too Many Requests', 'https://ldp-telemetry.dev/problems/rate_limited')
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import orjson
from starlette.responses import Response

__all__ = ["PROBLEM_TYPE", "Problem", "json_response", "problem_response"]

PROBLEM_TYPE = "https://ldp-telemetry.dev/problems/"


class Problem(Exception):
    """Raise to answer with problem+json; ``extra`` adds members (e.g. ``errors``)."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        try:
            title = HTTPStatus(self.status).phrase
        except ValueError:
            title = "Error"
        return {
            "type": PROBLEM_TYPE + self.code,
            "title": title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
            **self.extra,
        }


def json_response(
    body: Any,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    media_type: str = "application/json",
) -> Response:
    """A JSON response serialised by orjson."""
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type=media_type)


def problem_response(problem: Problem) -> Response:
    """The problem+json response of a Problem."""
    return json_response(
        problem.body(), problem.status, problem.headers, "application/problem+json"
    )
