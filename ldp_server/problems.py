"""problem+json (RFC 9457): one type URI scheme and one vocabulary for both services.

Every error either service returns is ``application/problem+json`` with
``type`` (``PROBLEM_TYPE`` + the code), ``title`` (the HTTP reason phrase),
``status``, ``detail`` (a human message that names the bad value, never a
secret) and ``code``: a key of ``CODES``, stable across releases.  A Problem
with a code outside the table is a programming error (ValueError), so the
vocabulary cannot drift between the services.  A few codes name the case more
precisely in a ``reason`` member, from ``REASONS`` (equally stable, equally
checked): ``invalid_device`` says which check of a device's login token failed.

>>> p = Problem(429, "rate_limited", "too many requests", headers={"Retry-After": "1"})
>>> p.body()["title"], p.body()["type"]
('Too Many Requests', 'https://ldp-telemetry.dev/problems/rate_limited')
>>> store_unavailable().headers
{'Retry-After': '1'}
>>> Problem(400, "oops", "x")
Traceback (most recent call last):
ValueError: unknown problem code 'oops': add it to ldp_server.problems.CODES
>>> Problem(401, "invalid_device", "expired", reason="device_token_expired").body()["reason"]
'device_token_expired'
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

__all__ = [
    "CODES",
    "MEDIA_TYPE",
    "PROBLEM_TYPE",
    "REASONS",
    "RETRY_AFTER_SECONDS",
    "Problem",
    "install_handlers",
    "json_response",
    "problem_response",
    "store_unavailable",
]

PROBLEM_TYPE = "https://ldp-telemetry.dev/problems/"
MEDIA_TYPE = "application/problem+json"

#: Retry-After of a 503 store_unavailable: Redis restarts in about a second, and
#: clients add their own jittered exponential backoff on top of this floor.
RETRY_AFTER_SECONDS = 1

#: code -> the one condition it names (both services); the codes are part of the API.
CODES: dict[str, str] = {
    # requests
    "invalid_request": "a query parameter, header or field is malformed or out of range",
    "invalid_json": "the body is not valid JSON",
    "invalid_gzip": "the gzip body is corrupt, truncated or has trailing data",
    "unsupported_encoding": "Content-Encoding is neither gzip nor identity",
    "unsupported_media_type": "Content-Type is not application/json",
    "body_too_large": "the body (or its inflated form) exceeds the limit",
    "batch_shape": "the batch is not six columns of one length (ldp_core.wire)",
    "batch_size": "the batch holds no report or more than the limit",
    "invalid_spec": "the metric spec is not valid (errors: field -> message)",
    "quota_exceeded": "the registry is full: too many metrics, or the catalog too large",
    # keys
    "missing_key": "no 'Authorization: Bearer <key>' header",
    "invalid_device": "the token issuer's device credential is missing or malformed",
    "invalid_key": "the key is not one of this service's keys",
    "wrong_role": "the key is valid but its role may not do this",
    "rate_limited": "too many requests for this key (Retry-After)",
    # install registration (collector.routers.installs)
    "challenge_invalid": "the proof-of-work challenge is not one this collector made "
    "(length, version or MAC): ask a new one",
    "challenge_expired": "the proof-of-work challenge has expired: ask a new one",
    "pow_invalid": "the nonce does not solve the challenge for this install key",
    "registration_limited": "too many new installs registered from this network "
    "(/24 or /48) this hour (Retry-After)",
    "install_unregistered": "this install has not registered (POST /v1/installs with a "
    "solved challenge)",
    # resources
    "not_found": "no such route",
    "method_not_allowed": "the route does not accept this method",
    "unknown_metric": "no metric with that name",
    "unknown_version": "the metric exists, that version does not",
    # estimates
    "bad_window": "start must be below end",
    "bad_date": "start, end or since is not an epoch number, a UTC date or <N><h|d|w>",
    "window_too_large": "the window holds more epochs than the server allows",
    "window_too_costly": "the window's counters x epochs exceed what one request reads "
    "(ask a shorter window, or the series in pages)",
    "unknown_category": "a compared value is not a category of the metric",
    "bad_compare": "the comparison asked does not fit the metric's kind",
    "bad_quantiles": "quantiles= or buckets= is malformed, or the metric serves no distribution",
    # the server
    "store_unavailable": "Redis did not answer; retry after Retry-After seconds",
    "store_memory_low": "Redis is near its maxmemory (LDP_REDIS_MEMORY_HIGH_SHARE): not "
    "ready, and no new token install; retry after Retry-After seconds",
    "device_auth_unavailable": "the keys device tokens are checked with (JWKS) could not "
    "be read; retry after Retry-After seconds",
    "http_error": "any other HTTP error of the framework",
    "internal": "an unexpected error (logged without request data)",
}

#: code -> {reason: the case it names}: the ``reason`` member a Problem of that code
#: may carry (part of the API like the codes).
REASONS: dict[str, dict[str, str]] = {
    "invalid_device": {
        "install_key_invalid": "no LDP-Install-Key, or not base64url of 32 bytes",
        "device_token_missing": "no LDP-Device-Token (the app's login token)",
        "device_token_malformed": "the device token is not a JWT (or is over 8 KiB)",
        "device_token_algorithm": "its alg is not one the issuer accepts (never none or HS*)",
        "device_token_unknown_key": "its kid is in none of the JWKS keys, even after a refetch",
        "device_token_signature": "its signature does not verify",
        "device_token_expired": "exp has passed (beyond the leeway)",
        "device_token_not_yet_valid": "nbf or iat lies ahead (beyond the leeway)",
        "device_token_issuer": "iss is not LDP_JWT_ISSUER",
        "device_token_audience": "aud does not hold LDP_JWT_AUDIENCE",
        "device_token_claims": "a required claim (exp, iat, iss, aud, sub) is missing or malformed",
    },
}


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
        reason: str | None = None,
    ) -> None:
        if code not in CODES:
            raise ValueError(f"unknown problem code {code!r}: add it to ldp_server.problems.CODES")
        if reason is not None and reason not in REASONS.get(code, {}):
            raise ValueError(f"unknown reason {reason!r} of problem code {code!r}: add it to "
                             "ldp_server.problems.REASONS")
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = dict(extra or {}) | ({"reason": reason} if reason is not None else {})

    def body(self) -> dict[str, Any]:
        """The problem+json object."""
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


def store_unavailable(detail: str = "Redis did not answer; retry later") -> Problem:
    """The 503 of both services when Redis is down."""
    return Problem(503, "store_unavailable", detail,
                   headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


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
    return json_response(problem.body(), problem.status, problem.headers, MEDIA_TYPE)


async def _on_problem(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return problem_response(exc)


async def _on_validation(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = {
        ".".join(str(p) for p in err.get("loc", ()) if p != "query"): str(err.get("msg", ""))
        for err in exc.errors()
    }
    detail = "; ".join(f"{k}: {v}" for k, v in errors.items()) or "the request is not valid"
    return problem_response(Problem(422, "invalid_request", detail, extra={"errors": errors}))


async def _on_http(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return problem_response(
        Problem(exc.status_code, code, str(exc.detail), headers=dict(exc.headers or {}))
    )


def install_handlers(app: FastAPI) -> None:
    """Route Problem, request validation and framework HTTP errors through problem+json.

    Each service adds its own handlers for Redis errors (``store_unavailable``)
    and for the unexpected (``internal``), which log.
    """
    app.add_exception_handler(Problem, _on_problem)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
