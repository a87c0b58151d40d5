"""The switch from version-1 tokens (per metric) to version 2 (per epoch), through
the collector's HTTP API (in process, real redis-server).

The attack: an install that holds a version-1 token of (metric, version, epoch),
fetched from the version-1 issuer before the switch, asks the version-2 issuer
for the token of (period, epoch) and reports the metric once with each.  In
every epoch one kind of token counts, so it gets one report in.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx
import pytest
import redis

from collector.app import create_app
from collector.store import ValidReport
from collector.tokens import V1_UNTIL, V2_SINCE, TokenService, V1Cutoff
from ldp_core import tokens
from ldp_core.tokens import PublicKey, b64url, unb64url
from ldp_core.wire import Envelope, encode_batch
from ldp_server.redis_server import free_port
from tests.collector.test_api import INGEST, settings, tallies
from tests.support.asgi import asgi_client
from tests.support.installs import register_async
from tests.support.reports import NOW, SPECS, today
from tests.support.servers import ADMIN_KEY, auth
from tests.support.tokens import mint, mint_v1

pytestmark = pytest.mark.anyio

DAY = 86400


async def upgraded(redis_url: str) -> None:
    """Redis as a version-1 deployment leaves it: metrics registered, no V2_SINCE."""
    async with asgi_client(create_app(settings(redis_url), clock=lambda: NOW)) as c:
        for name in ("browser", "page"):
            r = await c.post("/v1/metrics", json=SPECS[name], headers=auth(ADMIN_KEY))
            assert r.status_code == 201, r.text
    with redis.Redis.from_url(redis_url) as r:
        r.delete(V2_SINCE, V1_UNTIL)


async def issue(c: httpx.AsyncClient, install: str, epoch: int) -> tuple[str | None, str]:
    """(wire token, "issued") from the blind issuance of ("day", epoch), or (None, code)."""
    await register_async(c, INGEST, install)  # 200 once registered: no work again
    r = await c.get("/v1/tokens/key", headers=INGEST)
    key = PublicKey.from_json(r.json())
    pending = tokens.prepare(key, "day", epoch)
    r = await c.post(
        "/v1/tokens",
        headers={**INGEST, "LDP-Install-Key": install},
        json={"units": [{"period": "day", "epoch": epoch, "blinded": b64url(pending.blinded)}]},
    )
    assert r.status_code == 200, r.text
    (result,) = r.json()["results"]
    if result["status"] != "issued":
        return None, result["code"]
    return tokens.wire_token(key, pending, unb64url(result["blind_sig"])), "issued"


async def post(c: httpx.AsyncClient, envs: list[Envelope]) -> list[dict[str, Any]]:
    r = await c.post("/v1/reports", json=encode_batch(envs), headers=INGEST)
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


def rid() -> str:
    return secrets.token_hex(16)


async def test_a_version_1_token_and_a_version_2_token_give_one_report_not_two(
    redis_url: str,
) -> None:
    """The epoch open at the switch: the install's version-1 token counts; the version-2
    issuer refuses that epoch (``epoch_v1_only``), and a version-2 token of it (one issued
    before this rule) is refused by the collector.  One report counted, not two."""
    await upgraded(redis_url)
    epoch, install = today(), b64url(secrets.token_bytes(32))
    v1 = mint_v1("browser", 1, epoch)  # what the version-1 issuer gave this install
    async with asgi_client(create_app(settings(redis_url), clock=lambda: NOW)) as c:
        v2, code = await issue(c, install, epoch)
        reports = [Envelope("browser", 1, epoch, rid(), v1, 1)]
        if v2 is not None:
            reports.append(Envelope("browser", 1, epoch, rid(), v2, 2))
        results = await post(c, reports)
        assert [r["status"] for r in results].count("accepted") == 1, results
        assert code == "epoch_v1_only"
        # A version-2 token of that epoch (issued before this rule): never counted.
        results = await post(c, [Envelope("browser", 1, epoch, rid(), mint("day", epoch), 2)])
        assert results[0] == {"status": "rejected", "code": "epoch_v1_only"}, results
    assert await tallies(redis_url, "browser") == {epoch: ([0, 1, 0, 0], 1)}


async def test_every_epoch_open_at_the_switch_is_version_1_only_and_later_ones_version_2(
    redis_url: str,
) -> None:
    """Epochs that start at or before the switch + the 48 h ahead window (the last a
    version-1 issuer signed for) take version-1 tokens only; the next takes version 2
    only -- across restarts of the collector and a later clock."""
    await upgraded(redis_url)
    epoch, install = today(), b64url(secrets.token_bytes(32))
    async with asgi_client(create_app(settings(redis_url), clock=lambda: NOW)) as c:
        assert [(await issue(c, install, e))[1] for e in (epoch, epoch + 1, epoch + 2)] == [
            "epoch_v1_only"
        ] * 3
    with redis.Redis.from_url(redis_url) as r:
        assert int(r.get(V2_SINCE) or 0) == int(NOW)
    later = NOW + 3 * DAY  # restarted, three days on: epoch + 3 starts after the cut-off
    async with asgi_client(create_app(settings(redis_url), clock=lambda: later)) as c:
        assert (await issue(c, install, epoch + 2))[1] == "epoch_v1_only"
        v2, code = await issue(c, install, epoch + 3)
        assert code == "issued" and v2 is not None
        results = await post(
            c,
            [
                Envelope("browser", 1, epoch + 2, rid(), mint_v1("browser", 1, epoch + 2), 1),
                Envelope("page", 1, epoch + 2, rid(), mint("day", epoch + 2), "AAAA"),
                Envelope("browser", 1, epoch + 3, rid(), mint_v1("browser", 1, epoch + 3), 1),
                Envelope("browser", 1, epoch + 3, rid(), v2, 2),
            ],
        )
        assert [(r["status"], r["code"]) for r in results] == [
            ("accepted", None),
            ("rejected", "epoch_v1_only"),
            ("rejected", "bad_token"),
            ("accepted", None),
        ]


async def test_a_fresh_deployment_has_no_version_1_epochs(redis_url: str) -> None:
    """No metric registered at the first start: no version-1 token can exist (the
    version-1 issuer signed only for registered metrics), so ``V2_SINCE`` is 0 and
    version-1 tokens are refused in every epoch."""
    epoch = today()
    async with asgi_client(create_app(settings(redis_url), clock=lambda: NOW)) as c:
        r = await c.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        assert r.status_code == 201, r.text
        v2, code = await issue(c, b64url(secrets.token_bytes(32)), epoch)
        assert code == "issued" and v2 is not None
        results = await post(
            c,
            [
                Envelope("browser", 1, epoch, rid(), mint_v1("browser", 1, epoch), 1),
                Envelope("browser", 1, epoch, rid(), v2, 2),
            ],
        )
        assert [r["status"] for r in results] == ["rejected", "accepted"]
    with redis.Redis.from_url(redis_url) as r:
        assert r.get(V2_SINCE) == b"0"


async def test_a_version_1_token_counts_once_and_only_for_its_metric(redis_url: str) -> None:
    await upgraded(redis_url)
    epoch = today()
    old = mint_v1("browser", 1, epoch)
    async with asgi_client(create_app(settings(redis_url), clock=lambda: NOW)) as c:
        results = await post(
            c,
            [
                Envelope("browser", 1, epoch, rid(), old, 1),
                Envelope("page", 1, epoch, rid(), old, "AAAA"),
                Envelope("browser", 1, epoch, rid(), old, 2),
            ],
        )
        assert [(r["status"], r["code"]) for r in results] == [
            ("accepted", None),
            ("rejected", "bad_token"),
            ("duplicate", None),
        ]


async def test_the_collector_names_a_version_2_token_in_a_version_1_epoch(
    redis_url: str,
) -> None:
    """``TokenService.check``: ``epoch_v1_only`` for a valid version-2 token of a
    version-1-only epoch, ``bad_token`` for a forged one; after the cut-off a
    version-1 token is ``bad_token``."""
    await upgraded(redis_url)
    epoch = today()
    app = create_app(settings(redis_url), clock=lambda: NOW)
    async with asgi_client(app):
        service: TokenService = app.state.tokens
        spec = await app.state.store.get_metric("browser", 1)
        assert spec is not None
        v1 = mint_v1("browser", 1, epoch)
        forged = mint("day", epoch)[:-8] + "AAAAAAAA"
        batch = [
            ValidReport(spec, epoch, rid(), token, (1,))
            for token in (v1, mint("day", epoch), forged)
        ]
        batch.append(ValidReport(spec, epoch + 3, rid(), mint_v1("browser", 1, epoch + 3), (1,)))
        good, positions, refused = await service.check(batch, [10, 11, 12, 13])
        assert [r.token for r in good] == [unb64url(v1)[:32].hex()] and positions == [10]
        assert refused == {11: "epoch_v1_only", 12: "bad_token", 13: "bad_token"}


async def test_the_cut_off_is_written_once_and_never_guessed(redis_url: str) -> None:
    """``V1Cutoff``: the first start decides (0 without metrics, else its time + its
    ahead window), later starts read it whatever their clock or ahead window; a
    deployment that wrote only ``V2_SINCE`` (before ``V1_UNTIL`` existed) gets it
    from that; with Redis unreachable it raises (the request gets 503) and reads it
    when Redis answers."""
    import redis.asyncio

    t0, hour = 1_764_590_000, 3600
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        assert await V1Cutoff(client, lambda: t0, hour).until() is None
        await client.delete(V2_SINCE, V1_UNTIL)
        await client.sadd("ldp:{spec}:names", "browser")
        assert await V1Cutoff(client, lambda: t0, hour).until() == t0 + hour
        assert await V1Cutoff(client, lambda: t0 + 9000, 2 * hour).until() == t0 + hour
        await client.delete(V1_UNTIL)
        assert await V1Cutoff(client, lambda: t0 + 9000, 2 * hour).until() == t0 + 2 * hour
    finally:
        await client.aclose()
    down = redis.asyncio.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5)
    cutoff = V1Cutoff(down, lambda: t0 + 5000, hour)
    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            await cutoff.until()
    finally:
        await down.aclose()
    cutoff._client = redis.asyncio.Redis.from_url(redis_url)  # Redis is back
    try:
        assert await cutoff.until() == t0 + 2 * hour
    finally:
        await cutoff._client.aclose()
