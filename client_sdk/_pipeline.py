"""Queue, spool and sender: everything between ``record`` and the collector.

One ``Pipeline`` serves a ``Client`` (one device) or a ``Fleet`` (many logical
devices).  Reports flow:

    record -> [memory buffer] -> spool (sqlite) -> token -> claim -> POST /v1/reports -> remove

- Before each claim the sender gives waiting reports a blind-signed token of
  their unit, fetching missing ones from the issuer (``client_sdk._tokens``);
  a report is never sent without one, and waits in the spool until it has it.

- durability "record": ``submit`` writes the report to the spool in the same
  ledger transaction that charges it; "batch": the charge is committed at
  once, the report appended to memory and written by the sender every
  ``persist_interval`` (a crash meanwhile loses the report, never the charge).
  Only spooled reports are ever sent.
- The sender sends when ``batch_size`` reports wait, when the oldest waited
  ``interval`` seconds, or on ``flush``.  Network failures, 408, 429, 5xx are
  retried (capped exponential backoff with full jitter; Retry-After honoured,
  clamped); other 4xx are final and counted in ``dropped`` by reason.
- Without a background thread (``background=False``) nothing happens until
  ``flush(timeout)``, which sends in the calling thread.

Fork: a child starts with an empty memory queue, fresh locks, its own sqlite
connection, and starts its own sender thread on first use.  Spooled reports are
shared through the file and leased, so parent and child never send one row at
once (and the collector counts a report_id once anyway).
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable

from client_sdk._catalog import Catalog
from client_sdk._config import DeliveryConfig
from client_sdk._device import Outcome
from client_sdk._hooks import LIVE
from client_sdk._pins import IssuerPins
from client_sdk._results import Counters
from client_sdk._sender import USER_AGENT, Sender
from client_sdk._store import Row, Store
from client_sdk._tokens import TokenManager
from client_sdk._transport import Transport
from ldp_core.wire import MAX_BATCH

__all__ = ["Pipeline"]

log = logging.getLogger("client_sdk")

#: In "batch" durability the memory queue is spooled at the latest at this length.
_MAX_BUFFER = 1000


class Pipeline(Sender):
    """See the module docstring."""

    def __init__(
        self,
        url: str,
        api_key: str,
        store: Store,
        catalog: Catalog,
        transport: Transport,
        config: DeliveryConfig,
        *,
        background: bool,
        fetch_metrics: bool = True,
        pins: IssuerPins | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._api_key = api_key
        self.store = store
        self.catalog = catalog
        self.transport = transport
        self.config = config
        self.background = background
        self._jitter = random.Random()
        self.tokens = TokenManager.for_catalog(
            store, transport, self.url, catalog, pins,
            lambda: {"Authorization": f"Bearer {self._api_key}", "User-Agent": USER_AGENT})
        self.tokens.ahead, self.tokens.delay = config.token_ahead, config.token_delay
        self._init_state()
        self._metrics_due = 0.0 if fetch_metrics and not len(catalog) else (
            time.monotonic() + (config.metrics_ttl if fetch_metrics else float("inf")))
        self._fetch_metrics = fetch_metrics
        self._closed = False
        #: False after an opt-out purge, until ``resume()``.
        self.accepting = True
        #: Called in a forked child after the pipeline reset (e.g. a device's locks).
        self.fork_callbacks: list[Callable[[], None]] = []
        LIVE.add(self)

    def _init_state(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._buffer: list[Row] = []
        self._buffer_since: float | None = None
        self._first_pending: float | None = time.monotonic() if self.store.pending() else None
        self._flush_requests = 0
        self._backoff_until = 0.0
        self._held_wake = 0.0
        self._attempt = 0
        self._metrics_attempt = 0
        self._send_limit = MAX_BATCH
        self._thread: threading.Thread | None = None
        self._generation = 0
        self._paused = False
        self._tally: Counter[str] = Counter()
        self._dropped: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._warned: set[str] = set()
        self._last_metrics_try = float("-inf")

    # -- the record side ---------------------------------------------------------------

    def submit(self, prepare: Callable[[Callable[[Row], None] | None], Outcome]) -> Outcome:
        """Queue the report that ``prepare(spool)`` charges and randomises.

        ``prepare`` runs under the queue lock; in durability "record" it is given
        the spool's ``insert`` to call inside its ledger transaction.  Returns its
        outcome, or "opted_out" (``purge()`` ran) / "storage_error" (the state file
        could not be written: nothing was charged or queued)."""
        with self._cond:
            if not self.accepting:
                return Outcome("opted_out", None)
            durable = self.config.durability == "record"
            try:
                outcome = prepare(self.store.insert if durable else None)
            except (sqlite3.Error, OSError) as exc:  # disk full, locked: not the app's problem
                log.warning("ledger or spool write failed: %s", type(exc).__name__)
                self._dropped["storage_error"] += 1
                return Outcome("storage_error", None)
            row = outcome.row
            if row is None:
                self._refused[outcome.status] += 1
                return outcome
            idle = self._first_pending is None
            if durable:
                dropped = self.store.added([row])
                if dropped:
                    self._dropped["spool_full"] += dropped
            else:
                self._buffer.append(row)
                if self._buffer_since is None:
                    self._buffer_since = time.monotonic()
                    idle = True
                elif len(self._buffer) >= _MAX_BUFFER:    # bounded memory, quotas enforced
                    self._persist_locked()
            self._tally["queued"] += 1
            self._held_wake = 0.0
            if self._first_pending is None:
                self._first_pending = time.monotonic()
            if self.background:
                self._ensure_thread()
                if idle or self._pending_locked() >= self.config.batch_size:
                    self._cond.notify_all()            # the sender recomputes its wake time
        return outcome

    def kick(self) -> None:
        """Start the sender now (it fetches the metric specs first if it has none)."""
        with self._cond:
            if self.background:
                self._ensure_thread()
                self._cond.notify_all()

    def refused(self, status: str, *, warn: tuple[str, str] | None = None) -> None:
        """Count a refused record; ``warn=(key, message)`` logs a WARNING once per key."""
        with self._cond:
            self._refused[status] += 1
            if status == "unknown_metric" and self._fetch_metrics:
                self._metrics_due = min(self._metrics_due, self._last_metrics_try + 60.0)
                if self.background:
                    self._ensure_thread()
                    self._cond.notify_all()
        if warn is not None:
            self.warn_once(*warn)

    def warn_once(self, key: str, message: str) -> None:
        """Log ``message`` at WARNING the first time ``key`` is seen (per process)."""
        with self._cond:
            if key in self._warned:
                return
            self._warned.add(key)
        log.warning("%s", message)

    def counters(self) -> Counters:
        with self._cond:
            return Counters(
                queued=self._tally["queued"],
                pending=self._pending_locked(),
                sent=self._tally["sent"],
                duplicates=self._tally["duplicates"],
                dropped=dict(self._dropped),
                refused=dict(self._refused),
                batches=self._tally["batches"],
                retries=self._tally["retries"],
                config_errors={**self.tokens.config_errors(), **self.catalog.skipped(),
                               **self.tokens.device_token_errors()},
            )

    def _pending_locked(self) -> int:
        return len(self._buffer) + self.store.pending()

    # -- flush / close -------------------------------------------------------------------

    def flush(self, timeout: float) -> bool:
        """Deliver everything queued; True if nothing is pending when it returns."""
        deadline = time.monotonic() + max(timeout, 0.0)
        if self._closed or self._paused:
            return not self.counters().pending
        if not self.background:
            return self._drain(deadline)
        with self._cond:
            self._ensure_thread()
            self._flush_requests += 1
            self._cond.notify_all()
            try:
                while self._pending_locked():
                    left = deadline - time.monotonic()
                    if left <= 0 or self._thread is None or not self._thread.is_alive():
                        break
                    self._cond.wait(min(left, 0.5))
                return not self._pending_locked()
            finally:
                self._flush_requests -= 1

    def close(self, timeout: float) -> bool:
        """Flush within ``timeout``, stop the sender, keep the rest in the spool."""
        if self._closed:
            return not self.counters().pending
        done = self.flush(timeout)
        self.stop(max(0.1, timeout))
        with self._cond:
            self._persist_locked()
            self._closed = True
        self.store.close()
        LIVE.discard(self)
        return done

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the sender thread (persisting the memory queue) until ``resume()``.

        A thread still inside an HTTP request finishes that request and exits.
        """
        with self._cond:
            self._paused = True
            self._generation += 1
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._cond:
            self._persist_locked()

    def resume(self) -> None:
        """Accept and send again after ``stop()``/``purge()``."""
        with self._cond:
            self._paused = False
            self.accepting = True
            if self.background:
                self._ensure_thread()

    def purge(self, reason: str) -> int:
        """Refuse new reports, delete every queued and spooled one (opt-out); how many."""
        with self._cond:
            self.accepting = False
            dropped = len(self._buffer)
            self._buffer.clear()
            self._buffer_since = None
            dropped += self.store.purge()
            self._first_pending = None
            if dropped:
                self._dropped[reason] += dropped
            return dropped

    # -- the sender ----------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._closed or self._paused:
            return
        if self._thread is None or not self._thread.is_alive():
            self._generation += 1
            self._thread = threading.Thread(
                target=self._run, args=(self._generation,), name="ldp-telemetry-sender",
                daemon=True,
            )
            self._thread.start()

    def _run(self, generation: int) -> None:
        """The sender loop; it ends when ``stop()`` bumps the generation."""
        while True:
            with self._cond:
                while self._generation == generation:
                    now = time.monotonic()
                    wake = self._next_wake(now)
                    if wake <= now:
                        break
                    self._cond.wait(min(wake - now, 1.0))
                if self._generation != generation:
                    return
            try:
                self._tick(time.monotonic() + self.config.request_timeout * 3, generation)
            except Exception as exc:  # the sender must never die of one bad answer
                log.warning("sender error: %s", type(exc).__name__)
                with self._cond:
                    self._schedule_retry(None)
            with self._cond:
                self._cond.notify_all()

    def _next_wake(self, now: float) -> float:
        wake = self._metrics_due
        if self._buffer_since is not None:
            wake = min(wake, self._buffer_since + self.config.persist_interval)
        if self._first_pending is not None:
            if self._flush_requests or self._pending_locked() >= self.config.batch_size:
                send_at = now
            else:
                send_at = self._first_pending + self.config.interval
            wake = min(wake, max(send_at, self._backoff_until, self._held_wake))
        if self.tokens.ahead:  # the token top-up, at its own moment (``client_sdk._tokens``)
            due = self.tokens.next_due
            left = 0.0 if due is None else due - self.tokens.clock()
            wake = min(wake, max(now + max(0.0, left), self._backoff_until))
        return wake

    def _tick(self, deadline: float, generation: int) -> None:
        now = time.monotonic()
        with self._cond:
            want_metrics = now >= self._metrics_due
            due = self._first_pending is not None and now >= max(self._backoff_until,
                                                                  self._held_wake) and (
                self._flush_requests > 0
                or self._pending_locked() >= self.config.batch_size
                or now >= self._first_pending + self.config.interval
            )
            top_up = not due and now >= self._backoff_until and self.tokens.due()
            if not top_up or want_metrics or (self._buffer_since is not None and now >= (
                    self._buffer_since + self.config.persist_interval)):
                self._persist_locked()   # (a tick for the tokens only keeps the memory queue)
        if want_metrics:
            self.refresh_metrics(self.config.request_timeout)
        if due:
            self._send_until_empty(deadline, generation)
        elif top_up:
            self._top_up(deadline)

    def _persist_locked(self) -> None:
        if not self._buffer:
            return
        rows = self._buffer
        try:
            dropped = self.store.write(rows)
        except Exception as exc:
            log.warning("spool write failed: %s", type(exc).__name__)
            self._dropped["storage_error"] += len(rows)  # ``write`` gave their charges back
            dropped = 0
        if dropped:
            self._dropped["spool_full"] += dropped
        self._buffer, self._buffer_since = [], None

    def _drain(self, deadline: float) -> bool:
        """Send in the calling thread until empty or ``deadline`` (bounded)."""
        with self._cond:
            self._persist_locked()
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            with self._cond:
                idle = not self._pending_locked()
                wait = self._backoff_until - now
            if idle:
                if wait <= 0 and self.tokens.due():
                    self._top_up(deadline)
                break
            if wait > 0:
                time.sleep(min(wait, deadline - now))
                continue
            if self._fetch_metrics and now >= self._metrics_due:
                self.refresh_metrics(min(self.config.request_timeout, deadline - now))
            if self._send_batch(deadline) == "empty" and not self.store.unleased():
                break
        return not self.counters().pending

    def _send_until_empty(self, deadline: float, generation: int) -> None:
        while time.monotonic() < deadline and self._generation == generation:
            outcome = self._send_batch(deadline)
            if outcome != "ok":
                return

    # -- fork ----------------------------------------------------------------------------

    def _before_fork(self) -> None:
        self._cond.acquire()
        self.store._lock.acquire()

    def _after_fork_parent(self) -> None:
        self.store._lock.release()
        self._cond.release()

    def _after_fork_child(self) -> None:
        self.store.reopen_after_fork()
        self.catalog.after_fork()
        self.tokens.after_fork()
        paused = self._paused
        self._init_state()
        self._paused = paused
        self._metrics_due = time.monotonic() + self.config.metrics_ttl
        for callback in self.fork_callbacks:
            callback()
