"""Sending: one POST of spooled reports, the collector's answers, backoff, specs.

The half of ``Pipeline`` that speaks HTTP (a mixin over the pipeline's state):
2xx answers remove the claimed rows and count them by result; network errors,
408, 425, 429 and 5xx release them and back off (full jitter, never sooner than
a 429/503's Retry-After); a 413 halves the batch; any other 4xx is final and
counted in ``dropped`` by its problem code.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Sequence

from client_sdk._batch import batch_body, parse_results, problem_code
from client_sdk._catalog import Catalog
from client_sdk._config import DeliveryConfig
from client_sdk._store import Claimed, Row, Store
from client_sdk._tokens import TokenManager
from client_sdk._transport import Response, Transport
from ldp_core.wire import MAX_BATCH

__all__ = ["USER_AGENT", "Sender"]

log = logging.getLogger("client_sdk")

_RETRYABLE = frozenset({408, 425, 429})
USER_AGENT = "ldp-telemetry-sdk/0.1"


class Sender:
    """The sending methods of ``Pipeline``; the state is the pipeline's."""

    url: str
    _api_key: str
    store: Store
    catalog: Catalog
    transport: Transport
    config: DeliveryConfig
    _jitter: random.Random
    _cond: threading.Condition
    _buffer: list[Row]
    _first_pending: float | None
    _backoff_until: float
    #: The background sender looks again then at reports held after a token request.
    _held_wake: float
    _attempt: int
    _metrics_attempt: int
    _metrics_due: float
    _last_metrics_try: float
    _send_limit: int
    _tally: Counter[str]
    _dropped: Counter[str]
    tokens: TokenManager

    def _send_batch(self, deadline: float) -> str:
        """One POST of the oldest spooled reports: 'ok', 'retry' or 'empty'.

        First the waiting reports get their tokens (``client_sdk._tokens``): only
        reports holding one are claimed; a failed token fetch backs off like a
        failed POST (Retry-After of a 429/503 honoured).
        """
        timeout = max(0.05, min(self.config.request_timeout, deadline - time.monotonic()))
        refused = self.tokens.ready(timeout)
        if self.tokens.progress:
            with self._cond:
                self._attempt = 0
        if refused:
            log.warning("token issuer refused units: %s (their reports dropped)", dict(refused))
            with self._cond:
                self._dropped.update(refused)
                self._after_removal_locked()
        claimed = self.store.claim(self._send_limit, self.config.request_timeout + 5.0)
        if not claimed and self.tokens.failed:  # reports wait for tokens: back off
            return self._retry(claimed, self.tokens.failed_answer)
        if not claimed:
            with self._cond:
                if not self.store.pending() and not self._buffer:
                    self._first_pending = None
                elif (held := self.tokens.held_for()) > 0:  # after a token request
                    self._held_wake = time.monotonic() + min(60.0, max(0.25, held))
                else:  # leased by another process (a fork, a crashed run): look again soon
                    self._backoff_until = max(self._backoff_until, time.monotonic() + 0.25)
            return "empty"
        body = batch_body(claimed)
        headers = {
            "Authorization": f"Bearer {self._api_key}",
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
        }
        if self.config.gzip:
            body = gzip.compress(body, compresslevel=6, mtime=0)
            headers["Content-Encoding"] = "gzip"
        try:
            answer = self.transport.send("POST", f"{self.url}/v1/reports", headers, body, timeout)
        except Exception as exc:
            log.info("delivery failed (%s); will retry", type(exc).__name__)
            return self._retry(claimed, None)
        return self._handle(claimed, answer)

    def _top_up(self, deadline: float) -> None:
        """The token stock's top-up at its moment (``client_sdk._tokens``), sending
        nothing; a failure backs off like a failed POST."""
        timeout = max(0.05, min(self.config.request_timeout, deadline - time.monotonic()))
        refused = self.tokens.ready(timeout, top_up=True)
        with self._cond:
            if refused:
                self._dropped.update(refused)
                self._after_removal_locked()
            if self.tokens.failed:
                self._tally["retries"] += 1
                self._schedule_retry(self.tokens.failed_answer)

    def _handle(self, claimed: Sequence[Claimed], answer: Response) -> str:
        status = answer.status
        seqs = [c.seq for c in claimed]
        if 200 <= status < 300:
            results = parse_results(answer.body, len(claimed))
            if results is None:
                log.warning("collector answered %d with an unreadable body", status)
                return self._retry(claimed, None)
            # Removed and counted under one lock: a flush that sees nothing pending
            # also sees these reports in the counters.
            with self._cond:
                self.store.remove(seqs)
                self._tally["batches"] += 1
                for kind, code in results:
                    if kind == "accepted":
                        self._tally["sent"] += 1
                    elif kind == "duplicate":
                        self._tally["duplicates"] += 1
                    else:
                        self._dropped[code or "rejected"] += 1
                self._attempt = 0
                self._send_limit = min(MAX_BATCH, self._send_limit * 2)
                self._after_removal_locked()
            return "ok"
        if status in _RETRYABLE or status >= 500 or status < 200 or 300 <= status < 400:
            return self._retry(claimed, answer)
        if status == 413 and len(claimed) > 1:
            self.store.release(seqs)
            with self._cond:
                self._send_limit = max(1, len(claimed) // 2)
            return "ok"
        code = problem_code(answer) or f"http_{status}"
        log.warning("collector refused a batch of %d: %d %s (dropped)", len(claimed), status, code)
        with self._cond:
            self.store.remove(seqs)
            self._dropped[code] += len(claimed)
            self._after_removal_locked()
        return "ok"

    def _after_removal_locked(self) -> None:
        if not self.store.pending() and not self._buffer:
            self._first_pending = None

    def _retry(self, claimed: Sequence[Claimed], answer: Response | None) -> str:
        self.store.release([c.seq for c in claimed])
        with self._cond:
            self._tally["retries"] += 1
            self._schedule_retry(answer)
        return "retry"

    def _schedule_retry(self, answer: Response | None) -> None:
        """Back off: full jitter, and never sooner than a 429/503's Retry-After (clamped)."""
        self._attempt += 1
        delay = self.config.backoff_delay(self._attempt, self._jitter.uniform)
        if answer is not None and answer.status in (429, 503):
            asked = self.config.retry_after_delay(answer.header("retry-after"))
            if asked is not None:
                delay = max(delay, asked)
        self._backoff_until = time.monotonic() + delay
        log.info("next delivery attempt in %.2fs", delay)

    # -- metric specs --------------------------------------------------------------------

    def refresh_metrics(self, timeout: float) -> bool:
        """GET /v1/metrics now (bounded by ``timeout``); True if the catalog was updated."""
        with self._cond:
            self._last_metrics_try = time.monotonic()
        ok = False
        try:
            answer = self.transport.send(
                "GET", f"{self.url}/v1/metrics",
                {"Authorization": f"Bearer {self._api_key}", "User-Agent": USER_AGENT},
                None, max(0.05, timeout),
            )
            if answer.status == 200:
                data = json.loads(answer.body)
                metrics = data.get("metrics") if isinstance(data, dict) else None
                if isinstance(metrics, list):
                    self.catalog.update([m for m in metrics if isinstance(m, dict)],
                                        source="collector")
                    ok = True
        except Exception as exc:
            log.info("metric specs not fetched (%s)", type(exc).__name__)
        with self._cond:
            now = time.monotonic()
            if ok:
                self._metrics_attempt = 0
                self._metrics_due = now + self.config.metrics_ttl
            else:
                self._metrics_attempt += 1
                self._metrics_due = now + min(
                    self.config.metrics_ttl,
                    self.config.backoff_delay(self._metrics_attempt, lambda a, b: b) + 1.0,
                )
        return ok
