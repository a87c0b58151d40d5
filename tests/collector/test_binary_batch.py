"""POST /v1/reports with the binary batch (application/vnd.ldp.batch, ldp_core.wire):
the same reports, codes, tallies and exactly-once as the JSON batch, and a damaged
body is a 400 that changes nothing.  In process (ASGITransport), real Redis."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from collector.app import create_app
from ldp_core.metric import MetricSpec
from ldp_core.wire import BINARY_MEDIA, Envelope, encode_batch, encode_binary
from tests.collector.test_api import ADMIN, INGEST, assert_problem, bad_reports, settings, tallies
from tests.support.asgi import asgi_client
from tests.support.reports import NOW, SPECS, envelope, today

pytestmark = pytest.mark.anyio

BINARY = {**INGEST, "Content-Type": BINARY_MEDIA}


@pytest.fixture()
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_app(settings(redis_url), clock=lambda: NOW)) as c:
        for body in SPECS.values():
            r = await c.post("/v1/metrics", json=body, headers=ADMIN)
            assert r.status_code == 201, r.text
        yield c


async def post_binary(client: httpx.AsyncClient, envs: list[Envelope]) -> httpx.Response:
    return await client.post("/v1/reports", content=encode_binary(encode_batch(envs)),
                             headers=BINARY)


def mixed(rng: random.Random, epoch: int) -> list[Envelope]:
    """GRR (int payloads), OLH ([seed, bucket]) and OUE (text) reports, interleaved."""
    envs = []
    for name in ("browser", "country", "page"):
        m = MetricSpec.from_json(SPECS[name]).build()
        envs += [envelope(name, 1, epoch, m.encode(m.randomize(rng.randrange(4), rng=rng)))
                 for _ in range(60)]
    rng.shuffle(envs)
    return envs


async def test_binary_counts_what_json_counts_and_a_retry_in_either_is_a_duplicate(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    rng = random.Random(11)
    epoch = today()
    envs = mixed(rng, epoch)
    by_kind = {name: [e for e in envs if e.metric == name] for name in ("browser", "page")}
    assert all(type(e.payload) is int for e in by_kind["browser"])
    assert all(type(e.payload) is str for e in by_kind["page"])
    r = await post_binary(client, envs)
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] == len(envs)
    for name in ("browser", "country", "page"):
        m = MetricSpec.from_json(SPECS[name]).build()
        expected = [0] * m.num_counters
        for e in envs:
            if e.metric == name:
                for c in m.counters(m.decode(e.payload)):
                    expected[c] += 1
        assert await tallies(redis_url, name) == {epoch: (expected, 60)}
    again = (await client.post("/v1/reports", json=encode_batch(envs), headers=INGEST)).json()
    assert (again["accepted"], again["duplicates"]) == (0, len(envs))
    third = (await post_binary(client, envs[:5])).json()
    assert third["duplicates"] == 5


async def test_bad_reports_get_the_json_codes(client: httpx.AsyncClient, redis_url: str) -> None:
    epoch = today()
    bad = bad_reports(epoch)
    # A raw 16-byte id is always well formed and an epoch is always an integer: the
    # binary batch cannot carry those two faults.
    del bad["bad_report_id"], bad["bad_epoch"]
    good = envelope("browser", 1, epoch, 2)
    body = (await post_binary(client, [*bad.values(), good])).json()
    assert [x["code"] for x in body["results"]] == [*bad, None]
    assert await tallies(redis_url, "browser") == {epoch: ([0, 0, 1, 0], 1)}
    for name in ("page", "country", "dark_mode"):
        assert await tallies(redis_url, name) == {}


def damaged(body: bytes) -> dict[str, bytes]:
    return {
        "truncated": body[:-1],
        "extended": body + b"\x00",
        "magic": b"LDPB\x09" + body[5:],
        "json": b'{"metric": []}',
        "empty": b"",
    }


@pytest.mark.parametrize("fault", list(damaged(b"")))
async def test_a_damaged_body_is_400_and_changes_nothing(
    client: httpx.AsyncClient, redis_url: str, fault: str
) -> None:
    envs = [envelope("browser", 1, today(), i % 4) for i in range(10)]
    body = damaged(encode_binary(encode_batch(envs)))[fault]
    r = await client.post("/v1/reports", content=body, headers=BINARY)
    problem: dict[str, Any] = assert_problem(r, 400, "batch_shape")
    assert problem["detail"]
    assert await tallies(redis_url, "browser") == {}


async def test_a_batch_of_1001_is_batch_size(client: httpx.AsyncClient) -> None:
    envs = [envelope("browser", 1, today(), 0)] * 2
    body = bytearray(encode_binary(encode_batch(envs)))
    body[5:7] = (1001).to_bytes(2, "big")
    r = await client.post("/v1/reports", content=bytes(body), headers=BINARY)
    assert_problem(r, 400, "batch_size")


async def test_other_media_types_are_415(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/reports", content=b"x",
                          headers={**INGEST, "Content-Type": "application/msgpack"})
    assert_problem(r, 415, "unsupported_media_type")
