"""The collector's Prometheus metrics: reports, batches, on top of the shared ones.

``ldp_server.telemetry`` holds what every service has (HTTP latency, process
metrics, multiprocess summing over workers, the exposition and the scrape
guard); this adds the collector's counters to the same registry.  Labels are
only fixed reason codes and outcome names, never anything a client sent.

>>> t = Telemetry()
>>> t.record_batch(accepted=3, duplicates=1, rejected={"epoch_expired": 2}, seconds=0.004)
>>> "ldp_reports_rejected_total{reason=\\"epoch_expired\\"} 2" in t.render()
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import Counter, Histogram

from ldp_server.telemetry import (
    CONTENT_TYPE,
    HttpMetrics,
    ServiceMetrics,
    scrape_allowed,
)

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS", "HttpMetrics", "Telemetry", "scrape_allowed"]

#: Upper bounds (seconds) of the batch latency histogram.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class Telemetry(ServiceMetrics):
    """The collector's counters and the shared service metrics, in one registry."""

    service: str = "collector"

    def __post_init__(self) -> None:
        super().__post_init__()
        r = self.registry
        self.accepted = Counter("ldp_reports_accepted", "Reports counted into a tally.",
                                registry=r)
        self.duplicates = Counter("ldp_reports_duplicate",
                                  "Reports already delivered (retries).", registry=r)
        self.rejected = Counter("ldp_reports_rejected", "Reports refused, by reason code.",
                                ["reason"], registry=r)
        self.batch_errors = Counter("ldp_batches_refused",
                                    "Batches refused as a whole, by problem code.", ["code"],
                                    registry=r)
        self.batch_seconds = Histogram("ldp_batch_seconds",
                                       "Time to validate and store one batch.",
                                       buckets=LATENCY_BUCKETS, registry=r)

    def record_batch(
        self, *, accepted: int, duplicates: int, rejected: Mapping[str, int], seconds: float
    ) -> None:
        if accepted:  # inc(0) changes nothing but still takes the value's lock
            self.accepted.inc(accepted)
        if duplicates:
            self.duplicates.inc(duplicates)
        for code, n in rejected.items():
            self.rejected.labels(code).inc(n)
        self.batch_seconds.observe(seconds)
        self.sample_process()

    def record_error(self, code: str) -> None:
        """A batch refused as a whole (problem+json code)."""
        self.batch_errors.labels(code).inc()
