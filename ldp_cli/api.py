"""A small JSON-over-HTTP client for the CLI (standard library only).

Errors come back as ``ApiError`` with the server's problem+json code and
message, so the CLI can print them plainly.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["Api", "ApiError"]


class ApiError(RuntimeError):
    """An HTTP error answer (or no answer); ``code`` is the problem+json code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({code}, HTTP {status})" if status else message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class Api:
    """One service: base URL and bearer key."""

    base_url: str
    key: str
    timeout: float = 30.0

    def request(
        self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """The decoded JSON answer of one request."""
        return json.loads(self.request_raw(method, path, body, params) or b"null")

    def request_raw(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, Any] | None = None,
        accept: str = "application/json",
    ) -> bytes:
        """The raw body of one request (e.g. CSV with ``params={"format": "csv"}``)."""
        query = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        url = self.base_url.rstrip("/") + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        if not url.startswith(("http://", "https://")):
            raise ApiError(0, "bad_url", f"not an http(s) URL: {self.base_url!r}")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)  # noqa: S310
        req.add_header("Authorization", f"Bearer {self.key}")
        req.add_header("Accept", accept)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                raw: bytes = resp.read()
                return raw
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                problem = json.loads(raw)
                code = str(problem.get("code", "http_error"))
                detail = str(problem.get("detail") or problem.get("title") or exc.reason)
            except (ValueError, AttributeError):
                code, detail = "http_error", str(exc.reason)
            raise ApiError(exc.code, code, detail) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(0, "unreachable", f"cannot reach {self.base_url}: {reason}") from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def get_text(self, path: str, **params: Any) -> str:
        """A GET whose answer is text (CSV, JSON lines), decoded as UTF-8."""
        return self.request_raw("GET", path, params=params, accept="*/*").decode()

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body=body)


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
