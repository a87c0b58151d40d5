"""``ldp plot``: the estimate with error bars, and its series over epochs (PNG).

matplotlib with the Agg backend (no display).  Left: one bar per value (or the
scalar) with its interval as an error bar.  Right: the estimate per epoch
with its interval band (for a categorical metric, its largest value);
suppressed epochs are shaded and labelled.  A numeric metric that serves a
distribution or quantiles adds a panel below, as the dashboard draws it
(``aggregator.charts.distribution_chart``): each bucket's share with its
interval band, the served shape as a step line, and each quantile as a line
over its interval.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["figure_of", "plot_estimate"]


def _day(seconds: int, length: str) -> str:
    return time.strftime("%m-%d" if length == "day" else "%m-%d %Hh", time.gmtime(seconds))


def plot_estimate(body: dict[str, Any], output: Path) -> None:
    """Write the PNG of ``body`` (GET /v1/estimates/{name} with its series)."""
    import matplotlib.pyplot as plt

    fig = figure_of(body)
    fig.savefig(output, dpi=110)
    plt.close(fig)


def _distribution(ax: Any, est: dict[str, Any], conf: str) -> None:
    """Buckets (share, interval band, served shape) and the quantiles over their intervals."""
    buckets = (est.get("distribution") or {}).get("buckets") or []
    quantiles = est.get("quantiles") or []
    if buckets:
        edges = [b["low"] for b in buckets] + [buckets[-1]["high"]]

        def stepped(key: str) -> list[float]:
            return [b[key] for b in buckets] + [buckets[-1][key]]

        ax.fill_between(edges, stepped("ci_low"), stepped("ci_high"), step="post",
                        color="#8fb3e8", alpha=0.5, label=f"share per bucket, {conf} interval")
        ax.step(edges, stepped("value"), where="post", color="#2b4c9b", linewidth=0.8,
                label="unbiased share")
        ax.step(edges, stepped("smoothed"), where="post", color="#1d2430", linewidth=1.6,
                label="served shape")
        ax.axhline(0, color="#7a8597", linewidth=0.8)
        ax.set_xlim(edges[0], edges[-1])
    for q in quantiles:
        ax.axvspan(q["ci_low"], q["ci_high"], color="#f0c36d", alpha=0.35)
        ax.axvline(q["value"], color="#b5651d", linewidth=1.2)
        ax.annotate(f"p{q['q'] * 100:g}", (q["value"], 1.0), xycoords=("data", "axes fraction"),
                    ha="center", va="bottom", fontsize=8)
    if quantiles:
        ax.plot([], [], "s", color="#f0c36d", alpha=0.6, label=f"quantile, {conf} interval")
    ax.set_ylabel("share of reports")
    ax.legend(fontsize=8, loc="upper right")


def figure_of(body: dict[str, Any]) -> Any:
    """The matplotlib Figure of an estimate: 2 panels, 3 with a distribution."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    est_body = body.get("estimate") or {}
    shaped = not body["suppressed"] and ("distribution" in est_body or "quantiles" in est_body)
    fig = plt.figure(figsize=(13, 9 if shaped else 5))
    grid = fig.add_gridspec(2 if shaped else 1, 2, width_ratios=[3, 2])
    left, right = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    title = (
        f"{body['metric']} v{body['version']} - {body['mechanism']}, "
        f"eps = {body['epsilon']:g} per report, {body['unit']}"
    )
    fig.suptitle(title, fontsize=11)
    conf = f"{body['confidence'] * 100:g}%"
    pick: int | None = None
    if body["suppressed"]:
        left.text(
            0.5,
            0.5,
            f"suppressed:\n{body['reason']}",
            ha="center",
            va="center",
            transform=left.transAxes,
        )
        left.set_axis_off()
    else:
        est = body["estimate"]
        rows = (
            est["values"]
            if body["kind"] == "categorical"
            else [{"category": "mean" if body["kind"] == "numeric" else "proportion true", **est}]
        )
        labels = [r["category"] for r in rows]
        values = [r["value"] for r in rows]
        errors = [
            [r["value"] - r["ci_low"] for r in rows],
            [r["ci_high"] - r["value"] for r in rows],
        ]
        left.bar(
            range(len(rows)),
            values,
            yerr=errors,
            capsize=3,
            color="#8fb3e8",
            edgecolor="#2b4c9b",
            ecolor="#1d2430",
        )
        left.axhline(0, color="#7a8597", linewidth=0.8)
        left.set_xticks(
            range(len(rows)),
            labels,
            rotation=60 if len(rows) > 6 else 0,
            ha="right" if len(rows) > 6 else "center",
            fontsize=8,
        )
        left.set_ylabel("estimated share" if body["kind"] != "numeric" else "estimated mean")
        left.set_title(f"n = {body['n']:,}, {conf} intervals (unbiased; may be < 0)", fontsize=9)
        if body["kind"] == "categorical":
            pick = max(range(len(rows)), key=lambda i: values[i])
    series = body.get("series") or []
    nan = float("nan")
    ys, lows, highs, shaded = [], [], [], []
    for i, point in enumerate(series):
        if point["suppressed"]:
            shaded.append(i)
            ys.append(nan)
            lows.append(nan)
            highs.append(nan)
            continue
        e = (
            point["estimate"]["values"][pick or 0]
            if body["kind"] == "categorical"
            else point["estimate"]
        )
        ys.append(e["value"])
        lows.append(e["ci_low"])
        highs.append(e["ci_high"])
    if len(shaded) < len(series):
        xs = list(range(len(series)))
        # NaN at a suppressed epoch breaks the band and the line there.
        right.fill_between(xs, lows, highs, color="#8fb3e8", alpha=0.5, label=f"{conf} interval")
        right.errorbar(
            xs,
            ys,
            yerr=[
                [y - lo for y, lo in zip(ys, lows, strict=True)],
                [hi - y for y, hi in zip(ys, highs, strict=True)],
            ],
            fmt="o-",
            color="#2b4c9b",
            ecolor="#1d2430",
            capsize=3,
            label="estimate",
        )
    for i in shaded:
        right.axvspan(i - 0.5, i + 0.5, color="#f0c36d", alpha=0.35)
    if shaded:
        right.plot([], [], "s", color="#f0c36d", alpha=0.6, label="suppressed (n < min)")
    right.set_xticks(
        range(len(series)),
        [_day(p["start_time"], body["epoch_length"]) for p in series],
        rotation=45,
        fontsize=8,
    )
    what = "estimate"
    if pick is not None:
        what = f"share of {body['estimate']['values'][pick]['category']!r}"
    right.set_title(f"{what} per {body['epoch_length']}", fontsize=9)
    if series:
        right.legend(fontsize=8)
    if shaped:
        _distribution(fig.add_subplot(grid[1, :]), est_body, conf)
    fig.tight_layout()
    return fig
