"""A small JSON-over-HTTP client for the CLI (standard library only).

Errors come back as ``ApiError`` with the server's problem+json code and
message, so the CLI can print them plainly.  A paged answer (an estimate's
series) is followed through its ``Link: <...>; rel="next"`` headers and
joined (``get_pages``, ``get_text``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["Api", "ApiError", "next_link"]


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
        return self._send(method, url, body, accept)[0]

    def _send(
        self, method: str, url: str, body: Any = None, accept: str = "application/json"
    ) -> tuple[bytes, str | None]:
        """The raw body of one request and its next-page link (a path), if any."""
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
                return raw, next_link(resp.headers.get("Link"))
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

    def _next(self, link: str) -> str:
        if not link.startswith("/"):
            raise ApiError(0, "bad_link", f"a next link must be a path on this server: {link!r}")
        return self.base_url.rstrip("/") + link

    def get_pages(self, path: str, **params: Any) -> Any:
        """A GET whose ``series`` comes in pages: every page, joined into one body."""
        query = {k: _param(v) for k, v in params.items() if v is not None}
        url = self.base_url.rstrip("/") + path + ("?" + urllib.parse.urlencode(query)
                                                  if query else "")
        raw, link = self._send("GET", url)
        body = json.loads(raw)
        while link is not None:
            raw, link = self._send("GET", self._next(link))
            body["series"].extend(json.loads(raw)["series"])
        if isinstance(body, dict) and isinstance(body.get("page"), dict):
            body["page"].update(next=None, next_cursor=None, epochs=len(body["series"]))
        return body

    def get_text(self, path: str, **params: Any) -> str:
        """A GET whose answer is text (CSV, JSON lines), decoded as UTF-8; the pages of
        a paged answer are joined (one CSV header)."""
        query = {k: _param(v) for k, v in params.items() if v is not None}
        url = self.base_url.rstrip("/") + path + ("?" + urllib.parse.urlencode(query)
                                                  if query else "")
        raw, link = self._send("GET", url, accept="*/*")
        parts = [raw.decode()]
        while link is not None:
            raw, link = self._send("GET", self._next(link), accept="*/*")
            text = raw.decode()
            parts.append(text.split("\n", 1)[1] if params.get("format") == "csv" else text)
        return "".join(parts)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body=body)


def next_link(header: str | None) -> str | None:
    """The target of ``rel="next"`` in a Link header (RFC 8288), else None.

    >>> next_link('</v1/estimates/os?series=epoch&cursor=9>; rel="next"')
    '/v1/estimates/os?series=epoch&cursor=9'
    """
    for part in (header or "").split(","):
        target, _, rel = part.partition(";")
        if rel.replace(" ", "").lower() in ('rel="next"', "rel=next"):
            return target.strip().removeprefix("<").removesuffix(">")
    return None


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
