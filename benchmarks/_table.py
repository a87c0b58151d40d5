"""Shared bits of the benchmark scripts: timing medians and dated tables."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence

__all__ = ["header", "median_seconds", "median_seconds_within", "table"]


def median_seconds(run: Callable[[], object], repeats: int = 5) -> float:
    """Median wall time of ``repeats`` calls of ``run`` (after one warm-up call)."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def median_seconds_within(
    run: Callable[[], object], repeats: int = 5, budget: float = 10.0
) -> tuple[float, int]:
    """(median wall time, number of timed calls) of up to ``repeats`` calls of ``run``.

    As ``median_seconds`` (one untimed warm-up call first), but stops repeating
    once ``budget`` seconds have been spent, so a slow case still finishes; at
    least one call is always timed.  Report the count next to the figure.
    """
    start = time.perf_counter()
    run()
    times: list[float] = []
    while len(times) < repeats:
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget:
            break
    return statistics.median(times), len(times)


def header(title: str) -> str:
    """Title line with the date, the machine and the Python that measured it."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"## {title}\n{stamp}; {os.cpu_count()} cores, {cpu}; Python {platform.python_version()}\n"
    )


def table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table."""
    cells = [[str(c) for c in columns]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
