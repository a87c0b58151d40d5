"""The dashboard's controls, script-free: GET forms and plain links.

A window picker (since / start / end as UTC dates / confidence / metric), a
metric index, per-metric download links (CSV and JSON lines of what is shown)
and the comparison question.  Every URL these emit carries only the query
of the page (``DashboardQuery``), never a key.

>>> q = DashboardQuery(metric="os", since="7d")
>>> q.link()
'/?metric=os&amp;since=7d&amp;confidence=0.95'
>>> q.export_link("os", "csv")
'/v1/estimates/os?format=csv&amp;series=epoch&amp;since=7d&amp;confidence=0.95'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

__all__ = [
    "CONFIDENCES",
    "SINCE_CHOICES",
    "DashboardQuery",
    "compare_form",
    "export_links",
    "metric_index",
    "notice",
    "window_form",
]

SINCE_CHOICES = (("", "every epoch"), ("24h", "last 24 hours"), ("7d", "last 7 days"),
                 ("30d", "last 30 days"), ("90d", "last 90 days"))
CONFIDENCES = (0.9, 0.95, 0.99)


@dataclass(frozen=True)
class DashboardQuery:
    """What the page was asked: a metric (or all), a window, a comparison."""

    metric: str | None = None
    since: str | None = None
    start: str | None = None
    end: str | None = None
    confidence: float = 0.95
    a: str | None = None
    b: str | None = None
    threshold: float | None = None

    def window_params(self) -> dict[str, Any]:
        """The window and confidence as query parameters (empty ones left out)."""
        pairs = {"since": self.since, "start": self.start, "end": self.end,
                 "confidence": self.confidence}
        return {k: v for k, v in pairs.items() if v not in (None, "")}

    def link(self, **changes: Any) -> str:
        """The page's URL with some fields changed (HTML-escaped for an attribute)."""
        fields = asdict(replace(self, **changes))
        params = {"metric": fields["metric"], **replace(self, **changes).window_params()}
        params.update({k: fields[k] for k in ("a", "b", "threshold")})
        query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
        return escape("/?" + query)

    def export_link(self, name: str, fmt: str) -> str:
        """The API URL of a metric's estimate and series in ``fmt`` (csv | jsonl)."""
        query = urlencode({"format": fmt, "series": "epoch", **self.window_params()})
        return escape(f"/v1/estimates/{quote(name)}?{query}")


def _hidden(name: str, value: Any) -> str:
    if value in (None, ""):
        return ""
    return f'<input type="hidden" name="{name}" value="{escape(str(value))}">'


def _date_value(text: str | None) -> str:
    """A bound as the value of an ``<input type=date>`` (dates only; epochs are left out)."""
    return escape(text[:10]) if text and len(text) >= 10 and text[4] == "-" else ""


def window_form(names: Sequence[str], q: DashboardQuery) -> str:
    """GET / with metric, since, start, end (UTC dates) and confidence."""
    metric_opts = '<option value="">every metric</option>' + "".join(
        f'<option value="{escape(n)}"{" selected" if n == q.metric else ""}>{escape(n)}</option>'
        for n in names
    )
    since_opts = "".join(
        f'<option value="{v}"{" selected" if v == (q.since or "") else ""}>{t}</option>'
        for v, t in SINCE_CHOICES
    )
    conf_opts = "".join(
        f'<option value="{c:g}"{" selected" if abs(c - q.confidence) < 1e-9 else ""}>'
        f"{c * 100:g}%</option>"
        for c in CONFIDENCES
    )
    return (
        '<form class="window" method="get" action="/" aria-label="window">'
        f'<label>Metric <select name="metric">{metric_opts}</select></label>'
        f'<label>Window <select name="since">{since_opts}</select></label>'
        f'<label>or start <input type="date" name="start" value="{_date_value(q.start)}">'
        "</label>"
        f'<label>end (exclusive) <input type="date" name="end" value="{_date_value(q.end)}">'
        "</label>"
        f'<label>Intervals <select name="confidence">{conf_opts}</select></label>'
        '<button type="submit">Show</button>'
        '<a class="reset" href="/">reset</a>'
        "<small>Dates are UTC days; a metric's window is counted in its own epochs "
        "(hour or day).</small></form>"
    )


def metric_index(bodies: Sequence[dict[str, Any]], q: DashboardQuery) -> str:
    """One row per metric: a link to it alone, its facts in the window, its downloads."""
    if not bodies:
        return ""
    rows = []
    for body in bodies:
        name = body["metric"]
        status = "suppressed" if body["suppressed"] else "estimate"
        rows.append(
            f'<tr><td><a href="{q.link(metric=name, a=None, b=None, threshold=None)}">'
            f"{escape(name)}</a></td><td>{escape(body['kind'])}</td>"
            f"<td>{escape(body['epoch_length'])}</td><td>{body['epsilon']:g}</td>"
            f'<td class="num">{body["n"]}</td><td>{status}</td>'
            f'<td><a href="{q.export_link(name, "csv")}">CSV</a></td></tr>'
        )
    return (
        '<nav class="index" aria-label="metrics"><table><thead><tr><th>metric</th>'
        "<th>kind</th><th>epoch</th><th>ε</th><th>n in window</th><th></th><th></th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></nav>"
    )


def export_links(body: dict[str, Any], q: DashboardQuery) -> str:
    """Download what the section shows: the window's estimate and every epoch."""
    name = body["metric"]
    return (
        '<p class="downloads">Download this window (estimate and each '
        f"{escape(body['epoch_length'])}): "
        f'<a href="{q.export_link(name, "csv")}">CSV</a> · '
        f'<a href="{q.export_link(name, "jsonl")}">JSON lines</a></p>'
    )


def compare_form(body: dict[str, Any], q: DashboardQuery) -> str:
    """The comparison question as a GET form (a vs b, or against a threshold)."""
    name = body["metric"]
    mine = q.metric == name
    keep = "".join(_hidden(k, v) for k, v in q.window_params().items())
    threshold = escape(f"{q.threshold:g}") if mine and q.threshold is not None else ""
    if body["kind"] == "categorical":
        def options(selected: str | None, blank: str) -> str:
            return f'<option value="">{blank}</option>' + "".join(
                f'<option value="{escape(c)}"'
                f'{" selected" if mine and c == selected else ""}>{escape(c)}</option>'
                for c in body["domain"]
            )

        question = (
            f'<label>Is <select name="a" required>{options(q.a, "a value")}</select></label>'
            f'<label>larger than <select name="b">{options(q.b, "another value")}</select>'
            "</label>"
            f'<label>or than the share <input name="threshold" inputmode="decimal" '
            f'size="6" value="{threshold}"></label>'
        )
    else:
        what = "the mean" if body["kind"] == "numeric" else "the proportion of true"
        question = (
            f'<label>Is {what} larger than <input name="threshold" inputmode="decimal" '
            f'size="6" required value="{threshold}"></label>'
        )
    return (
        f'<form class="compare" method="get" action="/#metric-{escape(name)}">'
        f'<input type="hidden" name="metric" value="{escape(name)}">{keep}{question}'
        '<button type="submit">Ask</button></form>'
    )


def notice(text: str, kind: str = "answer") -> str:
    """A short paragraph: the comparison's answer, or why the query was refused."""
    return f'<p class="{escape(kind)}">{escape(text)}</p>'
