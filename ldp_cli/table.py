"""Readable text tables of an estimate response (GET /v1/estimates/{name}).

>>> body = {"metric": "crashed", "version": 1, "kind": "boolean", "mechanism": "binary_rr",
...     "epsilon": 1.0, "unit": "per device, per metric, per day", "n": 5000,
...     "window": {"epochs": 1, "first_epoch": 20400, "last_epoch": 20400},
...     "confidence": 0.95, "suppressed": False, "reason": None, "epoch_length": "day",
...     "estimate": {"value": 0.31, "stderr": 0.01, "ci_low": 0.29, "ci_high": 0.33}}
>>> print(format_estimate(body).splitlines()[-1])
proportion of true          0.3100    0.0100  [  0.2900,   0.3300]
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "format_distribution",
    "format_estimate",
    "format_series",
    "header_lines",
    "window_text",
]


def _pct(confidence: float) -> str:
    return f"{confidence * 100:g}%"


def _utc(epoch: int, body: Mapping[str, Any]) -> str:
    """The UTC start of an epoch of the body's metric.

    >>> _utc(20400, {"epoch_seconds": 86400, "epoch_length": "day"})
    '2025-11-08'
    """
    fmt = "%Y-%m-%d" if body.get("epoch_length") == "day" else "%Y-%m-%d %H:00"
    return time.strftime(fmt, time.gmtime(epoch * int(body["epoch_seconds"])))


def _count(k: int, unit: str) -> str:
    return f"{k} {unit}" + ("" if k == 1 else "s")


def _span(first: int, last: int, body: Mapping[str, Any]) -> str:
    """Epochs ``first..last`` (inclusive), with their UTC dates when the body has them."""
    span = f"epochs {first}..{last}"
    if body.get("epoch_seconds"):
        start, end = _utc(first, body), _utc(last, body)
        span += f", {start}" + ("" if end == start else f" to {end}") + " UTC"
    return span


def window_text(body: Mapping[str, Any], now: float | None = None) -> str:
    r"""The window asked (from the body's ``start``/``end``; an open end runs to the
    epoch of ``now``), then the epochs in it that hold reports.

    >>> body = {"epoch_length": "day", "epoch_seconds": 86400,
    ...         "window": {"start": 18262, "end": 18292, "epochs": 0}}
    >>> window_text(body)
    'window: 30 days (epochs 18262..18291, 2020-01-01 to 2020-01-30 UTC), no reports in it'
    >>> body["window"] = {"start": 18262, "end": None, "epochs": 1,
    ...                   "first_epoch": 18263, "last_epoch": 18263}
    >>> print(window_text(body, now=18268 * 86400.0).replace("), ", "),\n"))
    window: 7 days (epochs 18262..18268, 2020-01-01 to 2020-01-07 UTC),
    1 day with reports (epochs 18263..18263, 2020-01-02 UTC)
    >>> window_text({"epoch_length": "hour", "window": {"epochs": 0}})
    'window: every hour with reports: none yet'
    """
    window = body.get("window") or {}
    unit = body.get("epoch_length") or "epoch"
    held = int(window.get("epochs") or 0)
    span = (_span(window["first_epoch"], window["last_epoch"], body)
            if held and window.get("first_epoch") is not None else None)
    start, end = window.get("start"), window.get("end")
    if start is not None:
        seconds = body.get("epoch_seconds")
        last = end - 1 if end is not None else (
            int((time.time() if now is None else now) // seconds) if seconds else None)
        asked = (f"{_count(last - start + 1, unit)} ({_span(start, last, body)})"
                 if last is not None and last >= start else f"from epoch {start} on")
    elif end is not None:
        before = f"{_utc(end, body)} UTC" if body.get("epoch_seconds") else f"epoch {end}"
        asked = f"every {unit} before {before}"
    else:
        return f"window: every {unit} with reports: " + (
            f"{_count(held, unit)} ({span})" if span else "none yet")
    return f"window: {asked}, " + (f"{_count(held, unit)} with reports ({span})" if span
                                     else "no reports in it")


def header_lines(body: Mapping[str, Any]) -> list[str]:
    """Metric, mechanism, epsilon with its unit, window and n."""
    lifetime = f"; lifetime eps_inf = {body['epsilon_inf']:g}" if body.get("epsilon_inf") else ""
    return [
        f"{body['metric']} v{body['version']}: {body['kind']}, mechanism {body['mechanism']}, "
        f"epsilon = {body['epsilon']:g} per report, {body['unit']}{lifetime}",
        f"{window_text(body)}; n = {body['n']} reports, {_pct(body['confidence'])} intervals"
        + (f" about the {body['target']}" if body.get("target") else ""),
    ]


def _has_consistent(body: Mapping[str, Any]) -> bool:
    """True when the estimate carries consistent values (``--consistent``)."""
    values = (body.get("estimate") or {}).get("values") or []
    return any("consistent" in v for v in values)


def _consistent_cell(e: Mapping[str, Any]) -> str:
    value = e.get("consistent")
    return f"{value:>10.4f}" if value is not None else f"{'–':>10}"


def format_estimate(
    body: Mapping[str, Any],
    truth: Mapping[str, float] | float | None = None,
    limit: int | None = None,
    values: Sequence[float] | None = None,
) -> str:
    """The header, then one row per value (or the scalar), with the truth if known;
    a distribution metric's quantiles and buckets after (beside the true ``values``)."""
    lines = header_lines(body)
    if body["suppressed"]:
        lines.append(f"SUPPRESSED: {body['reason']}")
        return "\n".join(lines)
    conf = _pct(body["confidence"])
    with_truth = truth is not None
    with_consistent = _has_consistent(body)
    head = f"{'value':<24} {'estimate':>9} {'stderr':>9}  {conf + ' interval':<21}"
    head += f" {'consistent':>10}" if with_consistent else ""
    lines.append(head + ("     truth  inside" if with_truth else ""))
    rows: Sequence[tuple[str, Mapping[str, Any], float | None]]
    est = body["estimate"]
    if body["kind"] == "string":
        return "\n".join(lines + discovered_lines(est, truth))
    if body["kind"] == "categorical":
        shares = truth if isinstance(truth, Mapping) else {}
        rows = [(v["category"], v, shares.get(v["category"])) for v in est["values"]]
        if limit is not None and len(rows) > limit:
            rows = sorted(rows, key=lambda r: -float(r[1]["value"] or 0))[:limit]
    else:
        label = "mean" if body["kind"] == "numeric" else "proportion of true"
        rows = [(label, est, truth if isinstance(truth, int | float) else None)]
    for label, e, true in rows:
        line = (
            f"{label[:24]:<24} {e['value']:>9.4f} {e['stderr']:>9.4f}  "
            f"[{e['ci_low']:>8.4f}, {e['ci_high']:>8.4f}]"
        )
        if with_consistent:
            line += f" {_consistent_cell(e)}"
        if with_truth and true is not None:
            inside = "yes" if e["ci_low"] <= true <= e["ci_high"] else "NO"
            line += f" {true:>9.4f}  {inside}"
        lines.append(line)
    if limit is not None and body["kind"] == "categorical" and len(est["values"]) > limit:
        lines.append(f"... {len(est['values']) - limit} more values (ldp estimate shows all)")
    extra = format_distribution(body, values)
    return "\n".join(lines + ([extra] if extra else []))


def _truth_quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of known values (linear interpolation, as numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


def format_distribution(body: Mapping[str, Any], values: Sequence[float] | None = None) -> str:
    """A numeric metric's quantiles and histogram (when it serves them), beside the
    truth when the true ``values`` are known (the demo); "" when there are none.

    >>> body = {"confidence": 0.95, "estimate": {
    ...     "quantiles": [{"q": 0.5, "value": 12.0, "ci_low": 10.0, "ci_high": 14.5}],
    ...     "distribution": {"buckets": [{"low": 0.0, "high": 60.0, "value": 0.8,
    ...         "ci_low": 0.7, "ci_high": 0.9, "smoothed": 0.78}]}}}
    >>> print(format_distribution(body, values=[11.0, 13.0, 70.0]))
      quantile    estimate  95% interval              truth  inside
      p50           12.000  [   10.000,    14.500]   13.000  yes
      bucket                 share  95% interval        truth  smoothed shape
         0.000 -    60.000   0.800  [ 0.700,  0.900]   0.667  ##############################
    """
    est = body.get("estimate") or {}
    conf = _pct(body["confidence"])
    lines: list[str] = []
    known = values is not None and len(values) > 0
    if est.get("quantiles"):
        lines.append(f"  {'quantile':<10}{'estimate':>10}  {conf + ' interval':<24}"
                     + ("  truth  inside" if known else ""))
        for row in est["quantiles"]:
            line = (f"  {'p' + format(row['q'] * 100, 'g'):<10}{row['value']:>10.3f}  "
                    f"[{row['ci_low']:>9.3f}, {row['ci_high']:>9.3f}]")
            if known:
                assert values is not None
                true = _truth_quantile(values, row["q"])
                inside = "yes" if row["ci_low"] <= true <= row["ci_high"] else "NO"
                line += f" {true:>8.3f}  {inside}"
            lines.append(line)
    if (est.get("distribution") or {}).get("buckets"):
        buckets = est["distribution"]["buckets"]
        lines.append(f"  {'bucket':<21}{'share':>7}  {conf + ' interval':<18}"
                     + (f"{'truth':>7}" if known else "") + "  smoothed shape")
        top = max(max(b["smoothed"] for b in buckets), 1e-12)
        for b in buckets:
            line = (f"  {b['low']:>8.3f} - {b['high']:>9.3f} {b['value']:>7.3f}  "
                    f"[{b['ci_low']:>6.3f}, {b['ci_high']:>6.3f}]")
            if known:
                assert values is not None
                last = b["high"] == buckets[-1]["high"]
                share = sum(b["low"] <= v < b["high"] or (last and v == b["high"])
                            for v in values) / len(values)
                line += f" {share:>7.3f}"
            lines.append(line + "  " + "#" * round(30 * b["smoothed"] / top))
    return "\n".join(lines)


def discovered_lines(est: Mapping[str, Any], truth: object = None) -> list[str]:
    r"""A string metric's answer: the discovered strings (a ``?`` marks one listed below
    the discovery cut), then the detection threshold: what it could not see.

    >>> est = {"values": [{"category": "hello", "value": 0.2, "stderr": 0.01,
    ...     "ci_low": 0.18, "ci_high": 0.22, "confident": True}],
    ...     "detection_threshold": 0.0093, "detection_threshold_reports": 930.0,
    ...     "detection_power": 0.95}
    >>> print("\n".join(discovered_lines(est)))
      hello                     0.2000    0.0100  [  0.1800,   0.2200]
    not seen: a string below 0.0093 of the reports (930 reports) is found with probability < 95%
    """
    shares = truth if isinstance(truth, Mapping) else {}
    lines = []
    for v in est["values"]:
        mark = " " if v.get("confident") else "?"
        line = (f"{mark} {v['category'][:22]:<22} {v['value']:>9.4f} {v['stderr']:>9.4f}  "
                f"[{v['ci_low']:>8.4f}, {v['ci_high']:>8.4f}]")
        true = shares.get(v["category"])
        if true is not None:
            inside = "yes" if v["ci_low"] <= true <= v["ci_high"] else "NO"
            line += f" {true:>9.4f}  {inside}"
        lines.append(line)
    if not est["values"]:
        lines.append("(no string discovered)")
    if any(not v.get("confident") for v in est["values"]):
        lines.append("? listed to fill the top, below the discovery cut (may be noise)")
    lines.append(
        f"not seen: a string below {est['detection_threshold']:.4f} of the reports "
        f"({est['detection_threshold_reports']:,.0f} reports) is found with probability "
        f"< {est['detection_power']:.0%}"
    )
    return lines


def format_series(body: Mapping[str, Any]) -> str:
    """One line per epoch (for a categorical metric: its largest value in the window)."""
    series = body.get("series") or []
    pick: int | None = None
    what = "estimate"
    if body["kind"] == "string":
        what = "the most common string discovered"
    if body["kind"] == "categorical":
        values = (body.get("estimate") or {}).get("values") or []
        pick = max(range(len(values)), key=lambda i: values[i]["value"]) if values else 0
        what = f"share of {body['domain'][pick]!r}"
    fmt = "%Y-%m-%d" if body.get("epoch_length") == "day" else "%Y-%m-%d %H:00"
    lines = [
        f"per {body.get('epoch_length', 'epoch')}: {what}",
        f"{'epoch':>7} {'start (UTC)':<16} {'n':>8}  {'estimate':>9}  interval",
    ]
    for p in series:
        start = time.strftime(fmt, time.gmtime(p["start_time"]))
        head = f"{p['epoch']:>7} {start:<16} {p['n']:>8}  "
        if p["suppressed"]:
            lines.append(head + f"suppressed: {p['reason']}")
            continue
        if body["kind"] == "string":
            top = p["estimate"]["values"][:1]
            lines.append(head + (f"{top[0]['value']:>9.4f}  {top[0]['category']!r}" if top
                                 else "(none)"))
            continue
        e = p["estimate"]["values"][pick] if pick is not None else p["estimate"]
        lines.append(head + f"{e['value']:>9.4f}  [{e['ci_low']:.4f}, {e['ci_high']:.4f}]")
    return "\n".join(lines)
