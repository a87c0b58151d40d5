"""Windows as an analyst writes them: epoch numbers, UTC dates, or ``since=7d``.

One parser for the API, the dashboard and (through the API) the CLI.  Every
bound is converted with the metric's own epoch length (hour | day), in UTC:

- an integer is an epoch number, as before (``start=20400``);
- ``YYYY-MM-DD`` is midnight UTC of that day, ``YYYY-MM-DDTHH[:MM[:SS]][Z]``
  an instant; ``start`` is the epoch holding that instant, ``end`` the first
  epoch starting at or after it (``end`` stays exclusive, like the epoch form:
  ``start=2026-11-01&end=2026-12-01`` is November);
- ``since=<N><h|d|w>`` is the last N hours/days/weeks counted in whole epochs,
  the current epoch included (``since=7d`` on a daily metric: today and the
  six days before; on an hourly one: 168 hours).  It replaces ``start`` and
  leaves ``end`` open.

>>> DAY = 86400
>>> window_epochs(DAY, "2026-11-01", "2026-12-01")
EpochWindow(start=20758, end=20788)
>>> window_epochs(3600, "2026-11-01T05Z", None).start == 20758 * 24 + 5
True
>>> window_epochs(DAY, None, None, since="7d", now=20790 * DAY + 5)
EpochWindow(start=20784, end=None)
>>> window_epochs(DAY, "20400", "20402")
EpochWindow(start=20400, end=20402)
>>> window_epochs(DAY, "2026-02-30", None)
Traceback (most recent call last):
aggregator.dates.BadDate: start='2026-02-30' is not a date: day is out of range for month
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = [
    "DATE_PATTERN",
    "SINCE_PATTERN",
    "BadDate",
    "EpochWindow",
    "parse_since",
    "parse_time",
    "window_epochs",
]

#: What a bound may look like (the OpenAPI ``pattern`` of start and end).
DATE_PATTERN = r"^(\d{1,10}|\d{4}-\d{2}-\d{2}(T\d{2}(:\d{2}(:\d{2})?)?Z?)?)$"
#: What ``since`` may look like.
SINCE_PATTERN = r"^[1-9]\d{0,5}[hdw]$"

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:T(\d{2})(?::(\d{2})(?::(\d{2}))?)?Z?)?")
_UNIT_SECONDS = {"h": 3600, "d": 86400, "w": 7 * 86400}
#: Epoch numbers and dates above this (year 9999) are refused.
_MAX_SECONDS = 253_402_300_800


class BadDate(ValueError):
    """A bound or a ``since`` that is neither an epoch number nor a UTC date (422 bad_date)."""


@dataclass(frozen=True)
class EpochWindow:
    """The window in epoch numbers: [start, end), ``None`` for an open side."""

    start: int | None
    end: int | None


def parse_time(text: str, *, field: str = "start") -> int | float:
    """An epoch number (int) or an instant in Unix seconds (float).

    >>> parse_time("20400"), parse_time("1970-01-02")
    (20400, 86400.0)
    >>> parse_time("yesterday")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    aggregator.dates.BadDate: start='yesterday' is neither an epoch number nor a date ...
    """
    text = text.strip()
    if text.isdigit() and len(text) <= 10:
        return int(text)
    found = _DATE.fullmatch(text)
    if found is None:
        raise BadDate(
            f"{field}={text!r} is neither an epoch number nor a date "
            "YYYY-MM-DD[THH[:MM[:SS]]][Z] (UTC)"
        )
    y, mo, d, h, mi, s = (int(p) if p else 0 for p in found.groups())
    try:
        moment = datetime(y, mo, d, h, mi, s, tzinfo=UTC)
    except ValueError as exc:
        raise BadDate(f"{field}={text!r} is not a date: {exc}") from None
    return moment.timestamp()


def parse_since(text: str) -> int:
    """``since`` in seconds.

    >>> parse_since("7d"), parse_since("12h"), parse_since("2w")
    (604800, 43200, 1209600)
    """
    found = re.fullmatch(SINCE_PATTERN, text.strip())
    if found is None:
        raise BadDate(f"since={text!r} is not <N><h|d|w>, e.g. 7d, 24h or 2w")
    return int(text.strip()[:-1]) * _UNIT_SECONDS[text.strip()[-1]]


def _epoch(value: int | float, epoch_seconds: int, *, ceil: bool, field: str) -> int:
    if isinstance(value, int):
        if value * epoch_seconds > _MAX_SECONDS:
            raise BadDate(f"{field}={value} is beyond the year 9999")
        return value
    if value < 0:
        raise BadDate(f"{field} is before 1970-01-01")
    whole = int(value // epoch_seconds)
    return whole + 1 if ceil and whole * epoch_seconds < value else whole


def window_epochs(
    epoch_seconds: int,
    start: str | None,
    end: str | None,
    *,
    since: str | None = None,
    now: float | None = None,
) -> EpochWindow:
    """Convert the window's bounds (empty strings count as absent); see the module doc."""
    start = start or None
    end = end or None
    since = since or None
    if since is not None and start is not None:
        raise BadDate("give since or start, not both")
    first: int | None = None
    if since is not None:
        seconds = parse_since(since)
        current = int((time.time() if now is None else now) // epoch_seconds)
        first = max(current - -(-seconds // epoch_seconds) + 1, 0)
    elif start is not None:
        first = _epoch(parse_time(start), epoch_seconds, ceil=False, field="start")
    last = None
    if end is not None:
        last = _epoch(parse_time(end, field="end"), epoch_seconds, ceil=True, field="end")
    # An empty window (start >= end) is the estimate's own check: 422 bad_window.
    return EpochWindow(first, last)
