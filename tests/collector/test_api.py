"""The collector's HTTP API in-process (ASGITransport) over a real redis-server.

Covers the metric registry, every per-report rejection code, duplicates and
token reuse, batch-level problems, keys and roles, the rate limit, /metrics,
and a scan of every Redis key and value for report ids and tokens in clear.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import redis

from collector.app import create_app
from collector.settings import Settings
from collector.store import Store
from ldp_core.errors import ReportError
from ldp_core.metric import MetricSpec
from ldp_core.tokens import unb64url
from ldp_core.version import package_version
from ldp_core.wire import Envelope, encode_batch
from tests.support.asgi import asgi_client
from tests.support.reports import NOW, SPECS, envelope, today
from tests.support.servers import ADMIN_KEY, ANALYST_KEY, INGEST_KEY, auth

pytestmark = pytest.mark.anyio

ADMIN, INGEST, ANALYST = auth(ADMIN_KEY), auth(INGEST_KEY), auth(ANALYST_KEY)


def settings(redis_url: str, **extra: Any) -> Settings:
    from tests.support.installs import CHEAP_SETTINGS

    return Settings(
        env="dev",
        redis_url=redis_url,
        admin_keys=ADMIN_KEY,
        ingest_keys=INGEST_KEY,
        analyst_keys=ANALYST_KEY,
        **{**CHEAP_SETTINGS, **extra},
    )


@pytest.fixture()
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_app(settings(redis_url), clock=lambda: NOW)) as c:
        for body in SPECS.values():
            r = await c.post("/v1/metrics", json=body, headers=ADMIN)
            assert r.status_code == 201, r.text
        yield c


async def post(client: httpx.AsyncClient, envs: list[Envelope], **kw: Any) -> httpx.Response:
    return await client.post("/v1/reports", json=encode_batch(envs), headers=INGEST, **kw)


async def tallies(redis_url: str, name: str, version: int = 1) -> dict[int, tuple[list[int], int]]:
    store = Store.connect(redis_url)
    try:
        spec = await store.get_metric(name, version)
        assert spec is not None
        return await store.read_tallies(spec, await store.epochs_with_data(spec))
    finally:
        await store.close()


def assert_problem(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["code"] == code and body["status"] == status
    assert {"type", "title", "detail"} <= set(body)
    return body


# -- metric registry -------------------------------------------------------------------------


async def test_metric_registry(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/metrics", json=SPECS["browser"], headers=ADMIN)
    assert r.status_code == 200 and r.json()["version"] == 1
    r = await client.post("/v1/metrics", json={**SPECS["browser"], "epsilon": 0.5}, headers=ADMIN)
    assert r.status_code == 201 and r.json()["version"] == 2
    auto = {
        "name": "auto_pick",
        "kind": "categorical",
        "domain": ["a", "b"],
        "epsilon": 1.0,
        "mechanism": "auto",
    }
    r = await client.post("/v1/metrics", json=auto, headers=ADMIN)
    assert r.status_code == 201 and r.json()["mechanism"] != "auto"  # resolved and recorded
    listed = (await client.get("/v1/metrics", headers=INGEST)).json()["metrics"]
    by_name = {m["name"]: m for m in listed}
    assert by_name["browser"]["version"] == 2
    assert set(by_name) == {*SPECS, "auto_pick"}
    one = (await client.get("/v1/metrics/browser", headers=INGEST)).json()
    assert one["version"] == 2 and one["epsilon"] == 0.5
    old = (await client.get("/v1/metrics/browser?version=1", headers=ADMIN)).json()
    assert old["version"] == 1 and old["epsilon"] == 1.0
    assert MetricSpec.from_json(old).to_json() == old  # what the SDK rebuilds
    assert_problem(
        await client.get("/v1/metrics/browser?version=7", headers=INGEST), 404, "unknown_version"
    )
    assert_problem(await client.get("/v1/metrics/nope", headers=INGEST), 404, "unknown_metric")
    assert_problem(
        await client.get("/v1/metrics/browser?version=x", headers=INGEST), 422, "invalid_request"
    )


async def test_invalid_specs_name_each_bad_field(client: httpx.AsyncClient) -> None:
    bad = {"name": "Bad Name", "kind": "categorical", "domain": ["a"], "epsilon": -1}
    body = assert_problem(
        await client.post("/v1/metrics", json=bad, headers=ADMIN), 422, "invalid_spec"
    )
    assert set(body["errors"]) == {"name", "domain", "epsilon"}
    body = assert_problem(
        await client.post("/v1/metrics", json={**SPECS["browser"], "version": 3}, headers=ADMIN),
        422,
        "invalid_spec",
    )
    assert set(body["errors"]) == {"version"}
    assert_problem(await client.post("/v1/metrics", json=[1], headers=ADMIN), 422, "invalid_spec")
    assert_problem(
        await client.post("/v1/metrics", content=b"{", headers=ADMIN), 400, "invalid_json"
    )


async def test_keys_and_roles(client: httpx.AsyncClient) -> None:
    assert_problem(await client.get("/v1/metrics"), 401, "missing_key")
    assert_problem(await client.get("/v1/metrics", headers=auth("x" * 30)), 401, "invalid_key")
    assert_problem(
        await client.get("/v1/metrics", headers={"Authorization": INGEST_KEY}), 401, "missing_key"
    )
    assert_problem(await client.get("/v1/metrics", headers=ANALYST), 403, "wrong_role")
    assert_problem(
        await client.post("/v1/metrics", json=SPECS["page"], headers=INGEST), 403, "wrong_role"
    )
    env = envelope("browser", 1, today(), 1)
    assert_problem(
        await client.post("/v1/reports", json=encode_batch([env]), headers=ADMIN), 403, "wrong_role"
    )
    assert (await client.get("/v1/metrics", headers=ADMIN)).status_code == 200


# -- ingest --------------------------------------------------------------------------------


async def test_good_reports_are_counted_exactly(client: httpx.AsyncClient, redis_url: str) -> None:
    rng = random.Random(7)
    epoch = today()
    page = MetricSpec.from_json(SPECS["page"]).build()
    envs = [
        envelope("page", 1, epoch, page.encode(page.randomize(rng.randrange(20), rng=rng)))
        for _ in range(300)
    ]
    envs += [envelope("browser", 1, epoch - 2, rng.randrange(4)) for _ in range(200)]
    r = await post(client, envs)
    assert r.status_code == 200
    body = r.json()
    assert (body["accepted"], body["duplicates"], body["rejected"]) == (500, 0, 0)
    assert body["results"] == [{"status": "accepted", "code": None}] * 500
    expected = [0] * page.num_counters
    for e in envs[:300]:
        for c in page.counters(page.decode(e.payload)):
            expected[c] += 1
    assert await tallies(redis_url, "page") == {epoch: (expected, 300)}
    browser = [0] * 4
    for e in envs[300:]:
        browser[e.payload] += 1  # type: ignore[index]
    assert await tallies(redis_url, "browser") == {epoch - 2: (browser, 200)}


async def test_numeric_and_longitudinal_metrics(client: httpx.AsyncClient, redis_url: str) -> None:
    rng = random.Random(5)
    epoch = today()
    memo = MetricSpec.from_json(SPECS["memo_page"]).build()
    mean = MetricSpec.from_json(SPECS["load_ms"]).build()
    envs = [envelope("memo_page", 1, epoch,
                     memo.encode(memo.randomize_memoised(3, rng.randbytes(32), "memo_page", rng)))
            for _ in range(50)]
    envs += [envelope("load_ms", 1, epoch, mean.encode(mean.randomize(1200.0, rng=rng)))
             for _ in range(50)]
    envs += [envelope("load_ms", 1, epoch, -1), envelope("memo_page", 1, epoch, "AAAA")]
    body = (await post(client, envs)).json()
    assert body["accepted"] == 100
    with pytest.raises(ReportError) as refused:  # whichever numeric mechanism auto chose
        mean.decode(-1)
    assert [r["code"] for r in body["results"][-2:]] == [refused.value.code, "bitvector_length"]
    expected = [0] * memo.num_counters
    for e in envs[:50]:
        for c in memo.counters(memo.decode(e.payload)):
            expected[c] += 1
    assert await tallies(redis_url, "memo_page") == {epoch: (expected, 50)}
    assert (await tallies(redis_url, "load_ms"))[epoch][1] == 50


async def test_retried_batch_counts_once_and_tokens_once(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    epoch = today()
    envs = [envelope("browser", 1, epoch, i % 4, device=i) for i in range(40)]
    first = (await post(client, envs)).json()
    assert first["accepted"] == 40
    again = (await post(client, envs)).json()
    assert (again["accepted"], again["duplicates"], again["rejected"]) == (0, 40, 0)
    assert again["results"][0] == {"status": "duplicate", "code": None}
    # Device 3 sends another report (new report id, its spent token) in the same
    # epoch: not counted; a reuse is answered like a retry (notes/tokens-readme.md).
    reuse = envelope("browser", 1, epoch, 0, device=3)
    out = (await post(client, [reuse, envelope("browser", 1, epoch, 0, device=99)])).json()
    assert out["results"] == [
        {"status": "duplicate", "code": None},
        {"status": "accepted", "code": None},
    ]
    assert await tallies(redis_url, "browser") == {epoch: ([11, 10, 10, 10], 41)}


async def test_one_report_answers_read_like_any_batch(client: httpx.AsyncClient) -> None:
    """A batch of one report is answered from prebuilt bytes when it names no reason
    (accepted, duplicate): the same JSON, type, length and headers as any answer."""
    epoch = today()
    one = [envelope("browser", 1, epoch, 2, device=7)]
    answers = [await post(client, one), await post(client, one),
               await post(client, [bad_reports(epoch)["epoch_in_future"]])]
    expected = [
        (1, 0, 0, {"status": "accepted", "code": None}),
        (0, 1, 0, {"status": "duplicate", "code": None}),
        (0, 0, 1, {"status": "rejected", "code": "epoch_in_future"}),
    ]
    for answer, (accepted, duplicates, rejected, result) in zip(answers, expected, strict=True):
        assert answer.status_code == 200
        assert answer.content == orjson.dumps({"accepted": accepted, "duplicates": duplicates,
                                               "rejected": rejected, "results": [result]})
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["content-length"] == str(len(answer.content))
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["cache-control"] == "no-store"


def bad_reports(epoch: int) -> dict[str, Envelope]:
    """One report per rejection reason."""
    good = envelope("browser", 1, epoch, 1)

    def with_(**kw: Any) -> Envelope:
        return Envelope(**{**good.__dict__, **kw})

    oue = MetricSpec.from_json(SPECS["page"]).build()
    ok_bits = oue.encode(())
    return {
        "unknown_metric": with_(metric="nosuch"),
        "unknown_version": with_(version=5),
        "bad_epoch": with_(epoch="today"),
        "epoch_in_future": with_(epoch=epoch + 2),
        "epoch_expired": with_(epoch=epoch - 5),  # ended > 96 h ago (acceptance window)
        "bad_report_id": with_(report_id="ABCDEF" * 5 + "00"),
        "bad_token": with_(token="zz" * 192),
        "payload_type": with_(payload="1"),
        "bucket_out_of_range": with_(payload=4),
        "seed_out_of_range": envelope("country", 1, epoch, [10**9, 0]),
        "bitvector_length": envelope("page", 1, epoch, ok_bits + "A"),
        "payload_encoding": envelope("page", 1, epoch, "!" * len(ok_bits)),  # type: ignore[arg-type]
        "bit_out_of_range": envelope("dark_mode", 1, epoch, 2),
    }


async def test_every_rejection_code_and_bad_reports_change_nothing(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    epoch = today()
    bad = bad_reports(epoch)
    good = envelope("browser", 1, epoch, 2)
    r = await post(client, [*bad.values(), good])
    body = r.json()
    assert r.status_code == 200
    codes = [x["code"] for x in body["results"]]
    assert codes == [*bad, None]
    assert (body["accepted"], body["rejected"]) == (1, len(bad))
    # Only the good report was counted, anywhere.
    assert await tallies(redis_url, "browser") == {epoch: ([0, 0, 1, 0], 1)}
    for name in ("page", "country", "dark_mode"):
        assert await tallies(redis_url, name) == {}
    # Edges of the epoch window are accepted (epoch - 4 ended 72 to 96 h ago).
    edges = [envelope("browser", 1, epoch + 1, 0), envelope("browser", 1, epoch - 4, 0)]
    assert (await post(client, edges)).json()["accepted"] == 2


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", "invalid_json"),
        (b"[1, 2]", "batch_shape"),
        (orjson.dumps({"metric": ["a"]}), "batch_shape"),
        (
            orjson.dumps(
                {c: [] for c in ("metric", "version", "epoch", "report_id", "token", "payload")}
            ),
            "batch_size",
        ),
    ],
)
async def test_malformed_batches_are_400(client: httpx.AsyncClient, body: bytes, code: str) -> None:
    r = await client.post("/v1/reports", content=body, headers=INGEST)
    assert_problem(r, 400, code)


async def test_too_many_reports(client: httpx.AsyncClient) -> None:
    envs = [envelope("browser", 1, today(), 0)] * 1001
    assert_problem(await post(client, envs), 400, "batch_size")


async def test_body_limits_gzip_and_encodings(client: httpx.AsyncClient, redis_url: str) -> None:
    epoch = today()
    envs = [envelope("browser", 1, epoch, i % 4) for i in range(1000)]
    packed = gzip.compress(orjson.dumps(encode_batch(envs)))
    r = await client.post(
        "/v1/reports",
        content=packed,
        headers={**INGEST, "Content-Encoding": "gzip", "Content-Type": "application/json"},
    )
    assert r.status_code == 200 and r.json()["accepted"] == 1000
    # A raw body over 1 MiB.
    big = b'{"metric": ["' + b"x" * (1 << 20) + b'"]}'
    assert_problem(
        await client.post("/v1/reports", content=big, headers=INGEST), 413, "body_too_large"
    )
    # A gzip bomb: 64 MiB of zeros in ~64 KiB.
    bomb = gzip.compress(b"0" * (64 << 20), compresslevel=9)
    assert len(bomb) < (1 << 20)
    assert_problem(
        await client.post(
            "/v1/reports", content=bomb, headers={**INGEST, "Content-Encoding": "gzip"}
        ),
        413,
        "body_too_large",
    )
    assert_problem(
        await client.post(
            "/v1/reports", content=b"x", headers={**INGEST, "Content-Encoding": "br"}
        ),
        415,
        "unsupported_encoding",
    )
    assert_problem(
        await client.post(
            "/v1/reports",
            content=b"\x1f\x8bnot gzip",
            headers={**INGEST, "Content-Encoding": "gzip"},
        ),
        400,
        "invalid_gzip",
    )
    assert_problem(
        await client.post(
            "/v1/reports", content=b"{}", headers={**INGEST, "Content-Type": "text/plain"}
        ),
        415,
        "unsupported_media_type",
    )
    assert (await tallies(redis_url, "browser"))[epoch][1] == 1000


async def test_unknown_routes_and_methods_are_problems(client: httpx.AsyncClient) -> None:
    assert_problem(await client.get("/v2/nothing"), 404, "not_found")
    assert_problem(await client.delete("/v1/metrics", headers=ADMIN), 405, "method_not_allowed")


AUTH_BAD = {"Authorization": "Bearer not-a-key"}


async def test_rate_limit_per_client_not_per_key(redis_url: str) -> None:
    """The ingest key is the whole fleet's: one client flooding (even with bad keys and
    empty bodies) empties its own bucket, never another client's."""
    app = create_app(settings(redis_url, rate_limit_per_second=0.01, rate_limit_burst=3))
    async with app.router.lifespan_context(app):

        def client(address: str) -> httpx.AsyncClient:
            transport = httpx.ASGITransport(app=app, client=(address, 4321))
            return httpx.AsyncClient(transport=transport, base_url="http://collector.test")

        async with client("192.0.2.66") as flood, client("192.0.2.7") as honest:
            assert (await flood.post("/v1/reports", content=b"", headers=INGEST)).status_code \
                == 400
            assert (await flood.get("/v1/metrics", headers=AUTH_BAD)).status_code == 401
            assert (await flood.get("/v1/metrics", headers=INGEST)).status_code == 200
            r = await flood.get("/v1/metrics", headers=INGEST)
            assert_problem(r, 429, "rate_limited")
            assert int(r.headers["Retry-After"]) >= 1
            for _ in range(3):  # the same key, another client: a bucket of its own
                assert (await honest.get("/v1/metrics", headers=INGEST)).status_code == 200


async def test_health_ready_and_prometheus(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {
        "status": "ok", "service": "collector", "version": package_version()}
    assert (await client.get("/readyz")).json() == {"ready": True}
    epoch = today()
    env = envelope("browser", 1, epoch, 1)
    await post(client, [env, env, envelope("browser", 1, epoch, 9)])
    await client.post("/v1/reports", content=b"nope", headers=INGEST)
    text = (await client.get("/metrics")).text
    assert "ldp_reports_accepted_total 1\n" in text
    assert "ldp_reports_duplicate_total 1\n" in text
    assert 'ldp_reports_rejected_total{reason="bucket_out_of_range"} 1\n' in text
    assert 'ldp_batches_refused_total{code="invalid_json"} 1\n' in text
    assert "ldp_batch_seconds_count 1\n" in text


async def test_no_report_id_or_token_in_clear_anywhere_in_redis(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    epoch = today()
    rng = random.Random(3)
    page = MetricSpec.from_json(SPECS["page"]).build()
    envs = [envelope("browser", 1, epoch, rng.randrange(4)) for _ in range(100)]
    envs += [
        envelope("page", 1, epoch, page.encode(page.randomize(1, rng=rng))) for _ in range(100)
    ]
    olh = MetricSpec.from_json(SPECS["country"]).build()
    envs += [
        envelope("country", 1, epoch, olh.encode(olh.randomize(7, rng=rng))) for _ in range(100)
    ]
    envs += [envelope("browser", 1, epoch, 9)]  # a rejected one, too
    assert (await post(client, envs)).json()["accepted"] == 300
    secrets_seen = set()
    for e in envs:
        for text, raw in ((e.report_id, bytes.fromhex(e.report_id)),
                          (e.token, unb64url(e.token))):
            secrets_seen |= {text.encode(), raw}
            # Any 8-byte window of the raw value, too (no truncated copies): the
            # token's nonce and signature are never stored, only a keyed digest.
            secrets_seen |= {raw[i : i + 8] for i in range(len(raw) - 7)}
            secrets_seen |= {text[i : i + 16].encode() for i in range(len(text) - 15)}
    blobs: list[bytes] = []
    with redis.Redis.from_url(redis_url) as r:
        keys = list(r.scan_iter(count=1000))
        assert keys
        for key in keys:
            blobs.append(key)
            kind = r.type(key).decode()
            if kind == "string":
                blobs.append(r.get(key) or b"")
            elif kind == "hash":
                for f, v in r.hgetall(key).items():
                    blobs += [f, v]
            elif kind == "set":
                blobs += list(r.smembers(key))
            else:
                raise AssertionError(f"unexpected {kind} at {key!r}")
    everything = b"\n".join(blobs)
    leaked = [s for s in secrets_seen if s in everything]
    assert leaked == []


async def test_concurrent_retries_count_each_report_once(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    import asyncio

    epoch = today()
    envs = [envelope("browser", 1, epoch, i % 4, device=i) for i in range(300)]
    replies = await asyncio.gather(*(post(client, envs) for _ in range(8)))
    bodies = [r.json() for r in replies]
    assert sum(b["accepted"] for b in bodies) == 300
    assert sum(b["duplicates"] for b in bodies) == 7 * 300
    for i in range(300):  # each report accepted by exactly one of the 8 posts
        assert [b["results"][i]["status"] for b in bodies].count("accepted") == 1
    assert await tallies(redis_url, "browser") == {epoch: ([75, 75, 75, 75], 300)}


async def test_scripts_flushed_from_redis_are_loaded_again(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    with redis.Redis.from_url(redis_url) as r:
        r.script_flush()
    out = (await post(client, [envelope("browser", 1, today(), 3)])).json()
    assert out["accepted"] == 1
    with redis.Redis.from_url(redis_url) as r:
        r.script_flush()
    assert (await client.get("/readyz")).json() == {"ready": True}
