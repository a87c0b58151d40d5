"""The wire format of a batch of reports (POST /v1/reports).

A batch is columnar, one array per field, all of one length (<= 1000):

    {"metric":    ["browser", "browser"],
     "version":   [1, 1],
     "epoch":     [20421, 20421],
     "report_id": ["9f86d081884c7d659a2feaa0c55ad015", ...],   # 128 random bits, hex
     "token":     ["<64 hex>", ...],                           # HMAC-SHA256, hex
     "payload":   [3, 7]}                                      # the mechanism's wire form

Columns parse faster than a list of objects and validate in bulk.  The token
is HMAC(device secret, "metric|version|epoch"): one report per device, metric
and epoch, and tokens of different epochs or metrics cannot be linked.

>>> env = Envelope("m", 1, 5, "00" * 16, "11" * 32, 1)
>>> decode_batch(encode_batch([env])) == [env]
True
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ldp_core.base import Payload
from ldp_core.errors import ReportError

__all__ = [
    "COLUMNS",
    "MAX_BATCH",
    "Envelope",
    "decode_batch",
    "device_token",
    "encode_batch",
]

MAX_BATCH = 1000
COLUMNS = ("metric", "version", "epoch", "report_id", "token", "payload")
REPORT_ID = re.compile(r"^[0-9a-f]{32}$")
TOKEN = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Envelope:
    """One randomised report and what routes it; never holds a true value."""

    metric: str
    version: int
    epoch: int
    report_id: str
    token: str
    payload: Payload


def device_token(secret: bytes, metric: str, version: int, epoch: int) -> str:
    """HMAC-SHA256(secret, "metric|version|epoch"), hex: the per-epoch device token."""
    message = f"{metric}|{version}|{epoch}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def encode_batch(envelopes: Sequence[Envelope]) -> dict[str, list[Any]]:
    """The columnar JSON object for a batch."""
    return {
        "metric": [e.metric for e in envelopes],
        "version": [e.version for e in envelopes],
        "epoch": [e.epoch for e in envelopes],
        "report_id": [e.report_id for e in envelopes],
        "token": [e.token for e in envelopes],
        "payload": [e.payload for e in envelopes],
    }


def decode_batch(body: object) -> list[Envelope]:
    """Envelopes from a columnar batch; ``ReportError`` for a malformed batch.

    Only the shape of the batch is checked here; each payload is checked by its
    metric's mechanism (``Mechanism.decode``).
    """
    if not isinstance(body, dict):
        raise ReportError("batch_shape", "batch must be a JSON object of columns")
    missing = [c for c in COLUMNS if c not in body]
    extra = [c for c in body if c not in COLUMNS]
    if missing or extra:
        raise ReportError(
            "batch_shape",
            f"batch columns must be {', '.join(COLUMNS)}; missing {missing}, unknown {extra}",
        )
    columns = [body[c] for c in COLUMNS]
    if not all(isinstance(col, list) for col in columns):
        raise ReportError("batch_shape", "every column must be a JSON array")
    lengths = {len(col) for col in columns}
    if len(lengths) != 1:
        raise ReportError("batch_shape", f"columns differ in length: {sorted(lengths)}")
    (size,) = lengths
    if not 0 < size <= MAX_BATCH:
        raise ReportError("batch_size", f"a batch holds 1 to {MAX_BATCH} reports, got {size}")
    return [Envelope(*row) for row in zip(*columns, strict=True)]
