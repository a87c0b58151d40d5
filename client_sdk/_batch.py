"""The HTTP side of one delivery: the batch body and the collector's answers.

>>> from client_sdk._store import Claimed
>>> body = batch_body([Claimed(1, "0" * 32, "m", 1, 7, "f" * 64, "[3,1]")])
>>> json.loads(body)["payload"]
[[3, 1]]
>>> parse_results(b'{"results": [{"status": "duplicate", "code": null}]}', 1)
[('duplicate', None)]
>>> parse_results(b'{"results": []}', 1) is None          # unreadable: retry, never drop
True
>>> problem_code(Response(401, {}, b'{"code": "invalid_key"}'))
'invalid_key'
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from client_sdk._store import Claimed
from client_sdk._transport import Response
from ldp_core.wire import batch_json

__all__ = ["batch_body", "parse_results", "problem_code"]


def batch_body(claimed: Sequence[Claimed]) -> bytes:
    """The columnar batch, encoded by ``ldp_core.wire``; payloads are already JSON text."""
    return batch_json(
        [c.metric for c in claimed],
        [c.version for c in claimed],
        [c.epoch for c in claimed],
        [c.report_id for c in claimed],
        [c.token for c in claimed],
        [c.payload for c in claimed],
    ).encode()


def parse_results(body: bytes, expected: int) -> list[tuple[str, str | None]] | None:
    try:
        data = json.loads(body)
        results = data["results"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(results, list) or len(results) != expected:
        return None
    out: list[tuple[str, str | None]] = []
    for item in results:
        status = item.get("status") if isinstance(item, dict) else None
        if status not in ("accepted", "duplicate", "rejected"):
            return None
        code = item.get("code")
        out.append((status, code if isinstance(code, str) else None))
    return out


def problem_code(answer: Response) -> str | None:
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        data: Any = json.loads(answer.body)
        code = data.get("code")
        if isinstance(code, str) and code.replace("_", "").isalnum() and len(code) <= 64:
            return code
    return None
