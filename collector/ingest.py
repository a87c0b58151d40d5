"""Reading a request body safely, and validating a batch of reports.

The body is read incrementally and refused (413) as soon as it passes
``max_bytes``; a gzip body is inflated with ``max_length`` so that a gzip
bomb is refused after inflating at most ``max_inflated + 1`` bytes.

Validation of one report, in this order (the first failure is its code):

    unknown_metric      metric is not a registered name (or not a string)
    unknown_version     the name exists, the version does not (or is not an int)
    bad_epoch           epoch is not an integer
    epoch_in_future     epoch > current epoch + clock skew (default 1 epoch)
    epoch_expired       epoch older than the retention (default 31 days of epochs)
    bad_report_id       report_id is not 32 lowercase hex characters
    bad_token           token is not 64 lowercase hex characters
    <mechanism code>    ``spec.build().decode(payload)`` raised ReportError(code):
                        payload_type, bucket_out_of_range, seed_out_of_range,
                        bitvector_length, payload_encoding, bit_out_of_range

>>> check_report_id("9f86d081884c7d659a2feaa0c55ad015"), check_report_id("XYZ")
(True, False)
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from collector.problems import Problem
from collector.store import ValidReport
from ldp_core.errors import ReportError
from ldp_core.metric import MetricSpec
from ldp_core.wire import Envelope

__all__ = [
    "EpochWindow",
    "Verdict",
    "check_report_id",
    "check_token",
    "inflate",
    "read_limited",
    "validate",
]

_REPORT_ID = re.compile(r"[0-9a-f]{32}")
_TOKEN = re.compile(r"[0-9a-f]{64}")


def check_report_id(value: object) -> bool:
    return isinstance(value, str) and _REPORT_ID.fullmatch(value) is not None


def check_token(value: object) -> bool:
    return isinstance(value, str) and _TOKEN.fullmatch(value) is not None


async def read_limited(
    chunks: AsyncIterator[bytes], max_bytes: int, declared_length: str | None
) -> bytes:
    """The whole body, or Problem 413 as soon as it passes ``max_bytes``."""
    if declared_length is not None:
        try:
            if int(declared_length) > max_bytes:
                raise _too_large(max_bytes)
        except ValueError:
            raise Problem(400, "invalid_request", "Content-Length is not a number") from None
    parts: list[bytes] = []
    total = 0
    async for chunk in chunks:
        total += len(chunk)
        if total > max_bytes:
            raise _too_large(max_bytes)
        parts.append(chunk)
    return b"".join(parts)


def inflate(raw: bytes, content_encoding: str | None, max_inflated: int) -> bytes:
    """The body after Content-Encoding (identity or gzip); 415 for any other."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return raw
    if encoding not in ("gzip", "x-gzip"):
        raise Problem(
            415, "unsupported_encoding",
            f"Content-Encoding must be gzip or identity, not {encoding!r}",
        )
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, max_inflated + 1)
    except zlib.error:
        raise Problem(400, "invalid_gzip", "the body is not valid gzip") from None
    if len(out) > max_inflated or inflater.unconsumed_tail:
        raise Problem(
            413, "body_too_large", f"the inflated body exceeds {max_inflated} bytes"
        )
    if not inflater.eof or inflater.unused_data:
        raise Problem(400, "invalid_gzip", "the gzip body is truncated or has trailing data")
    return out


def _too_large(limit: int) -> Problem:
    return Problem(413, "body_too_large", f"the body exceeds {limit} bytes")


@dataclass(frozen=True)
class EpochWindow:
    """Epochs accepted at a moment: [now - retention, now + skew], per epoch length."""

    now: float
    retention_seconds: int
    skew_epochs: int

    def check(self, spec: MetricSpec, epoch: int) -> str | None:
        current = spec.epoch_at(self.now)
        if epoch > current + self.skew_epochs:
            return "epoch_in_future"
        if epoch < current - math.ceil(self.retention_seconds / spec.epoch_seconds):
            return "epoch_expired"
        return None


@dataclass(frozen=True)
class Verdict:
    """The reports that may be stored (with their batch positions) and the codes of the rest."""

    valid: tuple[ValidReport, ...]
    positions: tuple[int, ...]
    rejected: Mapping[int, str]


def validate(
    envelopes: Sequence[Envelope],
    specs: Mapping[tuple[str, int], MetricSpec],
    known_names: set[str],
    window: EpochWindow,
) -> Verdict:
    """Check every report without Redis; see the module docstring for the order."""
    valid: list[ValidReport] = []
    positions: list[int] = []
    rejected: dict[int, str] = {}
    for i, env in enumerate(envelopes):
        metric, version, epoch = env.metric, env.version, env.epoch
        spec = None
        if isinstance(metric, str) and isinstance(version, int) and not isinstance(version, bool):
            spec = specs.get((metric, version))
        if spec is None:
            known = isinstance(metric, str) and metric in known_names
            rejected[i] = "unknown_version" if known else "unknown_metric"
            continue
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            rejected[i] = "bad_epoch"
            continue
        late_or_early = window.check(spec, epoch)
        if late_or_early:
            rejected[i] = late_or_early
            continue
        if not check_report_id(env.report_id):
            rejected[i] = "bad_report_id"
            continue
        if not check_token(env.token):
            rejected[i] = "bad_token"
            continue
        mech = spec.build()
        try:
            counters = mech.counters(mech.decode(env.payload))
        except ReportError as exc:
            rejected[i] = exc.code
            continue
        valid.append(ValidReport(spec, epoch, env.report_id, env.token, counters))
        positions.append(i)
    return Verdict(tuple(valid), tuple(positions), rejected)
