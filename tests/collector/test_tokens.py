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
from collector.token_crypto import Verifier
from ldp_core import tokens
from ldp_core.tokens import PublicKey, b64url, unb64url
from ldp_core.wire import Envelope, encode_batch
from tests.collector.test_api import INGEST, assert_problem, settings, tallies
from tests.support.asgi import asgi_client
from tests.support.installs import register_async
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


async def install(client: httpx.AsyncClient) -> dict[str, str]:
    """The headers of a fresh install, registered (the issuer signs for no other)."""
    key = b64url(secrets.token_bytes(32))
    await register_async(client, INGEST, key)
    return {**INGEST, "LDP-Install-Key": key}


async def public_key(client: httpx.AsyncClient) -> PublicKey:
    r = await client.get("/v1/tokens/key", headers=INGEST)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["token_type"] == 2
    return PublicKey.from_json(body)


async def ask(client: httpx.AsyncClient, headers: dict[str, str],
              units: list[Any]) -> list[dict[str, Any]]:
    r = await client.post("/v1/tokens", json={"units": units}, headers=headers)
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


async def post(client: httpx.AsyncClient, envs: list[Envelope]) -> dict[str, Any]:
    r = await client.post("/v1/reports", json=encode_batch(envs), headers=INGEST)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def unit(p: tokens.PendingToken) -> dict[str, Any]:
    return {"period": p.period, "epoch": p.epoch, "blinded": b64url(p.blinded)}


async def test_blind_issuance_then_one_token_per_epoch_for_every_metric(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    key = await public_key(client)
    epoch = today()
    headers = await install(client)
    pending = [tokens.prepare(key, "day", e) for e in (epoch, epoch + 1)]
    results = await ask(client, headers, [unit(p) for p in pending])
    assert [r["status"] for r in results] == ["issued"] * 2
    wire = [tokens.wire_token(key, p, unb64url(r["blind_sig"]))
            for p, r in zip(pending, results, strict=True)]
    report = Envelope("browser", 1, epoch, secrets.token_hex(16), wire[0], 2)
    page = Envelope("page", 1, epoch, secrets.token_hex(16), wire[0], "AAAA")
    # One token, two metrics of its epoch: each counts once.
    assert (await post(client, [report, page]))["accepted"] == 2
    # The retry of that report is a duplicate, and so is another browser report with
    # the same token; the token of epoch + 1 is not valid in this epoch.
    again = Envelope("browser", 1, epoch, secrets.token_hex(16), wire[0], 3)
    out = await post(client, [report, again,
                              Envelope("browser", 1, epoch, secrets.token_hex(16), wire[1], 1)])
    assert [r["status"] for r in out["results"]] == ["duplicate", "duplicate", "rejected"]
    assert out["results"][2]["code"] == "bad_token"
    assert await tallies(redis_url, "browser") == {epoch: ([0, 0, 1, 0], 1)}
    assert (await tallies(redis_url, "page"))[epoch][1] == 1


async def test_a_batch_verifies_each_token_once_and_the_cache_remembers(redis_url: str) -> None:
    """A device's batch shares its token across metrics: one RSA check, not one per report;
    a later batch with the same token is answered by the cache; a forged one never is."""
    app = create_app(settings(redis_url), clock=lambda: NOW)
    async with asgi_client(app) as c:
        names = ("browser", "page", "dark_mode", "load_ms")
        for name in names:
            r = await c.post("/v1/metrics", json=SPECS[name], headers=auth(ADMIN_KEY))
            assert r.status_code == 201, r.text
        verifier = app.state.tokens.verifier
        epoch = today()
        devices = [envelope(name, 1, epoch, 1 if name != "page" else "AAAA", device=d)
                   for d in range(3) for name in names[:2]]
        before = verifier.verifications
        assert (await post(c, devices))["accepted"] == 6
        assert verifier.verifications - before == 3     # three devices, three tokens
        token = devices[0].token
        more = [Envelope(n, 1, epoch, secrets.token_hex(16), token, p)
                for n, p in (("dark_mode", 1), ("load_ms", 1))]
        out = await post(c, more)
        assert out["accepted"] == 2, out
        assert verifier.verifications - before == 3     # the cache answered
        forged = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
        for _ in range(2):
            bad = await post(c, [Envelope("browser", 1, epoch, secrets.token_hex(16), forged, 1)])
            assert bad["results"][0]["code"] == "bad_token"
        # Each forged attempt costs one check (a fresh deployment: no version-1 epochs).
        assert verifier.verifications - before == 3 + 2


def test_the_verifier_cache_is_bounded_and_keeps_successes_only() -> None:
    from tests.support.tokens import test_key

    v = Verifier([test_key().public], cache_size=4)
    day = tokens.unit_digest("day", 7)
    minted = [mint("day", 7) for _ in range(6)]
    assert all(v.check(t, [day]) is not None for t in minted)
    assert v.verifications == 6 and len(v._cache) == 4
    assert v.check(minted[-1], [day]) is not None and v.verifications == 6   # cached
    assert v.check(minted[0], [day]) is not None and v.verifications == 7    # evicted
    other = tokens.unit_digest("day", 8)
    assert v.check(minted[0], [other]) is None and v.check(minted[0], [other]) is None
    assert v.verifications == 9    # a failure is checked again every time


def test_the_event_loop_answer_comes_from_the_cache_only() -> None:
    """``cached_all`` (no RSA, run on the event loop) answers only when the cache
    holds every distinct token of the batch; anything else goes to the thread."""
    from tests.support.tokens import test_key

    v = Verifier([test_key().public])
    day, other = tokens.unit_digest("day", 7), tokens.unit_digest("day", 8)
    known, unknown = mint("day", 7), mint("day", 7)
    assert v.cached_all([(known, (day,))]) is None          # not verified yet
    nonce = v.check(known, [day])
    assert nonce is not None and v.verifications == 1
    assert v.cached_all([(known, (day,))] * 3) == [nonce] * 3
    assert v.cached_all([(known, (other, day))]) == [nonce]   # v2 miss, then v1 hit
    assert v.cached_all([(known, (day,)), (unknown, (day,))]) is None
    assert v.cached_all([(known, (other,))]) is None           # another unit: not valid here
    forged = known[:-1] + ("B" if known[-1] == "A" else "A")
    assert v.cached_all([(forged, (day,))]) is None            # same length, not cached
    assert v.cached_all([(known, (day,))], most=0) is None     # too many distinct
    assert v.verifications == 1


async def test_a_few_distinct_tokens_are_checked_on_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch of at most ``INLINE_TOKENS`` distinct tokens (a single report's) is
    checked on the event loop: the worker-thread hop costs more than the RSA check.
    More distinct tokens still go to the worker thread; the answers are the same."""
    import collector.tokens as module
    from collector.store import ValidReport
    from ldp_core.metric import MetricSpec
    from tests.support.tokens import test_key

    hops: list[int] = []

    async def counted(check: Any, items: list[Any]) -> Any:
        hops.append(len(items))
        return check(items)

    monkeypatch.setattr(module, "run_in_threadpool", counted)
    service = module.TokenService.of(test_key())
    spec = MetricSpec.from_json({**SPECS["browser"], "version": 1})

    def reports(n: int) -> list[ValidReport]:
        return [ValidReport(spec, 7, secrets.token_hex(16), mint("day", 7), (1,))
                for _ in range(n)]

    forged = reports(1)[0]
    forged = forged._replace(token=forged.token[:-2] + ("AA" if forged.token[-2:] != "AA"
                                                        else "BB"))
    for batch in (reports(1), [*reports(1), forged]):
        good, positions, bad = await service.verify(batch, list(range(len(batch))))
        assert len(good) == 1 and positions == [0] and bad == [1] * (len(batch) - 1)
    assert hops == []                                  # both checked on the loop
    good, _, bad = await service.verify(reports(module.INLINE_TOKENS + 1),
                                        list(range(module.INLINE_TOKENS + 1)))
    assert len(good) == module.INLINE_TOKENS + 1 and not bad
    assert hops == [module.INLINE_TOKENS + 1]          # more: in the worker thread


async def test_a_token_of_one_epoch_length_is_not_valid_for_the_other(redis_url: str) -> None:
    hourly = {**SPECS["browser"], "name": "hourly", "epoch": "hour"}
    async with asgi_client(create_app(settings(redis_url), clock=lambda: NOW)) as c:
        for body in (SPECS["browser"], hourly):
            r = await c.post("/v1/metrics", json=body, headers=auth(ADMIN_KEY))
            assert r.status_code == 201, r.text
        day, hour = today(), today(3600)
        out = await post(c, [
            Envelope("hourly", 1, hour, secrets.token_hex(16), mint("day", hour), 1),
            Envelope("browser", 1, day, secrets.token_hex(16), mint("hour", day), 1),
            Envelope("hourly", 1, hour, secrets.token_hex(16), mint("hour", hour), 1),
            Envelope("browser", 1, day, secrets.token_hex(16), mint("day", day), 1),
        ])
        assert [r["code"] for r in out["results"]] == ["bad_token", "bad_token", None, None]


async def test_the_issuer_gives_one_token_per_install_and_epoch(
    client: httpx.AsyncClient
) -> None:
    key = await public_key(client)
    epoch = today()
    headers = await install(client)
    first = tokens.prepare(key, "day", epoch)
    assert (await ask(client, headers, [unit(first)]))[0]["status"] == "issued"
    # The same blinded message again (a lost answer, retried) is signed again...
    again = await ask(client, headers, [unit(first)])
    assert again[0]["status"] == "issued"
    tokens.wire_token(key, first, unb64url(again[0]["blind_sig"]))  # and it verifies
    # ...another one for the same unit is refused, even in the same request twice.
    second = tokens.prepare(key, "day", epoch)
    refused = await ask(client, headers, [unit(second)] * 2)
    assert [r.get("code") for r in refused] == ["token_limit", "token_limit"]
    # The hour of the same index is another unit; another install gets its own.
    hour = tokens.prepare(key, "hour", today(3600))
    assert (await ask(client, headers, [unit(hour)]))[0]["status"] == "issued"
    assert (await ask(client, await install(client), [unit(second)]))[0]["status"] == "issued"


async def test_the_issuer_checks_units_and_the_device(client: httpx.AsyncClient) -> None:
    key = await public_key(client)
    epoch = today()
    blinded = b64url(tokens.prepare(key, "day", epoch).blinded)
    units: list[Any] = [
        {"period": "week", "epoch": epoch, "blinded": blinded},
        {"period": "day", "epoch": "x", "blinded": blinded},
        {"period": "day", "epoch": -1, "blinded": blinded},
        {"period": "day", "epoch": epoch - 5, "blinded": blinded},
        {"period": "day", "epoch": epoch + 3, "blinded": blinded},
        {"period": "day", "epoch": epoch, "blinded": "AAAA"},
        {"period": "day", "epoch": epoch, "blinded": b64url(b"\xff" * key.modulus_bytes)},
        {"metric": "browser", "version": 1, "epoch": epoch, "blinded": blinded},
        "x",
    ]
    results = await ask(client, await install(client), units)
    assert [r["code"] for r in results] == [
        "bad_unit", "bad_unit", "bad_unit", "epoch_expired", "epoch_in_future",
        "bad_blinded", "bad_blinded", "unit_retired", "bad_unit"]
    r = await client.post("/v1/tokens", json={"units": units[:1]}, headers=INGEST)
    assert_problem(r, 401, "invalid_device")
    r = await client.post("/v1/tokens", json={"units": units[:1]},
                          headers={**INGEST, "LDP-Install-Key": "short"})
    assert_problem(r, 401, "invalid_device")
    r = await client.post("/v1/tokens", json={"units": []}, headers=await install(client))
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


async def test_one_token_counts_in_its_own_epoch_once_per_metric(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    """Issue 13: one token was accepted in 33 epochs.  Now in its epoch only, once per metric."""
    epoch = today()
    token = mint("day", epoch)
    envs = [Envelope("browser", 1, e, secrets.token_hex(16), token, 1)
            for e in range(epoch - 4, epoch + 2)]
    envs.append(Envelope("page", 1, epoch, secrets.token_hex(16), token, "AAAA"))
    envs.append(Envelope("browser", 1, epoch, secrets.token_hex(16), token, 2))
    out = await post(client, envs)
    codes = [r["code"] for r in out["results"]]
    assert out["accepted"] == 2 and codes[4] is None and codes[6] is None
    assert codes[:4] + codes[5:6] == ["bad_token"] * 5
    assert out["results"][7]["status"] == "duplicate"
    assert await tallies(redis_url, "browser") == {epoch: ([0, 1, 0, 0], 1)}


async def test_a_token_counts_once_per_version_of_a_metric(
    client: httpx.AsyncClient, redis_url: str
) -> None:
    """The stated bound: spending is per (metric, version) slot, so a new version of a
    metric inside an epoch takes one more report per token (the SDK's ledger, per name,
    never sends it; a hostile install can, once per version)."""
    changed = {**SPECS["browser"], "epsilon": 2.0}
    r = await client.post("/v1/metrics", json=changed, headers=auth(ADMIN_KEY))
    assert r.status_code == 201 and r.json()["version"] == 2, r.text
    epoch = today()
    token = mint("day", epoch)
    out = await post(client, [Envelope("browser", v, epoch, secrets.token_hex(16), token, 1)
                              for v in (1, 2, 1, 2)])
    assert [r["status"] for r in out["results"]] == [
        "accepted", "accepted", "duplicate", "duplicate"]


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
    await register_async(client, INGEST, b64url(raw))
    units = [unit(tokens.prepare(key, "day", e)) for e in (epoch, epoch + 1)]
    assert [r["status"] for r in await ask(client, headers, units)] == ["issued"] * 2
    import redis

    with redis.Redis.from_url(redis_url) as r:
        (name,) = list(r.scan_iter(match="ldp:{i:*}"))  # the registration is "...}:r"
        assert raw.hex().encode() not in name and raw not in name
        assert all(raw not in v and b64url(raw).encode() not in v
                   for v in r.hgetall(name).values())
        # The last unit's epoch ends at (epoch + 2) days; + 96 h window + 1 h margin.
        assert r.expiretime(name) == (epoch + 2) * 86400 + 96 * 3600 + 3600


async def test_by_default_an_unregistered_install_gets_no_token(
    client: httpx.AsyncClient,
) -> None:
    """Issue 34 item 1: tokens only for registered installs, by default (the fixture's
    settings set no LDP_INSTALL_REGISTRATION_REQUIRED).  Failed while the default was off."""
    key = await public_key(client)
    headers = {**INGEST, "LDP-Install-Key": b64url(secrets.token_bytes(32))}
    r = await client.post("/v1/tokens", headers=headers,
                          json={"units": [unit(tokens.prepare(key, "day", today()))]})
    assert_problem(r, 403, "install_unregistered")


async def test_a_fresh_install_key_per_request_gets_no_token_without_a_proof(
    client: httpx.AsyncClient,
) -> None:
    """The attack of issue 34: a new random install key for each request, each asking
    today's token.  Before: 20 requests, 20 tokens (20 counted reports).  Now: none,
    unless each key pays its proof of work first (the one that does gets its token)."""
    key = await public_key(client)
    got = 0
    for _ in range(20):
        headers = {**INGEST, "LDP-Install-Key": b64url(secrets.token_bytes(32))}
        r = await client.post("/v1/tokens", headers=headers,
                              json={"units": [unit(tokens.prepare(key, "day", today()))]})
        if r.status_code == 200:
            got += sum(x["status"] == "issued" for x in r.json()["results"])
        else:
            assert_problem(r, 403, "install_unregistered")
    assert got == 0
    paid = await install(client)
    results = await ask(client, paid, [unit(tokens.prepare(key, "day", today()))])
    assert [x["status"] for x in results] == ["issued"]


def test_prod_refuses_the_gate_off_unless_devices_log_in() -> None:
    from collector.settings import Settings

    off = Settings(install_registration_required=False)
    assert any("LDP_INSTALL_REGISTRATION_REQUIRED is false" in p for p in off.unsafe())
    assert not any("REGISTRATION_REQUIRED" in p for p in Settings().unsafe())
    jwt = Settings(install_registration_required=False, device_auth="jwt",
                   jwt_jwks_file="/jwks.json", jwt_issuer="https://idp", jwt_audience="app")
    assert not any("REGISTRATION_REQUIRED" in p for p in jwt.unsafe())
