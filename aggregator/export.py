"""An estimate response as flat rows: CSV and JSON lines for spreadsheets and pandas.

One row per value (per category; one for a boolean or a mean) of the whole
window (``scope = window``) and, when the series was asked, of every epoch
(``scope = epoch``).  A suppressed estimate is one row with ``suppressed``
true, its ``reason``, and empty numbers.  The columns are ``COLUMNS``, in that
order, in both formats; times are ISO 8601 UTC; ``target`` says whom the
intervals are about (``reporters`` or ``population``, issue 40).

>>> body = {"metric": "crashed", "version": 1, "kind": "boolean", "epsilon": 1.0,
...     "epoch_seconds": 86400, "confidence": 0.95, "n": 5000, "suppressed": False,
...     "reason": None, "window": {"first_epoch": 20400, "last_epoch": 20401},
...     "target": "reporters",
...     "estimate": {"value": 0.31, "stderr": 0.01, "ci_low": 0.29, "ci_high": 0.33}}
>>> print(to_csv(body).splitlines()[1])
crashed,1,boolean,window,,20400,20401,2025-11-08T00:00:00Z,2025-11-10T00:00:00Z,5000,false,,,0.31,0.01,0.29,0.33,,0.95,1.0,reporters
>>> import json; json.loads(to_jsonl(body))["value"]
0.31

Spreadsheet safety: a text cell (category, reason) that begins with ``=``,
``+``, ``-``, ``@``, tab or carriage return is prefixed with ``'`` in the CSV
(OWASP "CSV injection"); numbers are written as they are.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any, Literal

__all__ = ["COLUMNS", "FORMATS", "Format", "media_type", "negotiate", "rows", "to_csv", "to_jsonl"]

Format = Literal["json", "csv", "jsonl"]
FORMATS: tuple[Format, ...] = ("json", "csv", "jsonl")

COLUMNS = (
    "metric",
    "version",
    "kind",
    "scope",
    "epoch",
    "first_epoch",
    "last_epoch",
    "from_utc",
    "to_utc",
    "n",
    "suppressed",
    "reason",
    "category",
    "value",
    "stderr",
    "ci_low",
    "ci_high",
    "consistent",
    "confidence",
    "epsilon",
    "target",
)

_MEDIA = {"json": "application/json", "csv": "text/csv", "jsonl": "application/x-ndjson"}
_ACCEPT = {
    "text/csv": "csv",
    "application/x-ndjson": "jsonl",
    "application/jsonl": "jsonl",
    "application/jsonlines": "jsonl",
    "application/json": "json",
}


def media_type(fmt: Format) -> str:
    """The Content-Type of a format (CSV and JSON lines in UTF-8).

    >>> media_type("csv"), media_type("jsonl")
    ('text/csv; charset=utf-8', 'application/x-ndjson')
    """
    return _MEDIA[fmt] + ("; charset=utf-8" if fmt == "csv" else "")


def negotiate(fmt: str | None, accept: str | None) -> Format:
    """``format=`` wins; else the first listed Accept type we serve; else JSON.

    >>> negotiate(None, "text/csv, */*"), negotiate("jsonl", "text/csv"), negotiate(None, None)
    ('csv', 'jsonl', 'json')
    """
    for known in FORMATS:
        if fmt == known:
            return known
    for part in (accept or "").split(","):
        found = _ACCEPT.get(part.split(";")[0].strip().lower())
        if found is not None:
            return found  # type: ignore[return-value]
    return "json"


def _iso(epoch: int | None, epoch_seconds: int, after: bool = False) -> str | None:
    if epoch is None:
        return None
    seconds = (epoch + (1 if after else 0)) * epoch_seconds
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _values(part: Mapping[str, Any]) -> list[dict[str, Any]]:
    """(category, value, stderr, ci_low, ci_high, consistent) of one estimate."""
    est = part.get("estimate")
    if part.get("suppressed") or not est:
        return [{}]
    if "values" in est:
        return [
            {
                "category": v.get("category"),
                **{k: v.get(k) for k in ("value", "stderr", "ci_low", "ci_high", "consistent")},
            }
            for v in est["values"]
        ]
    return [{k: est.get(k) for k in ("value", "stderr", "ci_low", "ci_high")}]


def rows(body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The flat rows of an estimate response (GET /v1/estimates/{name}), see COLUMNS."""
    seconds = int(body.get("epoch_seconds") or 86400)
    common = {
        "metric": body["metric"],
        "version": body["version"],
        "kind": body["kind"],
        "confidence": body.get("confidence"),
        "epsilon": body.get("epsilon"),
        "target": body.get("target"),
    }
    window = body.get("window") or {}
    # A series page after the first carries points only (no window row).
    parts: list[tuple[Mapping[str, Any], str, int | None, int | None, int | None]] = (
        [(body, "window", None, window.get("first_epoch"), window.get("last_epoch"))]
        if "n" in body else []
    )
    parts += [(p, "epoch", p["epoch"], p["epoch"], p["epoch"]) for p in body.get("series") or []]
    for part, scope, epoch, first, last in parts:
        head = {
            **common,
            "scope": scope,
            "epoch": epoch,
            "first_epoch": first,
            "last_epoch": last,
            "from_utc": _iso(first, seconds),
            "to_utc": _iso(last, seconds, after=True),
            "n": part.get("n"),
            "suppressed": bool(part.get("suppressed")),
            "reason": part.get("reason"),
        }
        for value in _values(part):
            row = {**head, **value}
            yield {c: row.get(c) for c in COLUMNS}


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value
    return str(value)


def to_csv(body: Mapping[str, Any]) -> str:
    """The rows as CSV with a header line (RFC 4180 quoting, ``\\n`` line ends)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows(body):
        writer.writerow([_cell(row[c]) for c in COLUMNS])
    return out.getvalue()


def to_jsonl(body: Mapping[str, Any]) -> str:
    """The rows as JSON lines: one object per line, nulls for empty cells."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows(body))
