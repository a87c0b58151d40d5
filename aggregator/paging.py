"""The work one request may do: counters read per request, and series pages.

A request reads (counters of the metric) x (epochs it reads) values from
Redis.  ``ReadBound`` caps that number (``LDP_MAX_READ_COUNTERS``): a window
estimate over more is refused (422 ``window_too_costly``, saying the bound,
the largest window that fits and the paged series), and a series is answered
in pages of at most ``page_limit`` epochs, each page one bounded request.

>>> b = ReadBound(max_counters=10_000, max_page=100)
>>> b.fits(counters=64, epochs=150), b.fits(counters=64, epochs=157)
(True, False)
>>> b.page_limit(counters=64), b.page_limit(counters=64, asked=20), b.page_limit(10, 500)
(100, 20, 100)

Pages follow the epochs with data of the window in ascending order; the
cursor is the first epoch of the next page (a plain epoch number), so a page
never repeats or skips an epoch that had data when the series began:

>>> plan_page([3, 5, 8, 9, 12], cursor=None, limit=2)
Page(epochs=(3, 5), next_cursor=8)
>>> plan_page([3, 5, 8, 9, 12], cursor=8, limit=2)
Page(epochs=(8, 9), next_cursor=12)
>>> plan_page([3, 5, 8, 9, 12], cursor=10, limit=2)
Page(epochs=(12,), next_cursor=None)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

__all__ = ["DEFAULT_BOUND", "Page", "ReadBound", "next_link", "plan_page", "too_costly"]


@dataclass(frozen=True)
class ReadBound:
    """Most counters x epochs one request reads, and most epochs per series page."""

    max_counters: int = 1 << 17
    max_page: int = 1000

    def fits(self, counters: int, epochs: int) -> bool:
        """Whether a window of ``epochs`` epochs with data can be read at once.

        One epoch always fits, like one series page: a metric wider than the bound
        (a string metric's 325,632 counters) is still answered, one epoch per request,
        and its width is bounded by the spec's own caps
        (``ldp_core.metric.MAX_COUNTER_EPOCHS``).

        >>> ReadBound(max_counters=1000).fits(counters=5000, epochs=1)
        True
        >>> ReadBound(max_counters=1000).fits(counters=5000, epochs=2)
        False
        """
        return epochs <= 1 or counters * epochs <= self.max_counters

    def most_epochs(self, counters: int) -> int:
        """The most epochs with data one request reads (at least one)."""
        return max(1, self.max_counters // counters)

    def page_limit(self, counters: int, asked: int | None = None) -> int:
        """Epochs of one series page: as asked, at most ``max_page`` and what fits."""
        return max(1, min(asked or self.max_page, self.max_page, self.most_epochs(counters)))


#: The settings' defaults (``LDP_MAX_READ_COUNTERS``, ``LDP_SERIES_PAGE_EPOCHS``).
DEFAULT_BOUND = ReadBound()


@dataclass(frozen=True)
class Page:
    """The epochs of one page and the cursor of the next one (None: last page)."""

    epochs: tuple[int, ...]
    next_cursor: int | None


def plan_page(epochs: Sequence[int], cursor: int | None, limit: int) -> Page:
    """The page of ``epochs`` (sorted) starting at ``cursor`` (None: the first)."""
    rest = [e for e in epochs if cursor is None or e >= cursor]
    return Page(tuple(rest[:limit]), rest[limit] if len(rest) > limit else None)


def too_costly(bound: ReadBound, counters: int, epochs: int) -> str:
    """Why a window is refused, with the bound and the two ways to ask.

    >>> import textwrap
    >>> print(textwrap.fill(too_costly(ReadBound(10_000, 100), 64, 200), 80))
    the window holds 200 epochs with data x 64 counters = 12800 counters to read;
    one request reads at most 10000 (LDP_MAX_READ_COUNTERS): ask a window of at most
    156 epochs with data, or the series in pages (series=epoch&limit=100, then each
    page's next link)
    """
    return (
        f"the window holds {epochs} epochs with data x {counters} counters = "
        f"{epochs * counters} counters to read; one request reads at most "
        f"{bound.max_counters} (LDP_MAX_READ_COUNTERS): ask a window of at most "
        f"{bound.most_epochs(counters)} epochs with data, or the series in pages "
        f"(series=epoch&limit={bound.page_limit(counters)}, then each page's next link)"
    )


def next_link(path: str, query: Mapping[str, str], cursor: int | None) -> str | None:
    """The URL (path and query) of the next page: the same query, the next cursor.

    >>> next_link("/v1/estimates/os", {"series": "epoch", "limit": "2", "cursor": "5"}, 8)
    '/v1/estimates/os?series=epoch&limit=2&cursor=8'
    >>> next_link("/v1/estimates/os", {"series": "epoch"}, None) is None
    True
    """
    if cursor is None:
        return None
    params = {k: v for k, v in query.items() if k != "cursor"}
    params["cursor"] = str(cursor)
    return f"{path}?{urlencode(params)}"
