"""Server-side SVG charts: interval bars per value, and a series with a band.

No script and no network: the page inlines these SVGs and styles them with
the package's own stylesheet.  Each drawn value is one ``rect.bar`` and one
``line.ci`` (its interval); a series is a ``path.band`` (the intervals), a
``polyline.line`` and one ``circle.point`` per shown epoch, and each
suppressed epoch is a ``rect.suppressed-epoch``.

>>> svg = bar_chart([Bar("a", 0.5, 0.4, 0.6), Bar("b", -0.01, -0.05, 0.03)])
>>> svg.count('class="bar"'), svg.count('class="ci"')
(2, 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["Bar", "Point", "bar_chart", "series_chart"]

WIDTH = 760
LABEL_W = 170
NUM_W = 190
ROW_H = 22
PAD = 28


@dataclass(frozen=True)
class Bar:
    """One estimated value and its interval."""

    label: str
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Point:
    """One epoch of a series; ``value`` is None when the epoch is suppressed."""

    epoch: int
    label: str
    value: float | None
    low: float | None
    high: float | None
    note: str


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _extent(
    lows: Sequence[float], highs: Sequence[float], floor: float, ceil: float
) -> tuple[float, float]:
    lo = min([floor, *lows])
    hi = max([ceil, *highs])
    if hi - lo < 1e-12:
        hi = lo + 1.0
    return lo, hi


def bar_chart(bars: Sequence[Bar], *, floor: float = 0.0, ceil: float = 0.0, unit: str = "") -> str:
    """Horizontal bars from 0 (or ``floor``) to each value, with interval whiskers."""
    lo, hi = _extent([b.low for b in bars], [b.high for b in bars], floor, ceil)
    plot_w = WIDTH - LABEL_W - NUM_W

    def x(v: float) -> float:
        return LABEL_W + (v - lo) / (hi - lo) * plot_w

    base = x(min(max(0.0, lo), hi))
    height = PAD + ROW_H * len(bars) + PAD
    parts = [
        f'<svg class="chart bars" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="estimates with {escape(unit or "confidence")} intervals">'
    ]
    for i, b in enumerate(bars):
        y = PAD + i * ROW_H
        left, right = sorted((base, x(b.value)))
        tip = f"{b.label}: {_fmt(b.value)} [{_fmt(b.low)}, {_fmt(b.high)}]"
        parts.append(
            f'<g class="row"><title>{escape(tip)}</title>'
            f'<text class="label" x="{LABEL_W - 6}" y="{y + 15}" text-anchor="end">'
            f"{escape(b.label[:28])}</text>"
            f'<rect class="bar" x="{left:.1f}" y="{y + 4}" width="{max(right - left, 0.5):.1f}" '
            f'height="{ROW_H - 8}"></rect>'
            f'<line class="ci" x1="{x(b.low):.1f}" x2="{x(b.high):.1f}" y1="{y + 11}" '
            f'y2="{y + 11}"></line>'
            f'<text class="num" x="{WIDTH - 4}" y="{y + 15}" text-anchor="end">'
            f"{escape(_fmt(b.value))}  [{escape(_fmt(b.low))}, {escape(_fmt(b.high))}]"
            "</text></g>"
        )
    axis_y = PAD + ROW_H * len(bars) + 4
    parts.append(
        f'<line class="axis" x1="{base:.1f}" x2="{base:.1f}" y1="{PAD - 4}" y2="{axis_y}"></line>'
        f'<text class="tick" x="{x(lo):.1f}" y="{axis_y + 14}">{escape(_fmt(lo))}</text>'
        + (
            f'<text class="tick" x="{base:.1f}" y="{axis_y + 14}" text-anchor="middle">0</text>'
            if lo < 0 < hi and x(0) - x(lo) > 40
            else ""
        )
        + f'<text class="tick" x="{x(hi):.1f}" y="{axis_y + 14}" text-anchor="end">'
        f"{escape(_fmt(hi))}</text></svg>"
    )
    return "".join(parts)


def series_chart(
    points: Sequence[Point], *, title: str, floor: float | None = None, ceil: float | None = None
) -> str:
    """A line over epochs with its interval band; suppressed epochs greyed out."""
    shown = [p for p in points if p.value is not None]
    lows = [p.low for p in shown if p.low is not None]
    highs = [p.high for p in shown if p.high is not None]
    lo, hi = _extent(
        lows,
        highs,
        min(lows, default=0.0) if floor is None else floor,
        max(highs, default=1.0) if ceil is None else ceil,
    )
    height = 220
    left, right, top, bottom = 60.0, WIDTH - 16.0, 20.0, height - 36.0
    count = max(len(points), 1)
    step = (right - left) / count

    def x(i: int) -> float:
        return left + step * (i + 0.5)

    def y(v: float) -> float:
        return bottom - (v - lo) / (hi - lo) * (bottom - top)

    parts = [
        f'<svg class="chart series" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}">'
        f'<text class="tick" x="{left - 6}" y="{top + 4}" text-anchor="end">{_fmt(hi)}</text>'
        f'<text class="tick" x="{left - 6}" y="{bottom}" text-anchor="end">{_fmt(lo)}</text>'
        f'<line class="axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"></line>'
    ]
    for i, p in enumerate(points):
        if p.value is None:
            parts.append(
                f'<rect class="suppressed-epoch" x="{x(i) - step / 2:.1f}" y="{top}" '
                f'width="{step:.1f}" height="{bottom - top}"><title>'
                f"{escape(p.label)}: {escape(p.note)}</title></rect>"
            )
    # The band: one polygon per run of consecutive shown epochs.
    run: list[tuple[int, Point]] = []
    runs: list[list[tuple[int, Point]]] = []
    for i, p in enumerate(points):
        if p.value is None:
            if run:
                runs.append(run)
            run = []
        else:
            run.append((i, p))
    if run:
        runs.append(run)
    for segment in runs:
        upper = [f"{x(i):.1f},{y(p.high if p.high is not None else 0.0):.1f}" for i, p in segment]
        lower = [
            f"{x(i):.1f},{y(p.low if p.low is not None else 0.0):.1f}" for i, p in reversed(segment)
        ]
        if len(segment) == 1:
            i, p = segment[0]
            parts.append(
                f'<line class="ci" x1="{x(i):.1f}" x2="{x(i):.1f}" '
                f'y1="{y(p.low or 0.0):.1f}" y2="{y(p.high or 0.0):.1f}"></line>'
            )
        else:
            parts.append(f'<path class="band" d="M{" L".join(upper + lower)} Z"></path>')
        line = " ".join(f"{x(i):.1f},{y(p.value or 0.0):.1f}" for i, p in segment)
        parts.append(f'<polyline class="line" points="{line}"></polyline>')
    for i, p in enumerate(points):
        if p.value is not None:
            parts.append(
                f'<circle class="point" cx="{x(i):.1f}" cy="{y(p.value):.1f}" r="3">'
                f"<title>{escape(p.label)}: {escape(p.note)}</title></circle>"
            )
    ticks = sorted({0, len(points) - 1, len(points) // 2}) if points else []
    for i in ticks:
        parts.append(
            f'<text class="tick" x="{x(i):.1f}" y="{bottom + 16}" text-anchor="middle">'
            f"{escape(points[i].label)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
