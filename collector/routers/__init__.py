"""One router per resource: health (and operations), metrics, reports."""

from collector.routers import health, metrics, reports

__all__ = ["health", "metrics", "reports"]
