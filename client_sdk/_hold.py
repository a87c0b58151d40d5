"""Values of metrics a device does not know yet, held in memory until the specs arrive.

A fresh device has no spec for any metric the app did not bundle.  Until this
process's first successful fetch of the specs, ``Holder.hold`` keeps such a value
in memory only (never on disk), bounded by ``HoldConfig`` in count and time;
``Holder.release`` (the catalog's listener, called after each fetch) hands every
live value to ``record`` -- randomised, charged and spooled then -- and ends
holding for good.  Expired or dropped values are counted through ``count``.

>>> seen, counted = [], []
>>> h = Holder(HoldConfig(max_values=1), record=lambda *a: seen.append(a[:2]),
...            count=counted.append, fetch=lambda timeout: False)
>>> h.hold("m", 7, 0.0), h.hold("m", 8, 0.0), len(h)
(True, False, 1)
>>> h.release(); seen, len(h), h.hold("m", 9, 0.0)
([('m', 7)], 0, False)
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from client_sdk._config import HoldConfig

__all__ = ["Holder"]

log = logging.getLogger("client_sdk")


class Holder:
    """See the module docstring.  Thread-safe."""

    def __init__(
        self,
        config: HoldConfig,
        *,
        record: Callable[[str, object, float], object],
        count: Callable[[str], None],
        fetch: Callable[[float], bool],
        retry_delay: Callable[[int], float] = lambda attempt: min(60.0, 0.5 * 2**attempt),
        fetch_timeout: float = 10.0,
    ) -> None:
        self.config = config
        self._record, self._count, self._fetch = record, count, fetch
        self._retry_delay, self._fetch_timeout = retry_delay, fetch_timeout
        self._held: deque[tuple[str, object, float, float]] = deque()
        self._lock = threading.Lock()
        self._released = False
        self._stopped = False
        self._fetcher: threading.Thread | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    @property
    def waiting(self) -> bool:
        """True while values are held and the specs were not fetched yet."""
        with self._lock:
            return bool(self._held) and not self._released

    def hold(self, metric: str, value: object, now: float, *, fetch_soon: bool = False) -> bool:
        """Keep ``value`` (recorded at wall time ``now``) in memory; False: record it now
        (specs fetched already, holding off) or refuse it (the hold is full)."""
        with self._lock:
            if self._released or self.config.max_values == 0:
                return False
            self._expire_locked()
            if len(self._held) >= self.config.max_values:
                return False
            first = not self._held
            self._held.append((metric, value, now, time.monotonic()))
        if first:
            log.info("metric specs not fetched yet: holding values in memory until they"
                     " arrive (at most %d, %gs)", self.config.max_values,
                     self.config.max_seconds)
            if fetch_soon:
                self._start_fetcher()
        return True

    def release(self) -> None:
        """The specs arrived: record every live held value, hold nothing from now on."""
        with self._lock:
            self._released = True
            self._expire_locked()
            held, self._held = list(self._held), deque()
        for metric, value, now, _ in held:
            self._record(metric, value, now)

    def drop(self, reason: str = "hold_dropped") -> None:
        """Forget what is held (close, opt-out), each counted as ``reason``; hold nothing
        from now on."""
        with self._lock:
            self._released = self._stopped = True
            lost, self._held = len(self._held), deque()
        if lost and reason == "hold_dropped":
            log.warning("%d recorded value(s) forgotten at close: no spec for their metric"
                        " (the specs were never fetched); bundle the catalog with the app"
                        " (metrics=) to record offline", lost)
        for _ in range(lost):
            self._count(reason)

    def _expire_locked(self) -> None:
        limit = time.monotonic() - self.config.max_seconds
        while self._held and self._held[0][3] < limit:
            self._held.popleft()
            self._count("hold_expired")

    def _start_fetcher(self) -> None:
        """Fetch the specs now, retrying with backoff while values are held (the sender
        refetches only every ``metrics_ttl`` once it has a catalog)."""
        if self._fetcher is not None and self._fetcher.is_alive():
            return

        def run() -> None:
            attempt = 0
            while True:
                with self._lock:
                    self._expire_locked()
                    if self._released or self._stopped or not self._held:
                        return
                if self._fetch(self._fetch_timeout):
                    return
                attempt += 1
                time.sleep(self._retry_delay(attempt))

        self._fetcher = threading.Thread(target=run, name="ldp-telemetry-specs", daemon=True)
        self._fetcher.start()
