"""The wire format of a batch of reports (POST /v1/reports).

A batch is columnar, one array per field, all of one length (<= 1000):

    {"metric":    ["browser", "browser"],
     "version":   [1, 1],
     "epoch":     [20421, 20421],
     "report_id": ["9f86d081884c7d659a2feaa0c55ad015", ...],   # 128 random bits, hex
     "token":     ["<base64url>", ...],                        # ldp_core.tokens
     "payload":   [3, 7]}                                      # the mechanism's wire form

Columns parse faster than a list of objects and validate in bulk.  The token
is a blind-signed report token of the report's unit (``ldp_core.tokens``:
base64url, no padding, of nonce (32 bytes) || RSA signature (k bytes), 384
characters for a 2048-bit issuer key): the issuer gives one per device and
unit, and cannot link it to the device it gave it to.  ``device_token`` (the
old per-device HMAC token) is kept only for code that still imports it.

This module is the only definition of the batch: the SDK encodes with
``batch_json`` (its payloads are stored as JSON text already), tests and tools
with ``encode_batch``, and the collector checks the shape with ``check_shape``
(then validates each report against its metric without building Envelopes).

>>> env = Envelope("m", 1, 5, "00" * 16, "11" * 32, 1)
>>> decode_batch(encode_batch([env])) == [env]
True
>>> text = batch_json(["m"], [1], [5], ["00" * 16], ["11" * 32], ["[3,1]"])
>>> check_shape(json.loads(text))["payload"]
[[3, 1]]
>>> try:
...     check_shape({"metric": []})
... except ReportError as exc:
...     print(exc.code)
batch_shape
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ldp_core import Payload
from ldp_core.errors import ReportError

__all__ = [
    "COLUMNS",
    "MAX_BATCH",
    "REPORT_ID",
    "TOKEN",
    "Envelope",
    "batch_json",
    "check_shape",
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
    """HMAC-SHA256(secret, "metric|version|epoch"), hex: the old per-epoch device
    token, no longer accepted by the collector (reports carry ``ldp_core.tokens``)."""
    message = f"{metric}|{version}|{epoch}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def encode_batch(envelopes: Sequence[Envelope]) -> dict[str, list[Any]]:
    """The columnar JSON object for a batch."""
    return {column: [getattr(e, column) for e in envelopes] for column in COLUMNS}


def batch_json(
    metric: Sequence[str],
    version: Sequence[int],
    epoch: Sequence[int],
    report_id: Sequence[str],
    token: Sequence[str],
    payload_json: Sequence[str],
) -> str:
    """The batch as compact JSON text, its payloads given as JSON text already.

    The columns are those of ``COLUMNS``, in order; a device keeps each
    randomised payload encoded, so the payload column is joined, not re-encoded.
    """
    head = json.dumps(dict(zip(COLUMNS[:-1], (metric, version, epoch, report_id, token),
                               strict=True)), separators=(",", ":"))
    return f'{head[:-1]},"{COLUMNS[-1]}":[{",".join(payload_json)}]}}'


def check_shape(body: object) -> dict[str, list[Any]]:
    """The columns of a well-shaped batch, else ``ReportError`` batch_shape | batch_size.

    Only the shape is checked (a JSON object of ``COLUMNS``, arrays of one
    length in 1..``MAX_BATCH``); each value is checked by the collector against
    its metric, each payload by the metric's mechanism (``Mechanism.decode``).
    """
    if not isinstance(body, dict):
        raise ReportError("batch_shape", "batch must be a JSON object of columns")
    if len(body) != len(COLUMNS) or any(c not in body for c in COLUMNS):
        missing = [c for c in COLUMNS if c not in body]
        extra = [c for c in body if c not in COLUMNS]
        raise ReportError(
            "batch_shape",
            f"batch columns must be {', '.join(COLUMNS)}; missing {missing}, unknown {extra}",
        )
    if not all(type(body[c]) is list for c in COLUMNS):
        raise ReportError("batch_shape", "every column must be a JSON array")
    lengths = {len(body[c]) for c in COLUMNS}
    if len(lengths) != 1:
        raise ReportError("batch_shape", f"columns differ in length: {sorted(lengths)}")
    (size,) = lengths
    if not 0 < size <= MAX_BATCH:
        raise ReportError("batch_size", f"a batch holds 1 to {MAX_BATCH} reports, got {size}")
    return body


def decode_batch(body: object) -> list[Envelope]:
    """Envelopes from a columnar batch; ``ReportError`` for a malformed batch (``check_shape``)."""
    columns = check_shape(body)
    return [Envelope(*row) for row in zip(*(columns[c] for c in COLUMNS), strict=True)]
