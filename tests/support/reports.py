"""Test data for the collector: metric specs and well-formed report envelopes.

>>> env = envelope("browser", 1, today(), 2, device=7)
>>> len(env.report_id), len(env.token)
(32, 214)
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from ldp_core.base import Payload
from ldp_core.wire import Envelope
from tests.support.tokens import device_nonce, mint

__all__ = ["NOW", "SPECS", "current", "device_secret", "envelope", "today"]

#: The clock of a test session (real time: Redis expires dedupe state by its own clock).
NOW = time.time()

#: Spec bodies for POST /v1/metrics, one per mechanism family.
SPECS: dict[str, dict[str, Any]] = {
    "browser": {"name": "browser", "kind": "categorical", "epsilon": 1.0,
                "domain": ["firefox", "chrome", "safari", "edge"], "mechanism": "grr"},
    "page": {"name": "page", "kind": "categorical", "epsilon": 1.0,
             "domain": [f"p{i}" for i in range(20)], "mechanism": "oue"},
    "country": {"name": "country", "kind": "categorical", "epsilon": 1.0,
                "domain": [f"c{i}" for i in range(50)], "mechanism": "olh"},
    "dark_mode": {"name": "dark_mode", "kind": "boolean", "epsilon": 1.0,
                  "mechanism": "binary_rr"},
    "load_ms": {"name": "load_ms", "kind": "numeric", "epsilon": 1.0, "lo": 0, "hi": 5000},
    "memo_page": {"name": "memo_page", "kind": "categorical", "epsilon": 1.0,
                  "domain": [f"p{i}" for i in range(10)], "mechanism": "oue",
                  "longitudinal": {"epsilon_inf": 4.0}},
}


def today(epoch_seconds: int = 86400) -> int:
    """The epoch that contains NOW: a fixed epoch for the reports a test posts (a
    collector on NOW or on the real clock accepts it until well after the session)."""
    return int(NOW // epoch_seconds)


def current(epoch_seconds: int = 86400) -> int:
    """The epoch that contains this moment, read afresh: what a service on the real
    clock (a uvicorn process, the SDK) takes as now.  It can differ from ``today()``
    once the session has run across midnight UTC (for hours, across any hour)."""
    return int(time.time() // epoch_seconds)


def device_secret(device: int) -> bytes:
    """A stable per-device secret for tests (real devices draw 32 random bytes)."""
    return device.to_bytes(8, "big") * 4


def envelope(
    metric: str,
    version: int,
    epoch: int,
    payload: Payload,
    *,
    device: int | None = None,
    report_id: str | None = None,
    period: str = "day",
) -> Envelope:
    """One report with a valid token of its epoch (``tests.support.tokens``;
    ``period``: the metric's epoch length); ``device`` fixes the token's nonce, so
    one device's reports of an epoch share it, as a device's token (a random
    device if None)."""
    nonce = device_nonce(device, period, epoch) if device is not None else None
    return Envelope(
        metric, version, epoch, report_id or secrets.token_hex(16),
        mint(period, epoch, nonce=nonce), payload,
    )
