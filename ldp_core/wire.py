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

The same columns travel as a compact binary batch (``BINARY_MEDIA``,
content-negotiated beside JSON; ``encode_binary`` / ``decode_binary``): each
distinct unit (metric, version, epoch) and each distinct token is written once
and every report names them by index, report ids are 16 raw bytes and integer
payloads 4 bytes: 50 devices x 20 metrics with 2048-bit tokens are 44 KB
instead of 447 KB of JSON, decoded with ``struct`` and C-level splits:

>>> cols = encode_batch([env, Envelope("m", 1, 5, "ff" * 16, "11" * 32, 7)])
>>> decode_binary(encode_binary(cols)) == cols
True
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ldp_core import Payload
from ldp_core.errors import ReportError

__all__ = [
    "BINARY_MEDIA",
    "COLUMNS",
    "MAX_BATCH",
    "REPORT_ID",
    "TOKEN",
    "Envelope",
    "batch_json",
    "check_shape",
    "decode_batch",
    "decode_binary",
    "device_token",
    "encode_batch",
    "encode_binary",
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


# -- the binary batch -------------------------------------------------------------------
#
# Content-Type: application/vnd.ldp.batch (``BINARY_MEDIA``); all integers big-endian.
#
#     magic      5 bytes  b"LDPB" 0x01 (format 1)
#     n          u16      reports, 1..MAX_BATCH
#     U          u16      distinct units; U times: u8 length, metric name (ASCII),
#                         u32 version, u32 epoch
#     units      n x u16  each report's unit (index into the U units)
#     report_id  n x 16   raw bytes (the hex text of the JSON batch)
#     T          u16      distinct tokens; u32 length L, then L bytes: the T tokens
#                         (ASCII, base64url: never a comma) joined by ","
#     tokens     n x u16  each report's token (index into the T tokens)
#     kind       u8       the payload column: 0 = n x u32 integers (GRR, binary RR,
#                         1BitMean ...); 1 = n x (u32, u32) pairs, read as [a, b]
#                         lists (OLH's [seed, bucket]); 2 = u32 length, then a JSON
#                         array of the n payloads (every other wire form)
#
# A body that breaks this layout (short, long, an index out of range, not ASCII)
# is ``ReportError("batch_shape")``; n out of range is ``batch_size``.

BINARY_MEDIA = "application/vnd.ldp.batch"
_MAGIC = b"LDPB\x01"
_U32 = 1 << 32


def encode_binary(columns: Mapping[str, Sequence[Any]]) -> bytes:
    """The binary batch of ``COLUMNS``; ``ValueError`` naming a value it cannot hold
    (then send JSON: names, versions and epochs it cannot hold are invalid anyway)."""
    n = len(columns["metric"])
    if not 0 < n <= MAX_BATCH:
        raise ValueError(f"a batch holds 1 to {MAX_BATCH} reports, got {n}")
    units: dict[tuple[str, int, int], int] = {}
    tokens: dict[str, int] = {}
    unit_ix = [units.setdefault((m, v, e), len(units)) for m, v, e in zip(
        columns["metric"], columns["version"], columns["epoch"], strict=True)]
    token_ix = [tokens.setdefault(t, len(tokens)) for t in columns["token"]]
    out = [_MAGIC, struct.pack(">HH", n, len(units))]
    for (name, version, epoch) in units:
        raw = name.encode("ascii")
        if not (len(raw) < 256 and 0 <= version < _U32 and 0 <= epoch < _U32):
            raise ValueError(f"unit {(name, version, epoch)!r} does not fit the binary batch")
        out.append(struct.pack(f">B{len(raw)}sII", len(raw), raw, version, epoch))
    out.append(struct.pack(f">{n}H", *unit_ix))
    ids = "".join(columns["report_id"])
    raw_ids = bytes.fromhex(ids) if len(ids) == 32 * n else b""
    if raw_ids.hex() != ids:
        raise ValueError("every report_id must be 32 lowercase hex characters")
    out.append(raw_ids)
    joined = ",".join(tokens).encode("ascii")
    if joined.count(b",") != len(tokens) - 1:
        raise ValueError("a token holds a comma: send the JSON batch")
    out.append(struct.pack(">HI", len(tokens), len(joined)) + joined)
    out.append(struct.pack(f">{n}H", *token_ix))
    payloads = columns["payload"]
    if all(type(p) is int and 0 <= p < _U32 for p in payloads):
        out.append(struct.pack(f">B{n}I", 0, *payloads))
    elif all(type(p) is list and len(p) == 2 and all(type(x) is int and 0 <= x < _U32
                                                        for x in p) for p in payloads):
        out.append(struct.pack(f">B{2 * n}I", 1, *(x for p in payloads for x in p)))
    else:
        text = json.dumps(list(payloads), separators=(",", ":")).encode()
        out.append(struct.pack(">BI", 2, len(text)) + text)
    return b"".join(out)


def decode_binary(
    body: bytes, loads: Callable[[bytes], Any] = json.loads
) -> dict[str, list[Any]]:
    """The columns of a binary batch (as ``check_shape`` returns them for JSON).

    ``loads`` parses the JSON payload column (kind 2; the collector passes orjson's).
    """
    try:
        return _decode_binary(memoryview(body), loads)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, ReportError):
            raise
        raise ReportError("batch_shape", f"malformed binary batch: {exc}") from None


def _decode_binary(body: memoryview, loads: Callable[[bytes], Any]) -> dict[str, list[Any]]:
    if body[:5] != _MAGIC:
        raise ReportError("batch_shape", f"a binary batch starts with {_MAGIC!r}")
    n, u = struct.unpack_from(">HH", body, 5)
    if not 0 < n <= MAX_BATCH:
        raise ReportError("batch_size", f"a batch holds 1 to {MAX_BATCH} reports, got {n}")
    at = 9
    units: list[tuple[str, int, int]] = []
    for _ in range(u):
        size = body[at]
        name = str(body[at + 1: at + 1 + size], "ascii")
        version, epoch = struct.unpack_from(">II", body, at + 1 + size)
        units.append((name, version, epoch))
        at += 9 + size
    unit_ix = struct.unpack_from(f">{n}H", body, at)
    at += 2 * n
    ids = body[at: at + 16 * n].hex(",", 16).split(",")
    if len(ids) != n or len(ids[0]) != 32:  # grouped from the right: a short one is first
        raise ReportError("batch_shape", "binary batch: report ids are cut short")
    at += 16 * n
    t, size = struct.unpack_from(">HI", body, at)
    at += 6
    tokens = str(body[at: at + size], "ascii").split(",")
    if len(tokens) != t or at + size > len(body):
        raise ReportError("batch_shape", f"binary batch: {t} tokens announced, "
                          f"{len(tokens)} found")
    at += size
    token_ix = struct.unpack_from(f">{n}H", body, at)
    at += 2 * n
    kind = body[at]
    payload: list[Any]
    if kind == 0:
        payload = list(struct.unpack_from(f">{n}I", body, at + 1))
        at += 1 + 4 * n
    elif kind == 1:
        flat = struct.unpack_from(f">{2 * n}I", body, at + 1)
        payload = [list(flat[i: i + 2]) for i in range(0, 2 * n, 2)]
        at += 1 + 8 * n
    elif kind == 2:
        (size,) = struct.unpack_from(">I", body, at + 1)
        text = bytes(body[at + 5: at + 5 + size])
        at += 5 + size
        parsed = loads(text)
        if type(parsed) is not list or len(parsed) != n:
            raise ReportError("batch_shape", f"binary batch: the payload column must be a "
                              f"JSON array of {n} values")
        payload = parsed
    else:
        raise ReportError("batch_shape", f"binary batch: unknown payload kind {kind}")
    if at != len(body):
        raise ReportError("batch_shape", f"binary batch: {len(body) - at} bytes left over "
                          "(or cut short)")
    # An index out of range raises IndexError: batch_shape.
    if u == 1 and not any(unit_ix):
        metric, version, epoch = ([x] * n for x in units[0])
    else:
        metric, version, epoch = (list(map(column.__getitem__, unit_ix))
                                  for column in map(list, zip(*units, strict=True)))
    return {
        "metric": metric,
        "version": version,
        "epoch": epoch,
        "report_id": ids,
        "token": list(map(tokens.__getitem__, token_ix)),
        "payload": payload,
    }
