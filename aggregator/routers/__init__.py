"""One router per resource: health, metrics, estimates, dashboard."""

from aggregator.routers import dashboard, estimates, health, metrics

__all__ = ["dashboard", "estimates", "health", "metrics"]
