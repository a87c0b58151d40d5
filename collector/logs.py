"""Structured JSON logs, one object per line on stderr.

Callers pass only fixed event names and counts: never an IP address, a
payload, a report id, a token or a key.

>>> log = get_logger()
>>> log_event(log, "batch", accepted=3, rejected=0)        # doctest: +SKIP
{"ts": "2026-11-29T18:00:00.000Z", "level": "info", "event": "batch", "accepted": 3, ...}
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

__all__ = ["JsonFormatter", "configure", "get_logger", "log_event"]

LOGGER = "ldp.collector"


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object; fields come from ``extra={"fields": ...}``."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        body: dict[str, Any] = {
            "ts": f"{ts}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        body.update(getattr(record, "fields", {}))
        if record.exc_info and record.exc_info[0] is not None:
            body["error"] = record.exc_info[0].__name__
        return orjson.dumps(body, default=str).decode()


def configure(level: str = "INFO") -> logging.Logger:
    """Attach one JSON stderr handler to the collector logger (idempotent)."""
    log = logging.getLogger(LOGGER)
    log.setLevel(level.upper())
    if not any(isinstance(h.formatter, JsonFormatter) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        log.addHandler(handler)
    log.propagate = False
    return log


def get_logger() -> logging.Logger:
    return logging.getLogger(LOGGER)


def log_event(log: logging.Logger, event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log a fixed event name with counts or fixed codes as fields."""
    log.log(level, event, extra={"fields": fields})
