"""Delivery settings and the retry policy (capped exponential backoff, full jitter).

>>> cfg = DeliveryConfig(batch_size=50, interval=5.0)
>>> 0.0 <= cfg.backoff_delay(attempt=3, uniform=lambda a, b: b) <= cfg.backoff_max
True
>>> cfg.retry_after_delay("120")          # seconds, clamped to retry_after_max
120.0
>>> cfg.retry_after_delay("9999")
300.0
>>> cfg.retry_after_delay("soon") is None
True
>>> PrivacyCaps().allows(epsilon=1.0, epsilon_inf=4.0), PrivacyCaps().allows(5.0, None)
(True, False)
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from client_sdk._errors import ConfigError
from ldp_core.wire import MAX_BATCH

__all__ = ["DeliveryConfig", "PrivacyCaps"]


@dataclass(frozen=True)
class DeliveryConfig:
    """How reports are batched, spooled and retried.

    batch_size        send when this many reports wait (<= 1000, the wire limit)
    interval          ... or when the oldest waiting report is this old (seconds)
    request_timeout   per HTTP request (seconds)
    gzip              compress batches (Content-Encoding: gzip)
    backoff_base      first retry waits up to this long (full jitter) ...
    backoff_max       ... doubling per failure up to this cap
    retry_after_min   a 429/503 Retry-After is clamped to [min, max]; the retry
    retry_after_max   waits max(clamped Retry-After, jittered backoff)
    max_reports       spool quota in reports (oldest dropped first, counted)
    max_bytes         spool quota in bytes of report rows
    durability        "record": every record is in the spool file when record()
                      returns (survives kill -9); "batch": records are written to
                      the spool by the sender within ``persist_interval``
                      (faster; a kill -9 loses the last moments, never sends twice)
    persist_interval  write-behind period in "batch" mode (seconds)
    metrics_ttl       refetch the metric specs this often (seconds)
    atexit_timeout    deadline of the flush at interpreter exit (seconds)
    """

    batch_size: int = 100
    interval: float = 30.0
    request_timeout: float = 10.0
    gzip: bool = True
    backoff_base: float = 0.5
    backoff_max: float = 60.0
    retry_after_min: float = 0.0
    retry_after_max: float = 300.0
    max_reports: int = 10_000
    max_bytes: int = 16 * 1024 * 1024
    durability: str = "record"
    persist_interval: float = 0.05
    metrics_ttl: float = 3600.0
    atexit_timeout: float = 2.0

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH:
            raise ConfigError(f"batch_size must be in [1, {MAX_BATCH}], got {self.batch_size}")
        for name in ("interval", "request_timeout", "backoff_base", "backoff_max",
                     "persist_interval", "metrics_ttl"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
        if not 0 <= self.retry_after_min <= self.retry_after_max:
            raise ConfigError("need 0 <= retry_after_min <= retry_after_max")
        if self.max_reports < 1 or self.max_bytes < 1:
            raise ConfigError("spool quotas must be >= 1")
        if self.durability not in ("record", "batch"):
            raise ConfigError(f"durability must be 'record' or 'batch', got {self.durability!r}")
        if self.atexit_timeout < 0:
            raise ConfigError("atexit_timeout must be >= 0")

    def backoff_delay(self, attempt: int, uniform: Callable[[float, float], float]) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2**(attempt-1))] for attempt >= 1."""
        ceiling = min(self.backoff_max, self.backoff_base * 2.0 ** min(max(attempt - 1, 0), 62))
        return uniform(0.0, ceiling)

    def retry_after_delay(self, header: str | None, now: float | None = None) -> float | None:
        """Seconds to wait from a Retry-After header (seconds or HTTP date), clamped."""
        if header is None:
            return None
        text = header.strip()
        seconds: float | None = None
        if text.isdigit():
            seconds = float(text)
        else:
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                return None
            if when is None:
                return None
            seconds = when.timestamp() - (time.time() if now is None else now)
        return min(max(seconds, self.retry_after_min), self.retry_after_max)


@dataclass(frozen=True)
class PrivacyCaps:
    """The most privacy loss this device accepts from any metric spec.

    epsilon      cap on a spec's epsilon per report (default 4)
    epsilon_inf  cap on a memoised spec's lifetime epsilon_inf per value (default 8)

    Specs come from the collector, signed off by whoever holds an admin key; the
    caps are the device's own line, so a compromised or careless admin cannot
    turn the randomisation into a formality.  A spec above them is refused on the
    device: ``record`` answers ``spec_over_cap``, counted, with one WARNING per
    metric, and nothing is randomised, charged or sent.  At epsilon = 4 one report
    already lets an observer guess a yes/no answer right 98.2% of the time
    (e^4 / (1 + e^4)); see notes/sdk-readme.md for the choice of defaults.
    """

    epsilon: float = 4.0
    epsilon_inf: float = 8.0

    def __post_init__(self) -> None:
        for name in ("epsilon", "epsilon_inf"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or value <= 0):
                raise ConfigError(f"caps: {name} must be a finite number > 0, got {value!r}")

    def allows(self, epsilon: float, epsilon_inf: float | None) -> bool:
        """True if a spec with these epsilons is within the caps."""
        return epsilon <= self.epsilon and (epsilon_inf is None or epsilon_inf <= self.epsilon_inf)
