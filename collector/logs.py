"""Structured JSON logs, one object per line on stderr, uvicorn's lines included.

Callers pass only fixed event names and counts: never an IP address, a
payload, a report id, a token or a key.  ``uvicorn_log_config`` is the
logging configuration given to uvicorn (``ldp serve``, ``ldp up``) so that its
own lines are the same JSON: an access line keeps the method, the path without
its query string and the status, and drops the client address.

>>> import logging
>>> record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
...                            ("10.0.0.7:5123", "GET", "/?key=secret", "1.1", 200), None)
>>> line = JsonFormatter().format(record)
>>> "10.0.0.7" in line or "secret" in line, '"path":"/"' in line
(False, True)

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

__all__ = ["JsonFormatter", "configure", "get_logger", "log_event", "uvicorn_log_config"]

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
        if record.name != LOGGER:
            body["logger"] = record.name
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            # (client address, method, path with query, HTTP version, status): no address,
            # no query string (it may carry a key).
            body["event"] = "http_request"
            body.update(method=str(args[1]), path=str(args[2]).partition("?")[0],
                        status=args[4])
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


def uvicorn_log_config(level: str = "INFO") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn: every logger, root included, as JSON.

    >>> uvicorn_log_config()["formatters"]["json"]["()"]
    'collector.logs.JsonFormatter'
    """
    handler = {"class": "logging.StreamHandler", "formatter": "json",
               "stream": "ext://sys.stderr"}
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "collector.logs.JsonFormatter"}},
        "handlers": {"stderr": handler},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": ["stderr"], "level": level, "propagate": False},
        },
        "root": {"handlers": ["stderr"], "level": level},
    }
