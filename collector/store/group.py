"""Group commit: the reports of concurrent requests written by ONE store call.

A single-report request costs the store one script call (redis-py's encoding,
a round trip, Redis' own per-call work) for one report.  ``GroupCommit`` puts
the reports of the requests that reach it together into one ``write`` call:
a call that finds the writer idle starts it at the event loop's next turn (the
calls made in the same turn join); calls made while a write is in flight go
out together as soon as it returns.  No timer: an idle collector writes at once.

Exactly once holds as for one request: a caller is answered only after the
write that holds its items returned; a failed write raises its error in every
caller of its group (none is told "accepted"); a group holds at most ``limit``
items and never splits one caller's items.  Items keep their arrival order in
the group, so of two reports with the same token the first one counts.

>>> import asyncio
>>> calls = []
>>> async def write(items):
...     calls.append(list(items))
...     return [x * 10 for x in items]
>>> async def demo():
...     group = GroupCommit(write, limit=4)
...     return await asyncio.gather(group.submit([1, 2]), group.submit([3]),
...                                 group.submit([4, 5]))
>>> asyncio.run(demo())
[[10, 20], [30], [40, 50]]
>>> calls  # one write for the first two callers, the third would pass the limit
[[1, 2, 3], [4, 5]]
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["ALONE", "GROUP_LIMIT", "GroupCommit"]

T = TypeVar("T")
R = TypeVar("R")

#: Most items one write takes: the size of the largest batch a request may send.
GROUP_LIMIT = 1000

#: A request with this many reports or more is written by a call of its own, at once
#: (``Store.ingest_grouped``): one call is already shared by its reports, and waiting
#: for another request's write would serialise its Python preparation behind it.
ALONE = 100


class GroupCommit(Generic[T, R]):
    """Coalesce concurrent ``submit`` calls into calls of ``write`` (one result per
    item, in order), at most one write in flight, at most ``limit`` items each
    (a caller with more items than that is written alone)."""

    def __init__(
        self, write: Callable[[Sequence[T]], Awaitable[Sequence[R]]], *, limit: int = GROUP_LIMIT
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._write = write
        self._limit = limit
        self._waiting: list[tuple[Sequence[T], asyncio.Future[list[R]]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def submit(self, items: Sequence[T]) -> list[R]:
        """``write``'s results for ``items``, once the write that held them returned."""
        if not items:
            return []
        done: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        writer = self._writer
        if writer is not None and writer.get_loop() is not done.get_loop():
            self._waiting, writer = [], None  # a new event loop: the old one's callers are gone
        self._waiting.append((items, done))
        if writer is None or writer.done():
            self._writer = asyncio.create_task(self._drain())
        return await done

    async def _drain(self) -> None:
        while self._waiting:
            group = self._take()
            if not group:
                continue
            flat = [item for items, _ in group for item in items]
            try:
                results = list(await self._write(flat))
                if len(results) != len(flat):
                    raise ValueError(f"write gave {len(results)} results for {len(flat)} items")
            except Exception as error:  # every caller of the group gets the failure
                for _, done in group:
                    if not done.done():
                        done.set_exception(error)
                continue
            except BaseException:  # the writer itself is cancelled: so is every caller
                for _, done in [*group, *self._waiting]:
                    done.cancel()
                self._waiting.clear()
                raise
            at = 0
            for items, done in group:
                if not done.done():
                    done.set_result(results[at : at + len(items)])
                at += len(items)

    def _take(self) -> list[tuple[Sequence[T], asyncio.Future[list[R]]]]:
        """The next group in arrival order; callers that gave up (cancelled) are dropped,
        so nothing of theirs is written after they were told nothing."""
        group: list[tuple[Sequence[T], asyncio.Future[list[R]]]] = []
        size = taken = 0
        for items, done in self._waiting:
            if group and size + len(items) > self._limit:
                break
            taken += 1
            if not done.cancelled():
                group.append((items, done))
                size += len(items)
        del self._waiting[:taken]
        return group
