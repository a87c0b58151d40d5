"""The binary batch of ldp_core.wire: it carries exactly the JSON columns, and any
damaged body is refused with batch_shape or batch_size, never another error."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from ldp_core.errors import ReportError
from ldp_core.wire import MAX_BATCH, decode_binary, encode_binary


def columns(rng: random.Random, n: int, payload: str) -> dict[str, list[Any]]:
    units = [(f"m{u}", rng.randrange(1, 5), 20000 + rng.randrange(3)) for u in range(3)]
    tokens = ["".join(rng.choices("abcXYZ019-_", k=rng.choice((43, 214, 384))))
              for _ in range(rng.randrange(1, n + 1))]
    picked = [rng.choice(units) for _ in range(n)]
    payloads: list[Any] = {
        "ints": [rng.randrange(2**32) for _ in range(n)],
        "pairs": [[rng.randrange(2**32), rng.randrange(64)] for _ in range(n)],
        "json": [rng.choice(["AAAA", 3.5, [1, 2, 3], None, -1, 2**40]) for _ in range(n)],
    }[payload]
    return {
        "metric": [u[0] for u in picked],
        "version": [u[1] for u in picked],
        "epoch": [u[2] for u in picked],
        "report_id": [rng.randbytes(16).hex() for _ in range(n)],
        "token": [rng.choice(tokens) for _ in range(n)],
        "payload": payloads,
    }


@pytest.mark.parametrize("payload", ["ints", "pairs", "json"])
@pytest.mark.parametrize("n", [1, 2, 37, MAX_BATCH])
def test_round_trip_is_exact(payload: str, n: int) -> None:
    cols = columns(random.Random(n), n, payload)
    assert decode_binary(encode_binary(cols)) == cols
    assert decode_binary(encode_binary(cols), json.loads) == cols


def test_shared_tokens_and_units_are_written_once() -> None:
    cols = columns(random.Random(1), MAX_BATCH, "ints")
    cols["token"] = [cols["token"][0]] * MAX_BATCH
    body = encode_binary(cols)
    # 16-byte ids + 2 + 2 bytes of indices + 4 of payload per report, one 384-char token at most.
    assert len(body) < MAX_BATCH * 24 + 600
    assert decode_binary(body) == cols


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"report_id": ["AB" * 16]}, "lowercase hex"),
        ({"report_id": ["ab" * 15]}, "lowercase hex"),
        ({"token": ["a,b" * 20]}, "comma"),
        ({"metric": ["é"]}, "ascii"),
        ({"version": [2**32]}, "does not fit"),
        ({"epoch": [-1]}, "does not fit"),
    ],
)
def test_values_it_cannot_hold_are_refused_by_the_encoder(
    change: dict[str, list[Any]], message: str
) -> None:
    cols = {**columns(random.Random(2), 1, "ints"), **change}
    with pytest.raises(ValueError, match=message):
        encode_binary(cols)


def test_every_damaged_body_is_batch_shape_or_batch_size() -> None:
    """Truncations, extensions and flipped bytes of real bodies (seeded): each decodes
    to well-shaped columns or raises ReportError batch_shape | batch_size."""
    rng = random.Random(17)
    bodies = [encode_binary(columns(rng, n, p)) for n in (1, 5, 40) for p in ("ints", "pairs",
                                                                              "json")]
    outcomes: dict[str, int] = {}
    for _ in range(4000):
        body = bytearray(rng.choice(bodies))
        action = rng.randrange(4)
        if action == 0:
            del body[rng.randrange(len(body)):]
        elif action == 1:
            body += rng.randbytes(rng.randrange(1, 9))
        elif action == 2:
            for _ in range(rng.randrange(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        else:
            body = bytearray(rng.randbytes(rng.randrange(40)))
        try:
            cols = decode_binary(bytes(body))
        except ReportError as exc:
            assert exc.code in ("batch_shape", "batch_size"), exc.code
            outcomes[exc.code] = outcomes.get(exc.code, 0) + 1
            continue
        lengths = {len(v) for v in cols.values()}
        assert len(lengths) == 1 and 0 < lengths.pop() <= MAX_BATCH
        outcomes["decoded"] = outcomes.get("decoded", 0) + 1
    # Both outcomes occur (a flipped id or payload byte still decodes).
    assert outcomes["batch_shape"] > 1000 and outcomes["decoded"] > 50, outcomes


def test_the_magic_and_the_size_are_checked() -> None:
    body = encode_binary(columns(random.Random(3), 2, "ints"))
    with pytest.raises(ReportError, match="starts with") as bad:
        decode_binary(b"{" + body[1:])
    assert bad.value.code == "batch_shape"
    with pytest.raises(ReportError) as empty:
        decode_binary(body[:5] + b"\x00\x00" + body[7:])
    assert empty.value.code == "batch_size"
