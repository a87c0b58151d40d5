"""The dashboard page: server-rendered HTML with inline SVG, no script.

Built from the same JSON the API returns (``service.estimate_response`` with
the series), so the page and the API never disagree.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from html import escape
from typing import Any

from aggregator.charts import (
    Bar,
    Bucket,
    Point,
    Quantile,
    bar_chart,
    distribution_chart,
    series_chart,
)

__all__ = ["login_page", "metrics_page"]

#: Most categories drawn per chart (the largest estimates); the API has them all.
MAX_BARS = 40

_HEAD = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">'
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    "<title>{title}</title>"
    '<link rel="stylesheet" href="/static/dashboard.css"></head><body>'
)


def _date(seconds: int, epoch_length: str) -> str:
    fmt = "%Y-%m-%d" if epoch_length == "day" else "%Y-%m-%d %H:00"
    return time.strftime(fmt, time.gmtime(seconds))


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def _bars(body: dict[str, Any]) -> tuple[str, str]:
    """The bar chart and a caption for a non-suppressed estimate."""
    est = body["estimate"]
    if body["kind"] == "string":
        # The discovered strings; "?" marks one listed below the discovery cut.
        rows = [
            Bar(v["category"] + ("" if v.get("confident") else " ?"), v["value"] or 0.0,
                v["ci_low"] or 0.0, v["ci_high"] or 0.0)
            for v in est["values"][:MAX_BARS]
        ]
        threshold = est.get("detection_threshold") or 0.0
        caption = (
            f"strings discovered, share of reports ('?': below the discovery cut); not seen: "
            f"a string below {threshold:.4g} of the reports "
            f"({est.get('detection_threshold_reports') or 0:,.0f}) is found with probability "
            f"< {est.get('detection_power', 0.95):.0%}"
        )
        return (bar_chart(rows, ceil=0.0) if rows else "<p>(no string discovered)</p>"), caption
    if body["kind"] == "categorical":
        rows = [
            Bar(v["category"], v["value"] or 0.0, v["ci_low"] or 0.0, v["ci_high"] or 0.0)
            for v in est["values"]
        ]
        caption = "estimated share of reports per value"
        if len(rows) > MAX_BARS:
            rows = sorted(rows, key=lambda r: -r.value)[:MAX_BARS]
            caption += f" (the {MAX_BARS} largest of {len(est['values'])})"
        return bar_chart(rows, ceil=0.0), caption
    if body["kind"] == "boolean":
        row = Bar("true", est["value"] or 0.0, est["ci_low"] or 0.0, est["ci_high"] or 0.0)
        return bar_chart([row], ceil=1.0), "estimated proportion of true"
    row = Bar("mean", est["value"] or 0.0, est["ci_low"] or 0.0, est["ci_high"] or 0.0)
    return bar_chart([row], floor=min(0.0, body["lo"]), ceil=body["hi"]), (
        f"estimated mean, in [{body['lo']:g}, {body['hi']:g}]"
    )


def _distribution(body: dict[str, Any]) -> str:
    """A numeric metric's distribution with its quantiles marked ("" when it serves none)."""
    est = body.get("estimate") or {}
    rows = (est.get("distribution") or {}).get("buckets") or []
    if not rows:
        return ""
    buckets = [Bucket(b["low"], b["high"], b["value"] or 0.0, b["ci_low"] or 0.0,
                      b["ci_high"] or 0.0, b["smoothed"] or 0.0) for b in rows]
    marks = [Quantile(q["q"], q["value"], q["ci_low"], q["ci_high"])
             for q in est.get("quantiles") or []]
    conf = int(body["confidence"] * 100)
    caption = (f"distribution: share per bucket (band: {conf}% intervals; line: smoothed "
               "shape)" + (f"; dashed: quantiles over their {conf}% intervals" if marks else ""))
    return (
        f'<figure class="distribution-figure"><figcaption>{escape(caption)}</figcaption>'
        f"{distribution_chart(buckets, marks, title=caption)}</figure>"
        + _range_notes(marks, body["lo"], body["hi"], conf)
    )


def _range_notes(marks: list[Quantile], lo: float, hi: float, conf: int) -> str:
    """A note for each quantile whose interval runs to an end of the range: a reader
    would otherwise take that end for part of the estimate.

    >>> print(_range_notes([Quantile(0.99, 110.0, 80.0, 120.0)], 0.0, 120.0, 95))
    <p class="quantile-note">The 95% interval of p99 runs to the top of the range (120):
    at this epsilon and this many reports it cannot be placed closer; more reports or
    a larger epsilon narrow it.</p>
    >>> _range_notes([Quantile(0.5, 60.0, 50.0, 70.0)], 0.0, 120.0, 95)
    ''
    """
    notes = []
    for m in marks:
        ends = [name for name, at_end in (("bottom", m.ci_low <= lo), ("top", m.ci_high >= hi))
                if at_end]
        if ends:
            where = " and ".join(f"the {e} of the range ({lo if e == 'bottom' else hi:g})"
                                 for e in ends)
            notes.append(
                f'<p class="quantile-note">The {conf}% interval of p{m.q * 100:g} runs to '
                f"{where}:\nat this epsilon and this many reports it cannot be placed closer; "
                "more reports or\na larger epsilon narrow it.</p>")
    return "".join(notes)


def _series(body: dict[str, Any]) -> str:
    """The per-epoch chart (for a categorical metric: its largest value)."""
    series = body.get("series") or []
    if body["kind"] == "string":  # each epoch discovers its own list: the API has them
        return ""
    if len(series) < 2:
        return (
            f'<p class="series-note">One {escape(body["epoch_length"])} with data in the '
            "window: the series chart starts at two.</p>"
            if series
            else ""
        )
    pick = None
    what = "estimate"
    if body["kind"] == "categorical":
        est = body.get("estimate")
        values = est["values"] if est else []
        if values:
            pick = max(range(len(values)), key=lambda i: values[i]["value"] or 0.0)
            what = f"share of {values[pick]['category']!r}"
        else:
            pick = 0
            what = f"share of {body['domain'][0]!r}"
    points = []
    for s in series:
        label = _date(s["start_time"], body["epoch_length"])
        if s["suppressed"]:
            points.append(Point(s["epoch"], label, None, None, None, str(s["reason"])))
            continue
        e = s["estimate"]["values"][pick] if pick is not None else s["estimate"]
        note = f"{_fmt(e['value'])} [{_fmt(e['ci_low'])}, {_fmt(e['ci_high'])}], n={s['n']}"
        points.append(Point(s["epoch"], label, e["value"], e["ci_low"], e["ci_high"], note))
    suppressed = sum(1 for p in points if p.value is None)
    chart = series_chart(points, title=f"{what} per {body['epoch_length']}")
    marked = (
        f' <span class="suppressed-note">{suppressed} suppressed '
        f"{body['epoch_length']}(s) greyed</span>"
        if suppressed
        else ""
    )
    return (
        f'<figure class="series-figure"><figcaption>{escape(what)} per '
        f"{escape(body['epoch_length'])}, with its interval band{marked}</figcaption>"
        f"{chart}</figure>"
    )


def _target_label(target: object) -> str:
    """Whom the intervals are about (issue 40), for the facts line.

    >>> _target_label("population")
    ' about the population (the spread between people included)'
    """
    if target == "population":
        return " about the population (the spread between people included)"
    return " about the reporting users" if target == "reporters" else ""


def _section(body: dict[str, Any], extra: str = "") -> str:
    name = escape(body["metric"])
    lifetime = (
        f", lifetime ε∞ = {body['epsilon_inf']:g}" if body.get("epsilon_inf") is not None else ""
    )
    facts = (
        f'<p class="facts">{escape(body["kind"])} · mechanism {escape(body["mechanism"])} · '
        f'<span class="epsilon">ε = {body["epsilon"]:g} per report, '
        f"{escape(body['unit'])}</span>{escape(lifetime)} · "
        f'<span class="n">n = {body["n"]}</span> · {body["window"]["epochs"]} '
        f"{escape(body['epoch_length'])}(s) · {int(body['confidence'] * 100)}% intervals"
        f'<span class="target">{_target_label(body.get("target"))}</span></p>'
    )
    flags = body.get("poisoning") or {}
    if flags.get("flagged"):
        # The summary is a whole sentence, "Possible poisoning: ..." (aggregator.poisoning);
        # without one (a suppressed window, a string metric) the service's own signals say why.
        refused, z = int(flags.get("implausible_reports") or 0), flags.get("tally_sum_z")
        why = f"{refused} implausible report(s) refused" if refused or z is None else (
            f"set-bit total {float(z):+.1f} stderr from the honest law"
        )
        summary = flags.get("summary") or f"Possible poisoning: {why}."
        facts += f'<p class="poisoning">{escape(str(summary))}</p>'

    if body["suppressed"]:
        main = f'<p class="suppressed">Suppressed: {escape(str(body["reason"]))}.</p>'
    else:
        chart, caption = _bars(body)
        caption += f" (bar: unbiased estimate; line: {int(body['confidence'] * 100)}% interval)"
        main = (
            f'<figure class="bars-figure"><figcaption>{escape(caption)}</figcaption>'
            f"{chart}</figure>{_distribution(body)}"
        )
    return (
        f'<section class="metric" id="metric-{name}" data-metric="{name}">'
        f"<h2>{name} <small>v{body['version']}</small></h2>{facts}{main}{_series(body)}"
        f"{extra}</section>"
    )


def metrics_page(
    bodies: list[dict[str, Any]],
    *,
    controls: str = "",
    extras: Mapping[str, str] | None = None,
) -> str:
    """The whole dashboard: the controls (window picker, index), then one section per
    metric; ``extras`` adds HTML at the end of a metric's section (by metric name)."""
    extras = extras or {}
    sections = "".join(_section(b, extras.get(b["metric"], "")) for b in bodies) or (
        '<p class="empty">No metric is registered yet.</p>'
    )
    return (
        _HEAD.format(title="ldp-telemetry estimates")
        + '<header><h1>ldp-telemetry</h1><p class="lead">Estimates from locally '
        "randomised reports: unbiased values (they can be negative) with their intervals. "
        "No true value was ever collected.</p>"
        '<form method="post" action="/logout"><button type="submit">Sign out</button></form>'
        f"</header><main>{controls}{sections}</main></body></html>"
    )


def login_page(message: str) -> str:
    """The sign-in form: the analyst key is POSTed, never put in a URL by the form."""
    return (
        _HEAD.format(title="ldp-telemetry sign in")
        + f'<main class="login"><h1>ldp-telemetry</h1><p>{escape(message)}</p>'
        '<form method="post" action="/login"><label>Analyst key '
        '<input type="password" name="key" autocomplete="off" required></label>'
        '<button type="submit">Sign in</button></form></main></body></html>'
    )
