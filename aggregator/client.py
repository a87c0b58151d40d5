"""A small Python client for the aggregator API (standard library only).

Plain dicts by default; with ``frame=True`` a pandas DataFrame of the rows
of ``aggregator.export`` (one per value, and per epoch with ``series=True``)
when pandas is installed.  It needs no server extra: urllib and json only.

>>> c = Client("http://127.0.0.1:8001", key="...")                    # doctest: +SKIP
>>> c.metrics()[0]["name"]                                             # doctest: +SKIP
'os'
>>> c.estimate("os", since="7d")["estimate"]["values"][0]["value"]     # doctest: +SKIP
0.451
>>> c.estimate("os", start="2026-11-01", end="2026-12-01", series=True,
...            frame=True).head()                                      # doctest: +SKIP
>>> c.compare("os", a="android", b="ios")["answer"]                    # doctest: +SKIP
"'android' is larger than 'ios'"

Errors are ``ApiError`` with the server's problem+json ``code`` (e.g.
``bad_date``, ``unknown_metric``, ``window_too_costly``) and its message.

A series comes from the server in pages (each one bounded request); the
client follows every ``next`` link (the body's ``page.next``, or the
``Link: <...>; rel="next"`` header of CSV and JSON lines) and hands back the
whole series, as one body or one text, exactly as if it were one answer.
``limit=`` sets the page size.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["ApiError", "Client", "rows_frame"]


class ApiError(RuntimeError):
    """An error answer of the API (``status``, problem+json ``code``), or no answer (0)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({code}, HTTP {status})" if status else message)
        self.status = status
        self.code = code


def rows_frame(text: str) -> Any:
    """A pandas DataFrame of the API's CSV rows (ImportError without pandas)."""
    import pandas as pd  # optional: only for frame=True

    return pd.read_csv(io.StringIO(text), keep_default_na=True)


@dataclass(frozen=True)
class Client:
    """The aggregator at ``base_url`` with an analyst ``key`` (sent as a bearer header)."""

    base_url: str
    key: str
    timeout: float = 30.0

    def _get(self, path: str, params: dict[str, Any], accept: str) -> bytes:
        return self._fetch(self._url(path, params), accept)[0]

    def _url(self, path: str, params: dict[str, Any]) -> str:
        query = {k: _param(v) for k, v in params.items() if v is not None and v is not False}
        return self.base_url.rstrip("/") + path + ("?" + urllib.parse.urlencode(query) if query
                                                   else "")

    def _follow(self, link: str) -> str:
        """The absolute URL of a next link (a path and query on this server)."""
        if not link.startswith("/"):
            raise ApiError(0, "bad_link", f"a next link must be a path on this server: {link!r}")
        return self.base_url.rstrip("/") + link

    def _fetch(self, url: str, accept: str) -> tuple[bytes, str | None]:
        """The body of a GET and its ``Link: <...>; rel="next"`` target (or None)."""
        if not url.startswith(("http://", "https://")):
            raise ApiError(0, "bad_url", f"not an http(s) URL: {self.base_url!r}")
        req = urllib.request.Request(url)  # noqa: S310 -- http(s) checked above
        req.add_header("Authorization", f"Bearer {self.key}")
        req.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                body: bytes = resp.read()
                return body, _next_link(resp.headers.get("Link"))
        except urllib.error.HTTPError as exc:
            try:
                problem = json.loads(exc.read())
                code, detail = str(problem["code"]), str(problem.get("detail", ""))
            except (ValueError, KeyError, TypeError):
                code, detail = "http_error", str(exc.reason)
            raise ApiError(exc.code, code, detail) from None
        except OSError as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(0, "unreachable", f"cannot reach {self.base_url}: {reason}") from None

    def get_json(self, path: str, **params: Any) -> Any:
        """Any GET of the API, decoded."""
        return json.loads(self._get(path, params, "application/json"))

    def metrics(self) -> list[dict[str, Any]]:
        """The registered metrics (latest versions), with ``unit_text``."""
        found: list[dict[str, Any]] = self.get_json("/v1/metrics")["metrics"]
        return found

    def estimate(
        self,
        name: str,
        *,
        start: str | int | None = None,
        end: str | int | None = None,
        since: str | None = None,
        confidence: float = 0.95,
        consistent: bool = False,
        series: bool = False,
        version: int | None = None,
        frame: bool = False,
        limit: int | None = None,
    ) -> Any:
        """The estimate (a dict), or with ``frame=True`` its rows as a DataFrame.

        ``start``/``end``: epoch numbers or UTC dates ("2026-11-01"); ``since``: "7d".
        ``series=True``: every page of the series, joined (``limit``: epochs per page).
        """
        params: dict[str, Any] = {
            "start": start, "end": end, "since": since, "confidence": confidence,
            "consistent": consistent, "series": "epoch" if series else None,
            "version": version, "limit": limit if series else None,
        }
        if frame:
            return rows_frame(self.estimate_text(name, "csv", **params))
        return self.pages(f"/v1/estimates/{urllib.parse.quote(name)}", **params)

    def pages(self, path: str, **params: Any) -> Any:
        """A GET of an estimate with every page of its series joined into one body."""
        body, link = self._fetch(self._url(path, params), "application/json")
        out: Any = json.loads(body)
        while link is not None:
            raw, link = self._fetch(self._follow(link), "application/json")
            out["series"].extend(json.loads(raw)["series"])
        if isinstance(out, dict) and isinstance(out.get("page"), dict):
            out["page"].update(next=None, next_cursor=None, epochs=len(out["series"]))
        return out

    def estimate_text(self, name: str, fmt: str = "csv", **params: Any) -> str:
        """The estimate's rows as CSV or JSON lines text (``fmt``: csv | jsonl), every
        page of a series included (one CSV header)."""
        path = f"/v1/estimates/{urllib.parse.quote(name)}"
        raw, link = self._fetch(self._url(path, {**params, "format": fmt}), "*/*")
        parts = [raw.decode()]
        while link is not None:
            raw, link = self._fetch(self._follow(link), "*/*")
            text = raw.decode()
            parts.append(text.split("\n", 1)[1] if fmt == "csv" else text)
        return "".join(parts)

    def rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """The estimate's rows (``aggregator.export.COLUMNS``) as plain dicts, typed as in
        the JSON: numbers are int or float, ``suppressed`` a bool, an empty cell None.

        >>> c.rows("os", since="7d")[0]["value"]                        # doctest: +SKIP
        0.451
        """
        text = self.estimate_text(name, "jsonl", **params)
        return [json.loads(line) for line in text.splitlines() if line]

    def compare(self, name: str, **params: Any) -> dict[str, Any]:
        """GET /v1/estimates/{name}/compare (a=, b= or threshold=, and the window)."""
        out: dict[str, Any] = self.get_json(
            f"/v1/estimates/{urllib.parse.quote(name)}/compare", **params
        )
        return out


def _next_link(header: str | None) -> str | None:
    """The target of ``rel="next"`` in a Link header (RFC 8288), else None.

    >>> _next_link('</v1/estimates/os?series=epoch&cursor=9>; rel="next"')
    '/v1/estimates/os?series=epoch&cursor=9'
    >>> _next_link(None) is None
    True
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
