"""The work one request may do: counters read per request, and series pages.

A request reads the stored counters of each epoch it reads from Redis (only
counters that were ever set are stored: a string metric declares 325,632
counters, and an epoch of 10^5 reports holds about 96,000 over its shards).
``ReadCost`` is that count per epoch, summed over the epoch's shards: a dense
metric of width d stores up to d counters in each of its shards, all of which
a read parses; ``ReadBound`` caps its sum (``LDP_MAX_READ_COUNTERS``): a window
estimate over more is refused (422 ``window_too_costly``, saying the numbers,
the largest window that fits and the paged series), and a series is answered
in pages of at most ``page_limit`` epochs, each page one bounded request.

>>> b = ReadBound(max_counters=10_000, max_page=100)
>>> b.fits(ReadCost((64,) * 150)), b.fits(ReadCost((64,) * 157))
(True, False)
>>> b.fits(ReadCost((4000, 3000, 2000))), b.fits(ReadCost((4000, 3000, 4000)))
(True, False)
>>> wide = ReadCost((64,) * 500)
>>> b.page_limit(wide), b.page_limit(wide, asked=20), b.page_limit(ReadCost((10,) * 500))
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

__all__ = [
    "DEFAULT_BOUND",
    "Page",
    "ReadBound",
    "ReadCost",
    "next_link",
    "plan_page",
    "too_costly",
]


@dataclass(frozen=True)
class ReadCost:
    """Counters one read of a window takes, per epoch with data (in window order).

    >>> c = ReadCost.stored({1: 90_000, 2: 400_000}, [1, 2, 3])
    >>> c, c.total, c.heaviest
    (ReadCost(per_epoch=(90000, 400000, 0)), 490000, 400000)
    """

    per_epoch: tuple[int, ...]

    @classmethod
    def stored(cls, stored: Mapping[int, int], epochs: Sequence[int]) -> ReadCost:
        """The counters stored in each epoch, over all its shards (what a read parses)."""
        return cls(tuple(stored.get(e, 0) for e in epochs))

    @property
    def total(self) -> int:
        return sum(self.per_epoch)

    @property
    def heaviest(self) -> int:
        return max(self.per_epoch, default=0)


@dataclass(frozen=True)
class ReadBound:
    """Most counters one request reads (summed over its epochs), most epochs per page."""

    max_counters: int = 1 << 20
    max_page: int = 1000

    def fits(self, cost: ReadCost) -> bool:
        """Whether a window can be read at once.

        One epoch always fits, like one series page: a metric wider than the bound
        is still answered, one epoch per request, and its width is bounded by the
        spec's own caps (``ldp_core.metric.MAX_COUNTER_EPOCHS``).

        >>> ReadBound(max_counters=1000).fits(ReadCost((5000,)))
        True
        >>> ReadBound(max_counters=1000).fits(ReadCost((5000, 1)))
        False
        """
        return len(cost.per_epoch) <= 1 or cost.total <= self.max_counters

    def most_epochs(self, cost: ReadCost) -> int:
        """Epochs with data any request of this window may read (at least one): as
        many as fit if each cost as much as the heaviest."""
        return max(1, self.max_counters // max(1, cost.heaviest))

    def page_limit(self, cost: ReadCost, asked: int | None = None) -> int:
        """Epochs of one series page: as asked, at most ``max_page`` and what fits."""
        return max(1, min(asked or self.max_page, self.max_page, self.most_epochs(cost)))


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


def too_costly(bound: ReadBound, cost: ReadCost) -> str:
    """Why a window is refused, with the numbers and the two ways to ask.

    >>> import textwrap
    >>> print(textwrap.fill(too_costly(ReadBound(10_000, 100), ReadCost((64,) * 200)), 80))
    the window holds 200 epochs with data and 12800 stored counters to read (at most
    64 per epoch); one request reads at most 10000 (LDP_MAX_READ_COUNTERS): ask a
    window of at most 156 epochs with data, or the series in pages
    (series=epoch&limit=100, then each page's next link)
    """
    return (
        f"the window holds {len(cost.per_epoch)} epochs with data and {cost.total} "
        f"stored counters to read (at most {cost.heaviest} per epoch); one request reads at most "
        f"{bound.max_counters} (LDP_MAX_READ_COUNTERS): ask a window of at most "
        f"{bound.most_epochs(cost)} epochs with data, or the series in pages "
        f"(series=epoch&limit={bound.page_limit(cost)}, then each page's next link)"
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
