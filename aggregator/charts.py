"""Server-side SVG charts: interval bars per value, and a series with a band.

No script and no network: the page inlines these SVGs and styles them with
the package's own stylesheet.  Each drawn value is one ``rect.bar`` and one
``line.ci`` (its interval); a series is a ``path.band`` (the intervals), a
``polyline.line`` and one ``circle.point`` per shown epoch, and each
suppressed epoch is a ``rect.suppressed-epoch``.  A distribution is a
``path.band`` (each bucket's interval), a ``polyline.line`` (the smoothed
shape) and, per quantile, a ``line.quantile`` over a ``rect.quantile-ci``.

>>> svg = bar_chart([Bar("a", 0.5, 0.4, 0.6), Bar("b", -0.01, -0.05, 0.03)])
>>> svg.count('class="bar"'), svg.count('class="ci"')
(2, 2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = [
    "Bar",
    "Bucket",
    "Point",
    "Quantile",
    "bar_chart",
    "distribution_chart",
    "nice_ticks",
    "series_chart",
    "tick_label",
]

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


@dataclass(frozen=True)
class Bucket:
    """One histogram bucket [low, high): its share, interval and smoothed share."""

    low: float
    high: float
    value: float
    ci_low: float
    ci_high: float
    smoothed: float


@dataclass(frozen=True)
class Quantile:
    """One estimated quantile q with its interval."""

    q: float
    value: float
    ci_low: float
    ci_high: float


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


def _nice(x: float, round_: bool) -> float:
    """A "nice" number (1, 2, 2.5, 5 times a power of ten) near ``x`` (Heckbert 1990)."""
    exp = math.floor(math.log10(x))
    f = x / 10**exp
    if round_:
        nf = 1.0 if f < 1.5 else 2.0 if f < 2.25 else 2.5 if f < 3.5 else 5.0 if f < 7.5 else 10.0
    else:
        nf = 1.0 if f <= 1 else 2.0 if f <= 2 else 2.5 if f <= 2.5 else 5.0 if f <= 5 else 10.0
    return float(nf * 10.0**exp)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round axis ticks covering [lo, hi]: the first is <= lo, the last >= hi.

    >>> nice_ticks(-0.00129, 0.468)
    [-0.1, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    >>> nice_ticks(0.356, 0.425)
    [0.35, 0.375, 0.4, 0.425]
    >>> nice_ticks(0.0, 1.0)
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    if not hi > lo:
        hi = lo + 1.0
    step = _nice(_nice(hi - lo, False) / max(count - 1, 1), True)
    first = math.floor(lo / step + 1e-9)
    last = math.ceil(hi / step - 1e-9)
    digits = _decimals(step) + 1
    return [round(i * step, digits) + 0.0 for i in range(first, last + 1)]


def tick_label(value: float, ticks: Sequence[float]) -> str:
    """A tick's text with as many decimals as the step needs.

    >>> tick_label(0.1, [0.0, 0.1]), tick_label(20.0, [0.0, 20.0]), tick_label(0.25, [0, 0.25])
    ('0.1', '20', '0.25')
    """
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    return f"{value:.{_decimals(step)}f}" if value else "0"


def _decimals(step: float) -> int:
    """Decimals that write every multiple of ``step`` exactly (at most 10)."""
    digits = 0
    while digits < 10 and abs(round(step, digits) - step) > 1e-9 * step:
        digits += 1
    return digits


def _svg_open(kind: str, height: float, label: str) -> str:
    """An SVG that fills its container's width and keeps its aspect (viewBox)."""
    return (
        f'<svg class="chart {kind}" xmlns="http://www.w3.org/2000/svg" width="100%" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" preserveAspectRatio="xMinYMin meet" role="img" '
        f'aria-label="{escape(label)}">'
    )


def bar_chart(bars: Sequence[Bar], *, floor: float = 0.0, ceil: float = 0.0, unit: str = "") -> str:
    """Horizontal bars from 0 (or ``floor``) to each value, with interval whiskers.

    The value axis runs between round ticks (``nice_ticks``) with light grid lines.
    """
    ticks = nice_ticks(*_extent([b.low for b in bars], [b.high for b in bars], floor, ceil))
    lo, hi = ticks[0], ticks[-1]
    plot_w = WIDTH - LABEL_W - NUM_W

    def x(v: float) -> float:
        return LABEL_W + (v - lo) / (hi - lo) * plot_w

    base = x(min(max(0.0, lo), hi))
    axis_y = PAD + ROW_H * len(bars) + 4
    height = axis_y + PAD
    parts = [_svg_open("bars", height, f"estimates with {unit or 'confidence'} intervals")]
    for t in ticks:
        parts.append(
            f'<line class="grid" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{PAD - 4}" '
            f'y2="{axis_y}"></line>'
            f'<text class="tick" x="{x(t):.1f}" y="{axis_y + 16}" text-anchor="middle">'
            f"{tick_label(t, ticks)}</text>"
        )
    for i, b in enumerate(bars):
        y = PAD + i * ROW_H
        left, right = sorted((base, x(b.value)))
        tip = f"{b.label}: {_fmt(b.value)} [{_fmt(b.low)}, {_fmt(b.high)}]"
        parts.append(
            f'<g class="row"><title>{escape(tip)}</title>'
            f'<text class="label" x="{LABEL_W - 8}" y="{y + 16}" text-anchor="end">'
            f"{escape(b.label[:28])}</text>"
            f'<rect class="bar" x="{left:.1f}" y="{y + 5}" width="{max(right - left, 0.5):.1f}" '
            f'height="{ROW_H - 10}"></rect>'
            f'<line class="ci" x1="{x(b.low):.1f}" x2="{x(b.high):.1f}" y1="{y + 11}" '
            f'y2="{y + 11}"></line>'
            f'<text class="num" x="{WIDTH - 4}" y="{y + 16}" text-anchor="end">'
            f"{escape(_fmt(b.value))}  [{escape(_fmt(b.low))}, {escape(_fmt(b.high))}]"
            "</text></g>"
        )
    parts.append(
        f'<line class="axis" x1="{base:.1f}" x2="{base:.1f}" y1="{PAD - 4}" y2="{axis_y}"></line>'
        f'<line class="axis" x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="{axis_y}" y2="{axis_y}">'
        "</line></svg>"
    )
    return "".join(parts)


def _runs(points: Sequence[Point]) -> list[list[tuple[int, Point]]]:
    """Runs of consecutive shown epochs (a suppressed epoch breaks the line)."""
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
    return runs


def series_chart(
    points: Sequence[Point], *, title: str, floor: float | None = None, ceil: float | None = None
) -> str:
    """A line over epochs with its interval band; suppressed epochs greyed out.

    The value axis starts at ``floor`` (default: 0, or the lowest interval end
    when it is negative) and runs between round ticks with grid lines.
    """
    shown = [p for p in points if p.value is not None]
    lows = [p.low for p in shown if p.low is not None]
    highs = [p.high for p in shown if p.high is not None]
    ticks = nice_ticks(
        *_extent(
            lows,
            highs,
            min([0.0, *lows]) if floor is None else floor,
            max(highs, default=1.0) if ceil is None else ceil,
        )
    )
    lo, hi = ticks[0], ticks[-1]
    height = 240
    left, right, top, bottom = 64.0, WIDTH - 16.0, 16.0, height - 40.0
    count = max(len(points), 1)
    step = (right - left) / count

    def x(i: int) -> float:
        return left + step * (i + 0.5)

    def y(v: float) -> float:
        return bottom - (v - lo) / (hi - lo) * (bottom - top)

    parts = [_svg_open("series", height, title)]
    for t in ticks:
        parts.append(
            f'<line class="grid" x1="{left}" x2="{right}" y1="{y(t):.1f}" y2="{y(t):.1f}"></line>'
            f'<text class="tick" x="{left - 8}" y="{y(t) + 4:.1f}" text-anchor="end">'
            f"{tick_label(t, ticks)}</text>"
        )
    parts.append(f'<line class="axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"></line>')
    for i, p in enumerate(points):
        if p.value is None:
            parts.append(
                f'<rect class="suppressed-epoch" x="{x(i) - step / 2:.1f}" y="{top}" '
                f'width="{step:.1f}" height="{bottom - top}"><title>'
                f"{escape(p.label)}: {escape(p.note)}</title></rect>"
            )
    for segment in _runs(points):
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
                f'<circle class="point" cx="{x(i):.1f}" cy="{y(p.value):.1f}" r="3.5">'
                f"<title>{escape(p.label)}: {escape(p.note)}</title></circle>"
            )
    labels = min(len(points), 7)
    shown_at = sorted({round(k * (len(points) - 1) / max(labels - 1, 1)) for k in range(labels)})
    for i in shown_at if points else []:
        parts.append(
            f'<text class="tick" x="{x(i):.1f}" y="{bottom + 18}" text-anchor="middle">'
            f"{escape(points[i].label)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def distribution_chart(buckets: Sequence[Bucket], quantiles: Sequence[Quantile],
                       *, title: str) -> str:
    """The share per bucket over the value axis: the interval band, the smoothed shape
    as a step line, and each quantile as a marked line over its interval.

    >>> svg = distribution_chart([Bucket(0, 5, 0.3, 0.2, 0.4, 0.31), Bucket(5, 10, 0.7, 0.6,
    ...     0.8, 0.69)], [Quantile(0.5, 6.1, 5.5, 6.8)], title="minutes")
    >>> svg.count('class="band"'), svg.count('class="quantile"'), svg.count('class="quantile-ci"')
    (1, 1, 1)
    """
    lo, hi = buckets[0].low, buckets[-1].high
    ticks_y = nice_ticks(0.0, max([b.ci_high for b in buckets] + [b.smoothed for b in buckets]))
    ticks_x = nice_ticks(lo, hi, 7)
    top_y = ticks_y[-1]
    height = 260
    left, right, top, bottom = 64.0, WIDTH - 16.0, 24.0, height - 40.0

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * (right - left)

    def y(v: float) -> float:
        return bottom - (min(max(v, 0.0), top_y) / top_y) * (bottom - top)

    parts = [_svg_open("distribution", height, title)]
    for t in ticks_y:
        parts.append(
            f'<line class="grid" x1="{left}" x2="{right}" y1="{y(t):.1f}" y2="{y(t):.1f}"></line>'
            f'<text class="tick" x="{left - 8}" y="{y(t) + 4:.1f}" text-anchor="end">'
            f"{tick_label(t, ticks_y)}</text>"
        )
    for t in ticks_x:
        if lo <= t <= hi:
            parts.append(
                f'<text class="tick" x="{x(t):.1f}" y="{bottom + 18}" text-anchor="middle">'
                f"{tick_label(t, ticks_x)}</text>"
            )
    for q in quantiles:
        tip = f"p{q.q * 100:g}: {_fmt(q.value)} [{_fmt(q.ci_low)}, {_fmt(q.ci_high)}]"
        parts.append(
            f'<g class="quantile-mark"><title>{escape(tip)}</title>'
            f'<rect class="quantile-ci" x="{x(q.ci_low):.1f}" y="{top}" '
            f'width="{max(x(q.ci_high) - x(q.ci_low), 1.0):.1f}" height="{bottom - top}"></rect>'
            f'<line class="quantile" x1="{x(q.value):.1f}" x2="{x(q.value):.1f}" y1="{top}" '
            f'y2="{bottom}"></line>'
            f'<text class="tick" x="{x(q.value):.1f}" y="{top - 6}" text-anchor="middle">'
            f"p{q.q * 100:g}</text></g>"
        )
    upper = [f"{x(v):.1f},{y(b.ci_high):.1f}" for b in buckets for v in (b.low, b.high)]
    lower = [f"{x(v):.1f},{y(b.ci_low):.1f}" for b in reversed(buckets) for v in (b.high, b.low)]
    parts.append(f'<path class="band" d="M{" L".join(upper + lower)} Z"></path>')
    line = " ".join(f"{x(v):.1f},{y(b.smoothed):.1f}" for b in buckets for v in (b.low, b.high))
    parts.append(f'<polyline class="line" points="{line}"></polyline>')
    for b in buckets:
        tip = (f"[{_fmt(b.low)}, {_fmt(b.high)}): {_fmt(b.value)} "
               f"[{_fmt(b.ci_low)}, {_fmt(b.ci_high)}], smoothed {_fmt(b.smoothed)}")
        parts.append(
            f'<rect class="bucket" x="{x(b.low):.1f}" y="{top}" width="{x(b.high) - x(b.low):.1f}" '
            f'height="{bottom - top}"><title>{escape(tip)}</title></rect>'
        )
    parts.append(f'<line class="axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"></line>'
                 "</svg>")
    return "".join(parts)
