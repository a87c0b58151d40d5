"""Report tokens through the collector's HTTP API (in process, real redis-server).

The attacks of issue 13 section 1, each a test that fails on the old HMAC
tokens: fresh random tokens from the ingest key, one token in many epochs or
metrics, and more tokens per device than one per unit from the issuer.  And the
honest path: blind issuance (``ldp_core.tokens``), then one report per token.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from collector.app import create_app
from ldp_core import tokens
from ldp_core.tokens import PublicKey, b64url, unb64url
from ldp_core.wire import Envelope, encode_batch
from tests.collector.test_api import INGEST, assert_problem, settings, tallies
from tests.support.asgi import asgi_client
from tests.support.reports import NOW, SPECS, envelope, today
from tests.support.servers import ADMIN_KEY, auth
from tests.support.tokens import mint

pytestmark = pytest.mark.anyio


@pytest.fixture()
async def client(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_app(settings(redis_url), clock=lambda: NOW)) as c:
        for name in ("browser", "page"):
            r = await c.post("/v1/metrics", json=SPECS[name], headers=auth(ADMIN_KEY))
            assert r.status_code == 201, r.text
        yield c


def install() -> dict[str, str]:
    return {**INGEST, "LDP-Install-Key": b64url(secrets.token_bytes(32))}


async def public_key(client: httpx.AsyncClient) -> PublicKey:
    r = await client.get("/v1/tokens/key", headers=INGEST)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["token_type"] == 2
    return PublicKey.from_json(body)


async def ask(client: httpx.AsyncClient, headers: dict[str, str],
              units: list[dict[str, Any]]) -> list[dict[str, Any]]:
    r = await client.post("/v1/tokens", json={"units": units}, headers=headers)
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


async def post(client: httpx.AsyncClient, envs: list[Envelope]) -> dict[str, Any]:
    r = await client.post("/v1/reports", json=encode_batch(envs), headers=INGEST)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_blind_issuance_then_one_report_per_token(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    key = await public_key(client)
    epoch = today()
    headers = install()
    pending = [tokens.prepare(key, "browser", 1, e) for e in (epoch, epoch + 1)]
    pending.append(tokens.prepare(key, "page", 1, epoch))
    results = await ask(client, headers, [
        {"metric": p.metric, "version": p.version, "epoch": p.epoch, "blinded": b64url(p.blinded)}
        for p in pending])
    assert [r["status"] for r in results] == ["issued"] * 3
    wire = [tokens.wire_token(key, p, unb64url(r["blind_sig"]))
            for p, r in zip(pending, results, strict=True)]
    report = Envelope("browser", 1, epoch, secrets.token_hex(16), wire[0], 2)
    assert (await post(client, [report]))["accepted"] == 1
    # The retry of that report is a duplicate; the token of epoch + 1 is not valid now...
    assert (await post(client, [report]))["duplicates"] == 1
    # ...in this epoch, and the page token is not valid for browser.
    out = await post(client, [Envelope("browser", 1, epoch, secrets.token_hex(16), wire[1], 1),
                              Envelope("browser", 1, epoch, secrets.token_hex(16), wire[2], 1)])
    assert [r["code"] for r in out["results"]] == ["bad_token", "bad_token"]
    assert await tallies(redis_url, "browser") == {epoch: ([0, 0, 1, 0], 1)}


async def test_the_issuer_gives_one_token_per_install_and_unit(client: httpx.AsyncClient) -> None:
    key = await public_key(client)
    epoch = today()
    headers = install()
    first = tokens.prepare(key, "browser", 1, epoch)
    unit = {"metric": "browser", "version": 1, "epoch": epoch}
    assert (await ask(client, headers, [{**unit, "blinded": b64url(first.blinded)}]))[0][
        "status"] == "issued"
    # The same blinded message again (a lost answer, retried) is signed again...
    again = await ask(client, headers, [{**unit, "blinded": b64url(first.blinded)}])
    assert again[0]["status"] == "issued"
    tokens.wire_token(key, first, unb64url(again[0]["blind_sig"]))  # and it verifies
    # ...another one for the same unit is refused, even in the same request twice.
    second = tokens.prepare(key, "browser", 1, epoch)
    refused = await ask(client, headers, [{**unit, "blinded": b64url(second.blinded)}] * 2)
    assert [r.get("code") for r in refused] == ["token_limit", "token_limit"]
    # Another install gets its own.
    assert (await ask(client, install(), [{**unit, "blinded": b64url(second.blinded)}]))[0][
        "status"] == "issued"


async def test_the_issuer_checks_units_and_the_device(client: httpx.AsyncClient) -> None:
    key = await public_key(client)
    epoch = today()
    blinded = b64url(tokens.prepare(key, "browser", 1, epoch).blinded)
    units = [
        {"metric": "nosuch", "version": 1, "epoch": epoch, "blinded": blinded},
        {"metric": "browser", "version": 9, "epoch": epoch, "blinded": blinded},
        {"metric": "browser", "version": 1, "epoch": "x", "blinded": blinded},
        {"metric": "browser", "version": 1, "epoch": epoch - 5, "blinded": blinded},
        {"metric": "browser", "version": 1, "epoch": epoch + 3, "blinded": blinded},
        {"metric": "browser", "version": 1, "epoch": epoch, "blinded": "AAAA"},
        {"metric": "browser", "version": 1, "epoch": epoch,
         "blinded": b64url(b"\xff" * key.modulus_bytes)},
    ]
    results = await ask(client, install(), units)
    assert [r["code"] for r in results] == [
        "unknown_metric", "unknown_version", "bad_unit", "epoch_expired", "epoch_in_future",
        "bad_blinded", "bad_blinded"]
    r = await client.post("/v1/tokens", json={"units": units[:1]}, headers=INGEST)
    assert_problem(r, 401, "invalid_device")
    r = await client.post("/v1/tokens", json={"units": units[:1]},
                          headers={**INGEST, "LDP-Install-Key": "short"})
    assert_problem(r, 401, "invalid_device")
    r = await client.post("/v1/tokens", json={"units": []}, headers=install())
    assert_problem(r, 400, "invalid_request")
    r = await client.post("/v1/tokens", json={"units": units[:1]}, headers=auth("x" * 30))
    assert_problem(r, 401, "invalid_key")


async def test_fresh_random_tokens_from_the_ingest_key_count_nothing(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    """Issue 13: 884,000 reports with fresh random tokens were accepted from one key."""
    epoch = today()
    size = 32 + (await public_key(client)).modulus_bytes  # nonce and signature
    forged = [Envelope("browser", 1, epoch, secrets.token_hex(16),
                       b64url(secrets.token_bytes(size)), 1) for _ in range(200)]
    forged += [Envelope("browser", 1, epoch, secrets.token_hex(16), secrets.token_hex(32), 1)]
    out = await post(client, forged)
    assert out["accepted"] == 0 and out["rejected"] == len(forged)
    assert {r["code"] for r in out["results"]} == {"bad_token"}
    assert await tallies(redis_url, "browser") == {}


async def test_one_token_counts_in_its_own_unit_only(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    """Issue 13: one token was accepted in 33 epochs.  Now in its unit only."""
    epoch = today()
    token = mint("browser", 1, epoch)
    envs = [Envelope("browser", 1, e, secrets.token_hex(16), token, 1)
            for e in range(epoch - 4, epoch + 2)]
    envs.append(Envelope("page", 1, epoch, secrets.token_hex(16), token, "AAAA"))
    out = await post(client, envs)
    codes = [r["code"] for r in out["results"]]
    assert out["accepted"] == 1 and codes[4] is None
    assert codes[:4] + codes[5:] == ["bad_token"] * 6
    assert await tallies(redis_url, "browser") == {epoch: ([0, 1, 0, 0], 1)}


async def test_a_report_after_the_acceptance_window_is_refused(redis_url: str) -> None:
    """LDP_ACCEPTANCE_HOURS=24: an epoch that ended 25 h ago gets epoch_expired."""
    app = create_app(settings(redis_url, acceptance_hours=24), clock=lambda: NOW)
    async with asgi_client(app) as c:
        await c.post("/v1/metrics", json=SPECS["browser"], headers=auth(ADMIN_KEY))
        epoch = today()
        late = envelope("browser", 1, epoch - 2, 1)   # ended >= 24 h ago
        ok = envelope("browser", 1, epoch - 1, 1)     # ended < 24 h ago
        out = await post(c, [late, ok])
        assert [r["code"] for r in out["results"]] == ["epoch_expired", None]


async def test_issuer_state_is_a_digest_and_expires_with_the_window(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    key = await public_key(client)
    epoch = today()
    raw = secrets.token_bytes(32)
    headers = {**INGEST, "LDP-Install-Key": b64url(raw)}
    units = [{"metric": "browser", "version": 1, "epoch": e,
              "blinded": b64url(tokens.prepare(key, "browser", 1, e).blinded)}
             for e in (epoch, epoch + 1)]
    assert [r["status"] for r in await ask(client, headers, units)] == ["issued"] * 2
    import redis

    with redis.Redis.from_url(redis_url) as r:
        (name,) = list(r.scan_iter(match="ldp:{i:*"))
        assert raw.hex().encode() not in name and raw not in name
        assert all(raw not in v and b64url(raw).encode() not in v
                   for v in r.hgetall(name).values())
        # The last unit's epoch ends at (epoch + 2) days; + 96 h window + 1 h margin.
        assert r.expiretime(name) == (epoch + 2) * 86400 + 96 * 3600 + 3600
