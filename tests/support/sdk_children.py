"""Child-process bodies for the SDK ledger tests (importable, so ``spawn`` can run them).

Each child opens its own ``Client`` on a shared ``state_dir`` with a fixed clock,
waits at a barrier so that all children record at once, records one value and
puts ``(child number, status)`` on a queue.
"""

from __future__ import annotations

from typing import Any

from client_sdk import Client
from tests.support.sdk_fixtures import specs

__all__ = ["FixedClock", "record_once"]


class FixedClock:
    """A wall clock stopped at ``t`` (picklable, unlike a lambda)."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def record_once(number: int, state_dir: str, t: float, metric: str, value: object,
                options: dict[str, Any], barrier: Any, results: Any) -> None:
    """One process: a Client of its own on ``state_dir``, one record, the status reported."""
    client = Client("http://127.0.0.1:9", api_key="k", state_dir=state_dir, metrics=specs(),
                    background=False, clock=FixedClock(t), **options)
    try:
        barrier.wait(60)
        results.put((number, client.record(metric, value).status))
    finally:
        client.close(0)
