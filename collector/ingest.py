"""Reading a request body safely, and validating a batch of reports.

The body is read incrementally and refused (413) as soon as it passes
``max_bytes``; a gzip body is inflated with ``max_length`` so that a gzip
bomb is refused after inflating at most ``max_inflated + 1`` bytes.

Validation of one report, in this order (the first failure is its code):

    unknown_metric      metric is not a registered name (or not a string)
    unknown_version     the name exists, the version does not (or is not an int)
    bad_epoch           epoch is not an integer
    epoch_in_future     epoch > current epoch + clock skew (default 1 epoch)
    epoch_expired       the epoch ended more than the acceptance window ago
                        (LDP_ACCEPTANCE_HOURS, default 96 h; its per-report
                        state is gone) or is older than the retention
    bad_report_id       report_id is not 32 lowercase hex characters
    bad_token           token is not base64url text of 43..1400 characters; later
                        (``collector.tokens``, off the event loop) also a token
                        whose signature does not verify for the report's epoch
                        (its metric's epoch length and the epoch index)
    epoch_v1_only       (``collector.tokens``) a version-2 token in an epoch open
                        when the first version-2 collector started: only
                        version-1 tokens count there
    <mechanism code>    ``spec.build().decode(payload)`` raised ReportError(code):
                        payload_type, bucket_out_of_range, seed_out_of_range,
                        bitvector_length, payload_encoding, bit_out_of_range
    implausible_report  a unary-encoding report with more set bits than an honest
                        device sends but with probability 1e-9
                        (``collector.plausibility``); also listed in
                        ``Verdict.implausible`` so that the store counts it

>>> check_report_id("9f86d081884c7d659a2feaa0c55ad015"), check_report_id("XYZ")
(True, False)
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import orjson

from collector.plausibility import max_set_bits
from collector.store import ValidReport
from ldp_core.errors import ReportError
from ldp_core.metric import NAME_PATTERN, MetricSpec
from ldp_core.wire import COLUMNS, check_shape, decode_binary
from ldp_server.problems import Problem

__all__ = [
    "Columns",
    "EpochWindow",
    "Verdict",
    "check_report_id",
    "check_token",
    "inflate",
    "metric_keys",
    "parse_binary",
    "parse_columns",
    "read_limited",
    "validate",
]

_REPORT_ID = re.compile(r"[0-9a-f]{32}")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43,1400}")
_HEX = b"0123456789abcdef"
_B64URL = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _always(value: str) -> bool:
    """Every value passes (the batch was checked as a whole)."""
    return True


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
            415,
            "unsupported_encoding",
            f"Content-Encoding must be gzip or identity, not {encoding!r}",
        )
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, max_inflated + 1)
    except zlib.error:
        raise Problem(400, "invalid_gzip", "the body is not valid gzip") from None
    if len(out) > max_inflated or inflater.unconsumed_tail:
        raise Problem(413, "body_too_large", f"the inflated body exceeds {max_inflated} bytes")
    if not inflater.eof or inflater.unused_data:
        raise Problem(400, "invalid_gzip", "the gzip body is truncated or has trailing data")
    return out


def _too_large(limit: int) -> Problem:
    return Problem(413, "body_too_large", f"the body exceeds {limit} bytes")


@dataclass(frozen=True)
class EpochWindow:
    """Epochs accepted at a moment: [now - retention, now + skew], per epoch length,
    and (``acceptance_seconds``) only while ``now`` <= the epoch's end + that window."""

    now: float
    retention_seconds: int
    skew_epochs: int
    acceptance_seconds: int | None = None

    def check(self, spec: MetricSpec, epoch: int) -> str | None:
        current = spec.epoch_at(self.now)
        if epoch > current + self.skew_epochs:
            return "epoch_in_future"
        if epoch < current - math.ceil(self.retention_seconds / spec.epoch_seconds):
            return "epoch_expired"
        if (self.acceptance_seconds is not None
                and (epoch + 1) * spec.epoch_seconds + self.acceptance_seconds < self.now):
            return "epoch_expired"
        return None


@dataclass(frozen=True)
class Columns:
    """The six columns of a batch (ldp_core.wire), shape-checked, values unchecked."""

    metric: list[Any]
    version: list[Any]
    epoch: list[Any]
    report_id: list[Any]
    token: list[Any]
    payload: list[Any]

    def __len__(self) -> int:
        return len(self.metric)


def parse_binary(body: bytes) -> Columns:
    """The columns of a binary batch (``ldp_core.wire.BINARY_MEDIA``), or Problem 400
    batch_shape / batch_size (a malformed body names its fault)."""
    try:
        columns = decode_binary(body, orjson.loads)
    except ReportError as exc:
        raise Problem(400, exc.code, str(exc)) from None
    return parse_columns(columns)


def parse_columns(body: object) -> Columns:
    """The columns of a batch (shape checked by ``ldp_core.wire.check_shape``), or
    Problem 400 batch_shape / batch_size."""
    try:
        columns = check_shape(body)
    except ReportError as exc:
        raise Problem(400, exc.code, str(exc)) from None
    return Columns(*(columns[c] for c in COLUMNS))


@dataclass(frozen=True)
class Verdict:
    """The reports that may be stored (with their batch positions) and the codes of the
    rest; ``implausible`` are the well-formed reports refused as implausible_report
    (the store counts them per metric-epoch)."""

    valid: tuple[ValidReport, ...]
    positions: tuple[int, ...]
    rejected: Mapping[int, str]
    implausible: tuple[ValidReport, ...] = ()


def metric_keys(cols: Columns) -> set[tuple[str, int]]:
    """The distinct (metric, version) pairs of a batch that could name a metric."""
    pairs = {
        (m, v)
        for m, v in zip(cols.metric, cols.version, strict=True)
        if type(m) is str and type(v) is int
    }
    return {(m, v) for m, v in pairs if 0 < v < 1 << 31 and NAME_PATTERN.match(m)}


def validate(
    cols: Columns,
    specs: Mapping[tuple[str, int], MetricSpec],
    known_names: set[str],
    window: EpochWindow,
) -> Verdict:
    """Check every report without Redis; see the module docstring for the order.

    Rows are grouped by (metric, version); inside a group the epoch verdict is
    computed once per distinct epoch.  A group whose rows are all well formed
    (every id and token checked by one regex pass over the joined column, every
    epoch accepted, int payloads that are their own counter,
    ``Mechanism.direct_payload``, all in range) is taken in bulk; any other
    group is checked report by report, falling back to ``decode`` for the code.
    """
    valid: list[ValidReport] = []
    positions: list[int] = []
    rejected: dict[int, str] = {}
    implausible: list[ValidReport] = []
    groups = _groups(cols, known_names, rejected)
    epochs, rids, tokens, payloads = cols.epoch, cols.report_id, cols.token, cols.payload
    well_formed = _ids_and_tokens_ok(rids, tokens)
    rid_ok: Callable[[str], object] = _always if well_formed else _REPORT_ID.fullmatch
    token_ok: Callable[[str], object] = _always if well_formed else _TOKEN.fullmatch
    for key, rows in groups.items():
        spec = specs.get(key)
        if spec is None:
            code = "unknown_version" if key[0] in known_names else "unknown_metric"
            rejected.update(dict.fromkeys(rows, code))
            continue
        mech = spec.build()
        int_size = mech.direct_payload or 0
        bit_limit = max_set_bits(mech)
        epoch_codes: dict[int, str | None] = {}
        if well_formed and int_size and (bit_limit is None or bit_limit >= 1):
            group_payloads = [payloads[i] for i in rows]
            group_epochs = [epochs[i] for i in rows]
            distinct = set(map(type, group_epochs)) | set(map(type, group_payloads))
            if distinct == {int} and min(group_payloads) >= 0 and max(group_payloads) < int_size:
                for epoch in set(group_epochs):
                    epoch_codes[epoch] = window.check(spec, epoch)
                if not any(epoch_codes.values()):
                    valid += map(ValidReport, repeat(spec), group_epochs,
                                 [rids[i] for i in rows], [tokens[i] for i in rows],
                                 [(p,) for p in group_payloads])
                    positions += rows
                    continue
        for i in rows:
            epoch = epochs[i]
            if type(epoch) is not int:
                rejected[i] = "bad_epoch"
                continue
            if epoch not in epoch_codes:
                epoch_codes[epoch] = window.check(spec, epoch)
            late_or_early = epoch_codes[epoch]
            if late_or_early:
                rejected[i] = late_or_early
                continue
            rid, token, payload = rids[i], tokens[i], payloads[i]
            if type(rid) is not str or not rid_ok(rid):
                rejected[i] = "bad_report_id"
                continue
            if type(token) is not str or not token_ok(token):
                rejected[i] = "bad_token"
                continue
            counters: tuple[int, ...]
            if int_size and type(payload) is int and 0 <= payload < int_size:
                counters = (payload,)
            else:
                try:
                    counters = mech.counters(mech.decode(payload))
                except ReportError as exc:
                    rejected[i] = exc.code
                    continue
            if bit_limit is not None and len(counters) > bit_limit:
                rejected[i] = "implausible_report"
                implausible.append(ValidReport(spec, epoch, rid, token, counters))
                continue
            valid.append(ValidReport(spec, epoch, rid, token, counters))
            positions.append(i)
    return Verdict(tuple(valid), tuple(positions), rejected, tuple(implausible))


def _groups(
    cols: Columns, known_names: set[str], rejected: dict[int, str]
) -> dict[tuple[str, int], list[int]]:
    """The rows of each (metric, version) pair of str and int; the rest are refused."""
    metric, version = cols.metric, cols.version
    groups: dict[tuple[str, int], list[int]] = {}
    if set(map(type, metric)) == {str} and set(map(type, version)) == {int}:
        pairs = list(zip(metric, version, strict=True))
        distinct = dict.fromkeys(pairs)
        if len(distinct) == 1:
            return {pairs[0]: list(range(len(pairs)))}
        # Vectorised: a stable sort of the pairs' codes splits the rows by group.
        index = {pair: k for k, pair in enumerate(distinct)}
        codes = np.fromiter(map(index.__getitem__, pairs), dtype=np.intp, count=len(pairs))
        order = np.argsort(codes, kind="stable")
        bounds = np.cumsum(np.bincount(codes, minlength=len(index)))[:-1]
        return {pair: rows.tolist() for pair, rows in zip(distinct, np.split(order, bounds),
                                                           strict=True)}
    for i, (m, v) in enumerate(zip(metric, version, strict=True)):
        if type(m) is str and type(v) is int:
            groups.setdefault((m, v), []).append(i)
        else:
            known = type(m) is str and m in known_names
            rejected[i] = "unknown_version" if known else "unknown_metric"
    return groups


def _ids_and_tokens_ok(rids: list[Any], tokens: list[Any]) -> bool:
    """Whether every id and token of the batch is well formed, checked per column:
    the lengths, then the alphabet of the joined column (``bytes.translate`` deletes
    the allowed characters: what is left must be the separators alone).

    >>> _ids_and_tokens_ok(["0" * 32], ["A" * 43]), _ids_and_tokens_ok(["0" * 32], ["A=" * 43])
    (True, False)
    """
    if not (set(map(type, rids)) == {str} and set(map(type, tokens)) == {str}):
        return False
    if set(map(len, rids)) != {32} or not 43 <= min(map(len, tokens)) <= max(
            map(len, tokens)) <= 1400:
        return False
    joined_ids, joined_tokens = "\n".join(rids), "\n".join(tokens)
    if not (joined_ids.isascii() and joined_tokens.isascii()):
        return False
    separators = b"\n" * (len(rids) - 1)
    return (joined_ids.encode().translate(None, _HEX) == separators
            and joined_tokens.encode().translate(None, _B64URL) == separators)
