"""``ldp plot``: the estimate with error bars, and its series over epochs (PNG).

matplotlib with the Agg backend (no display).  Left: one bar per value (or the
scalar) with its interval as an error bar.  Right: the estimate per epoch
with its interval band (for a categorical metric, its largest value);
suppressed epochs are shaded and labelled.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["plot_estimate"]


def _day(seconds: int, length: str) -> str:
    return time.strftime("%m-%d" if length == "day" else "%m-%d %Hh", time.gmtime(seconds))


def plot_estimate(body: dict[str, Any], output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
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
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)
