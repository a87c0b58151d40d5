"""Process-local counters, exposed as Prometheus text at GET /metrics.

Labels are only the fixed reason codes and outcome names, never anything a
client sent.  Each worker process keeps its own counters (scrape each, or sum).

>>> t = Telemetry()
>>> t.record_batch(accepted=3, duplicates=1, rejected={"epoch_expired": 2}, seconds=0.004)
>>> "ldp_reports_rejected_total{reason=\\"epoch_expired\\"} 2" in t.render()
True
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["LATENCY_BUCKETS", "Telemetry"]

#: Upper bounds (seconds) of the batch latency histogram.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class Telemetry:
    """Counters of reports and batches, and a histogram of batch latency."""

    accepted: int = 0
    duplicates: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    batch_errors: Counter[str] = field(default_factory=Counter)
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0

    def record_batch(
        self, *, accepted: int, duplicates: int, rejected: Mapping[str, int], seconds: float
    ) -> None:
        self.accepted += accepted
        self.duplicates += duplicates
        self.rejected.update(rejected)
        self.latency_counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds

    def record_error(self, code: str) -> None:
        """A batch refused as a whole (problem+json code)."""
        self.batch_errors[code] += 1

    def render(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        lines = [
            "# HELP ldp_reports_accepted_total Reports counted into a tally.",
            "# TYPE ldp_reports_accepted_total counter",
            f"ldp_reports_accepted_total {self.accepted}",
            "# HELP ldp_reports_duplicate_total Reports already delivered (retries).",
            "# TYPE ldp_reports_duplicate_total counter",
            f"ldp_reports_duplicate_total {self.duplicates}",
            "# HELP ldp_reports_rejected_total Reports refused, by reason code.",
            "# TYPE ldp_reports_rejected_total counter",
        ]
        lines += [
            f'ldp_reports_rejected_total{{reason="{code}"}} {n}'
            for code, n in sorted(self.rejected.items())
        ]
        lines += [
            "# HELP ldp_batches_refused_total Batches refused as a whole, by problem code.",
            "# TYPE ldp_batches_refused_total counter",
        ]
        lines += [
            f'ldp_batches_refused_total{{code="{code}"}} {n}'
            for code, n in sorted(self.batch_errors.items())
        ]
        lines += [
            "# HELP ldp_batch_seconds Time to validate and store one batch.",
            "# TYPE ldp_batch_seconds histogram",
        ]
        running = 0
        for bound, count in zip(LATENCY_BUCKETS, self.latency_counts, strict=False):
            running += count
            lines.append(f'ldp_batch_seconds_bucket{{le="{bound}"}} {running}')
        total = sum(self.latency_counts)
        lines += [
            f'ldp_batch_seconds_bucket{{le="+Inf"}} {total}',
            f"ldp_batch_seconds_sum {self.latency_sum}",
            f"ldp_batch_seconds_count {total}",
        ]
        return "\n".join(lines) + "\n"
