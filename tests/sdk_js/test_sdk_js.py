"""@ldp-telemetry/sdk (sdk-js/): build, shared vectors, Node tests, end to end.

1. The vectors in sdk-js/test/vectors.json are regenerated from the Python core
   (sdk-js/scripts/gen_vectors.py) and must equal the committed file (they hold
   RFC 9474 A.3 and Python-made blind RSA tokens too).
2. ``npm ci`` + ``npm run build``, then ``node --test`` over the compiled tests:
   the vectors byte for byte, and 10^6 reports per mechanism form against the
   declared channel (chi-square, joint false-positive rate <= 1e-6).
3. End to end: a Node process (1200 devices, the first with a FileStore) and a
   page in headless Chromium (400 devices, the first with IndexedDB; the page first
   checks the opt-in forms' vectors in Chromium's own NFC/lowercase) record two
   metrics through the real collector (CORS open to the page's origin), and two
   numeric ones (``auto``: the Hybrid at eps 2, the memoised Piecewise mean); the
   aggregator's intervals at confidence 1 - 1e-7 must cover the true shares and
   means: 10 intervals, so a false failure has probability <= 1e-6 (normal
   approximation of a sum over 1600 independent devices).  Every report carries a blind-signed
   token from the collector's issuer (the test issuer key, tests/conftest.py).
5. The opt-in forms (sdk-js/test/e2e-forms.ts): 2000 Node devices record a string
   (prefix_olh), a Square Wave distribution, a count-mean sketch and a hierarchical
   histogram's mean through the real collector, and a memoised string (prefix_olh,
   two levels) in each of 3 days; discovery finds the heavy strings, and every
   interval (3 strings, 2 means, 8 buckets, 3 quantiles, 4 shares, 2 memoised strings
   over their 3-day window: 22 at 1 - 1e-8 each) covers the truth.
4. The Client against the real collector (sdk-js/test/e2e-client.ts): the token
   stock offline, online and across a restart, a lost issuer answer, the refund of
   a refused unit, a wrong key, opt-out/opt-in, strict, the environment, and
   issuer key pinning: a second collector on the same Redis signs with another
   key (generated here); the pinned Client asks it for nothing and keeps its
   reports for the collector with the test key (as tests/client_sdk/test_key_pinning.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from collector.token_crypto import TokenKey
from collector.tokens import V1_UNTIL, V2_SINCE
from ldp_core.metric import MetricSpec
from ldp_server.redis_server import RedisServer
from tests.support.servers import (
    ADMIN_KEY,
    ANALYST_KEY,
    INGEST_KEY,
    auth,
    start_collector,
    start_uvicorn,
)
from tests.support.tokens import test_key as issuer_key

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk-js"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def page_reports(url: str, arrived: threading.Event, timeout: float, *flags: str) -> bool:
    """Open ``url`` in a fresh headless Chromium profile until the page posted its result
    (``arrived``) or ``timeout`` seconds passed; the browser stopped (by its pid) and its
    profile removed either way.  True if the page reported."""
    profile = tempfile.mkdtemp(prefix="ldp-chromium-")
    browser = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", *flags,
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile}", url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return arrived.wait(timeout)
    finally:
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()
        shutil.rmtree(profile, ignore_errors=True)
DOMAIN = ["free", "basic", "pro", "team"]
SHARES = [8 / 20, 6 / 20, 4 / 20, 2 / 20]
NODE_DEVICES, PAGE_DEVICES = 1200, 400
DAY = 86_400
STRICT = 1 - 1e-7
SPECS = [
    {"name": "js.plan", "kind": "categorical", "domain": DOMAIN, "epsilon": 2.0,
     "mechanism": "grr", "min_reports": 10},
    {"name": "js.theme", "kind": "categorical", "domain": DOMAIN, "epsilon": 2.0,
     "mechanism": "olh", "longitudinal": {"epsilon_inf": 4.0}, "min_reports": 10},
]
#: Numeric metrics (sdk-js/test/e2e-plan.ts): device i holds amount(i) in [0, 100].
NUMERIC_SPECS = [
    {"name": "js.latency", "kind": "numeric", "lo": 0, "hi": 100, "epsilon": 2.0,
     "mechanism": "auto", "min_reports": 10},
    {"name": "js.session", "kind": "numeric", "lo": 0, "hi": 100, "epsilon": 1.0,
     "mechanism": "auto", "longitudinal": {"epsilon_inf": 4.0}, "min_reports": 10},
]


def amount(i: int) -> float:
    """The value of device i (``amount`` in sdk-js/test/e2e-plan.ts)."""
    return (i * 37) % 100 + 0.5


REPORTS = len(SPECS) + len(NUMERIC_SPECS)

#: The metrics of e2e-client.ts (the Client's token stock, refunds, keys, opt-out, strict).
CLIENT_SPECS = [
    {"name": "js.t.plan", "kind": "categorical", "domain": DOMAIN, "epsilon": 1.0,
     "mechanism": "grr"},
    {"name": "js.t.mem", "kind": "categorical", "domain": DOMAIN, "epsilon": 1.0,
     "mechanism": "olh", "longitudinal": {"epsilon_inf": 4.0}},
    {"name": "js.t.age", "kind": "numeric", "lo": 0, "hi": 120, "epsilon": 1.0,
     "mechanism": "one_bit_mean"},
]

needs_node = pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                                reason="node/npm not installed (scripts/install-system-deps.sh)")


def test_vectors_match_the_python_core() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    fresh = subprocess.run([sys.executable, str(SDK / "scripts" / "gen_vectors.py")], env=env,
                           capture_output=True, text=True, check=True, timeout=120).stdout
    committed = (SDK / "test" / "vectors.json").read_text()
    assert fresh == committed, "stale sdk-js/test/vectors.json: run sdk-js/scripts/gen_vectors.py"


def test_casefold_table_matches_python() -> None:
    """sdk-js/src/casefold.ts is Python's casefold where it is not lower (this Python's
    Unicode); the vectors then check the JS fold of every such code point."""
    fresh = subprocess.run([sys.executable, str(SDK / "scripts" / "gen_casefold.py")],
                           capture_output=True, text=True, check=True, timeout=120).stdout
    committed = (SDK / "src" / "casefold.ts").read_text()
    assert fresh == committed, "stale sdk-js/src/casefold.ts: run sdk-js/scripts/gen_casefold.py"


@needs_node
def test_node_test_runner_passes(built: Path) -> None:
    files = sorted(str(p.relative_to(SDK)) for p in (built / "test").glob("*.test.js"))
    assert len(files) >= 2, files
    done = subprocess.run(["node", "--test", "--test-concurrency=2", *files], cwd=SDK,
                          capture_output=True, text=True, timeout=600)
    summary = [line for line in done.stdout.splitlines() if line.startswith("# ")]
    print("\n".join(summary))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "# fail 0" in summary and any(s.startswith("# pass ") for s in summary)


def register(url: str, specs: list[dict[str, Any]]) -> None:
    for spec in specs:
        answer = httpx.post(f"{url}/v1/metrics", json=spec, headers=auth(ADMIN_KEY), timeout=10)
        assert answer.status_code in (200, 201), answer.text


@needs_node
def test_client_against_the_real_collector(
    built: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    """dist/test/e2e-client.js: offline reports wait for tokens, the next epoch's token
    is stocked and survives a restart, one token per epoch goes on every metric's
    report and past epochs' stock is deleted, a lost issuer answer is asked again
    with the same blinded messages, a second report of a metric in an epoch is
    dropped with its epsilon refunded, a
    wrong key keeps reports, opt-out/opt-in keep the ledger, strict, the environment,
    a report spooled with an old HMAC token waits for a blind-signed one, only
    pinned issuer keys are used (``other`` serves a key of its own), and a report of
    an epoch open when the issuer switched from version-1 tokens is dropped as
    ``epoch_v1_only`` with its epsilon refunded (``switched``)."""
    import redis

    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    # ``switched`` (Redis database 1) replaced a version-1 collector: metrics registered
    # before its first start, so today's epochs take version-1 tokens only.
    switched_redis = redis_server.url.rsplit("/", 1)[0] + "/1"
    with start_collector(switched_redis, log_dir=tmp_path / "v1") as v1:
        register(v1.url, CLIENT_SPECS)
    with redis.Redis.from_url(switched_redis) as client:
        client.delete(V2_SINCE, V1_UNTIL)
    other = TokenKey.generate(bits=1024)
    (tmp_path / "other.pem").write_bytes(other.to_pem())
    other_key = {"LDP_TOKEN_KEY_FILE": str(tmp_path / "other.pem")}
    with start_collector(redis_server.url, log_dir=tmp_path / "collector") as collector, \
            start_collector(redis_server.url, log_dir=tmp_path / "other",
                            extra_env=other_key) as rogue, \
            start_collector(switched_redis, log_dir=tmp_path / "switched") as switched:
        register(collector.url, CLIENT_SPECS)
        (tmp_path / "state").mkdir()
        env = {**os.environ, "LDP_E2E_URL": collector.url, "LDP_E2E_KEY": INGEST_KEY,
               "LDP_E2E_STATE": str(tmp_path / "state"), "LDP_E2E_OTHER_URL": rogue.url,
               "LDP_E2E_HONEST_ID": issuer_key().public.key_id.hex(),
               "LDP_E2E_OTHER_ID": other.public.key_id.hex(), "LDP_E2E_SWITCHED_URL": switched.url}
        env.pop("LDP_ISSUER_KEYS", None)
        done = subprocess.run(["node", "--test", "dist/test/e2e-client.js"], cwd=SDK, env=env,
                              capture_output=True, text=True, timeout=300)
    summary = [line for line in done.stdout.splitlines() if line.startswith("# ")]
    print("\n".join(summary))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "# fail 0" in summary and "# pass 13" in summary, summary


@needs_node
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium not installed")
def test_node_and_chromium_record_through_the_real_stack(
    built: Path, redis_server: RedisServer, tmp_path: Path,
    page_server: tuple[str, list[dict[str, Any]], threading.Event],
) -> None:
    import redis

    origin, result, arrived = page_server
    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    # The page also checks the opt-in forms' vectors in Chromium's own ICU (NFC, lowercase).
    vectors = json.loads((SDK / "test" / "vectors.json").read_text())
    shutil.copy(SDK / "test" / "vectors.json", built / "vectors.json")
    forms = [c for c in vectors["mechanisms"]
             if c["spec"]["params"]["mechanism"] in ("square_wave", "cms", "hcms", "prefix_olh")]
    checks = len(vectors["casefold"]) + sum(len(c.get("strings", [])) + len(c["draws"])
                                            for c in forms)
    collector = start_collector(redis_server.url, log_dir=tmp_path / "collector",
                                extra_env={"LDP_CORS_ORIGINS": origin})
    try:
        legacy = {"name": "js.legacy", "kind": "categorical", "domain": DOMAIN, "epsilon": 1.0,
                  "mechanism": "grr"}  # the page's IndexedDB upgrade (one report, not estimated)
        resolved = {}
        for spec in [*SPECS, *NUMERIC_SPECS, legacy]:
            answer = httpx.post(f"{collector.url}/v1/metrics", json=spec, headers=auth(ADMIN_KEY),
                                timeout=10)
            assert answer.status_code in (200, 201), answer.text
            params = answer.json()["params"]
            resolved[spec["name"]] = f"{params['mechanism']}/{params.get('levels', 1)}"
        # ``auto`` resolves the numeric metrics to the forms the JS SDK gained.
        assert [resolved[s["name"]] for s in NUMERIC_SPECS] == ["hybrid/1", "piecewise/2"]
        node = subprocess.run(
            ["node", "dist/test/e2e-node.js", collector.url, INGEST_KEY, str(NODE_DEVICES), "0",
             str(tmp_path / "node-state")], cwd=SDK, capture_output=True, text=True, timeout=300)
        assert node.returncode == 0, node.stderr[-3000:]
        totals = json.loads(node.stdout.strip().splitlines()[-1])
        assert totals == {"queued": REPORTS * NODE_DEVICES, "sent": REPORTS * NODE_DEVICES,
                          "dropped": 0, "notQueued": []}, totals
        url = (f"{origin}/page.html#url={collector.url}&key={INGEST_KEY}"
               f"&devices={PAGE_DEVICES}&offset={NODE_DEVICES}")
        assert page_reports(url, arrived, 240), "the page never reported"
        page = result[0]
        assert page == {"ok": True, "queued": REPORTS * PAGE_DEVICES,
                        "sent": REPORTS * PAGE_DEVICES, "dropped": 0, "notQueued": [],
                        "idb": True, "legacy": True, "vectors": checks, "vectorErrors": []}, page
        env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis_server.url,
               "LDP_ANALYST_KEYS": ANALYST_KEY}
        with start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path / "agg") as agg:
            for spec in SPECS:
                answer = httpx.get(f"{agg.url}/v1/estimates/{spec['name']}",
                                   params={"confidence": STRICT}, headers=auth(ANALYST_KEY),
                                   timeout=30)
                assert answer.status_code == 200, answer.text
                body = answer.json()
                assert body["n"] == NODE_DEVICES + PAGE_DEVICES
                rows = body["estimate"]["values"]
                for row, share in zip(rows, SHARES, strict=True):
                    print(spec["name"], row["value"], share, row["ci_low"], row["ci_high"])
                    assert row["ci_low"] <= share <= row["ci_high"], (spec["name"], row, share)
            truth = sum(amount(i) for i in range(NODE_DEVICES + PAGE_DEVICES)) / (
                NODE_DEVICES + PAGE_DEVICES)
            for spec in NUMERIC_SPECS:
                answer = httpx.get(f"{agg.url}/v1/estimates/{spec['name']}",
                                   params={"confidence": STRICT}, headers=auth(ANALYST_KEY),
                                   timeout=30)
                assert answer.status_code == 200, answer.text
                body = answer.json()
                est = body["estimate"]
                print(spec["name"], resolved[spec["name"]], est["value"], truth, est["ci_low"],
                      est["ci_high"])
                assert body["n"] == NODE_DEVICES + PAGE_DEVICES
                assert est["ci_low"] <= truth <= est["ci_high"], (spec["name"], est, truth)
    finally:
        collector.stop()


#: The metrics of sdk-js/test/e2e-tabs.ts (two tabs, one device).
TAB_SPECS: list[dict[str, Any]] = [
    {"name": "t.plan", "kind": "categorical", "domain": DOMAIN, "epsilon": 1.0,
     "mechanism": "grr"},
    {"name": "t.same", "kind": "categorical", "domain": DOMAIN, "epsilon": 1.0, "mechanism": "grr",
     "longitudinal": {"epsilon_inf": 3.0}},
    {"name": "t.life", "kind": "categorical", "domain": DOMAIN, "epsilon": 1.0, "mechanism": "olh",
     "longitudinal": {"epsilon_inf": 3.0}},
    {"name": "t.other", "kind": "categorical", "domain": DOMAIN, "epsilon": 1.0,
     "mechanism": "grr"},
]


@needs_node
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium not installed")
def test_two_tabs_spend_one_ledger(
    built: Path, redis_server: RedisServer, tmp_path: Path,
    page_server: tuple[str, list[dict[str, Any]], threading.Event],
) -> None:
    """Two tabs of one origin (two Clients over one IndexedDB, both opened before either
    records) record the same metrics at once: one report per (metric, epoch) leaves the
    device and one permanent response is drawn within a lifetime budget of one; the other
    tab is refused by the budget.  Before the stale-write check each tab decided from its
    own copy of the ledger: both answered "queued" (6 reports, 2 charges per unit).
    Then both flush at once through the real collector and issuer: the 3 reports are
    accepted, none dropped (no second blinded request for a unit, refused token_limit);
    an opt-out in one tab holds in the other."""
    import redis

    origin, result, arrived = page_server
    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    collector = start_collector(redis_server.url, log_dir=tmp_path / "collector",
                                extra_env={"LDP_CORS_ORIGINS": origin})
    specs = []
    for spec in TAB_SPECS:
        answer = httpx.post(f"{collector.url}/v1/metrics", json=spec, headers=auth(ADMIN_KEY),
                            timeout=10)
        assert answer.status_code in (200, 201), answer.text
        specs.append(answer.json())
    (built / "tabs-specs.json").write_text(json.dumps(specs))
    (built / "tabs.html").write_text(
        '<!doctype html><meta charset="utf-8"><title>ldp sdk tabs</title>'
        '<script type="module" src="/e2e-tabs.js"></script>')
    try:
        url = f"{origin}/tabs.html#tab=1&url={collector.url}&key={INGEST_KEY}"
        assert page_reports(url, arrived, 120, "--disable-popup-blocking"), (
            "the page never reported")
    finally:
        collector.stop()
    assert result[0] == {
        "ok": True,
        "answers": {"t.plan": ["over_budget", "queued"], "t.same": ["over_budget", "queued"],
                    "t.life": ["over_lifetime_budget", "queued"]},
        "reports": {"t.plan": 1, "t.same": 1, "t.life": 1},
        "permanent": {"t.same": 1, "t.life": 1},
        "flushed": [True, True],
        "accepted": 3,
        "dropped": {},
        "afterOptOut": "opted_out",
        "optedOut": True,
    }, result[0]


@needs_node
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium not installed")
def test_one_sdk_version_writes_the_ledger(
    built: Path, page_server: tuple[str, list[dict[str, Any]], threading.Event],
) -> None:
    """The IndexedDB database is at version 3, so at most one SDK version writes the ledger
    (sdk-js/test/e2e-versions.ts; raw connections stand for other SDK versions' tabs).  An
    older SDK's connection at version 2, held open with no versionchange handler: this SDK's
    Client opens without throwing or hanging, its records answer storage_error and write
    nothing; once that connection closes the upgrade runs and the next record is queued.  An
    older SDK opening later is refused (VersionError).  A newer SDK's open at version 4 is not
    blocked: this store closes its connection, and its records answer storage_error, also
    after the newer connection closed (it never reopens at the old version), and its flush
    sends nothing (the newer SDK delivers the spool).  Before
    version 3 the Client wrote its charge while the older SDK's connection was open (3
    records "queued", the older tab deciding from its own copy of the ledger)."""
    origin, result, arrived = page_server
    (built / "versions.html").write_text(
        '<!doctype html><meta charset="utf-8"><title>ldp sdk versions</title>'
        '<script type="module" src="/e2e-versions.js"></script>')
    assert page_reports(f"{origin}/versions.html", arrived, 60), "the page never reported"
    empty = {"state": 0, "rows": 0, "charges": 0, "tokens": 0}
    assert result[0] == {
        "ok": True,
        "heldAt": 2,
        "whileHeld": ["storage_error"] * 3,
        "writtenWhileHeld": empty,
        "afterClose": "queued",
        "reports": [1],
        "oldLater": "VersionError",
        "newerVersion": 4,
        "newerBlocked": False,
        "afterUpgrade": "storage_error",
        # The newer SDK delivers the spool: this one's flush sends nothing (before, it
        # asked the issuer for the queued report's token, then resent on every backoff).
        "retiredFlush": {"answer": False, "requests": 0},
        # The secret and the generations (state), the one queued report and its charge.
        "newerSees": {"state": 2, "rows": 1, "charges": 1, "tokens": 0},
        "afterNewerClosed": "storage_error",
        "lateAnswer": "storage_error",
    }, result[0]


#: The opt-in forms' metrics (sdk-js/test/e2e-forms.ts; ``statistics`` resolves ``auto`` to
#: Square Wave).
FORM_SPECS: list[dict[str, Any]] = [
    {"name": "js.f.search", "kind": "string", "epsilon": 4.0, "max_length": 6,
     "alphabet": "a-z", "casefold": True, "min_reports": 1},
    {"name": "js.f.latency", "kind": "numeric", "lo": 0.0, "hi": 100.0, "epsilon": 4.0,
     "statistics": ["mean", "distribution", "quantiles"], "min_reports": 1},
    {"name": "js.f.plan", "kind": "categorical", "domain": DOMAIN, "epsilon": 2.0,
     "mechanism": "cms", "min_reports": 1},
    # Memoised strings (prefixOlhMemo): each device's string of js.f.search, in MEMO_EPOCHS
    # daily epochs.  eps_1 = 4, eps_inf = 6: 5 simulated windows (seeds 0-4) chose it, 200
    # held-out ones (seeds 100-299, simulate_window + discover(epochs=3) at 1 - 1e-8)
    # missed "hello" and "world" 0 times, their intervals failed to cover 0 times.
    {"name": "js.f.memo", "kind": "string", "epsilon": 4.0, "max_length": 6,
     "alphabet": "a-z", "casefold": True, "longitudinal": {"epsilon_inf": 6.0},
     "min_reports": 1},
    # The hierarchical histogram (``hierarchical``), a mean of the same amounts.
    {"name": "js.f.hier", "kind": "numeric", "lo": 0.0, "hi": 100.0, "epsilon": 2.0,
     "mechanism": "hierarchical", "min_reports": 1},
]
FORM_DEVICES = 2000
#: The memoised metric's window: MEMO_EPOCHS days, the last one today.
MEMO_EPOCHS = 3
#: The strings the memoised metric must discover.  "ab" is not asked: 200 devices, a
#: sixth of them at the 2-symbol level (Binomial(200, 1/6)), miss its survivor floor
#: with probability ~3e-6 (exact sum over that binomial); "world" (400 devices) with
#: ~5e-14, "hello" less: the window's two intervals (1 - 1e-8 each) dominate.
MEMO_HEAVY = {"hello": 600, "world": 400}
#: As tests/system/test_strings_e2e.py: "hello" 30% (in three cases: one string after
#: casefold), "world" 20%, "ab" 10%, 40% over 800 random strings.  At n = 2000, eps = 4
#: each heavy string is over 9 null standard deviations at the last level (~1000
#: reports) and over 5 at the earlier ones: each is missed with probability < 1e-9.
HEAVY = {"hello": 600, "world": 400, "ab": 200}


def form_plan() -> dict[str, list[Any]]:
    """Device i's string, number and category (fixed seeds)."""
    import random

    rng = random.Random(7)
    strings = ["Hello", "HELLO", "hello"] * 200 + ["world"] * 400 + ["ab"] * 200
    tail = sorted({"".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                           for _ in range(rng.randint(3, 6))) for _ in range(900)} - set(HEAVY))
    strings += [tail[k % 800] for k in range(FORM_DEVICES - len(strings))]
    amounts = np.round(100 * np.random.default_rng(5).beta(2, 5, size=FORM_DEVICES), 1)
    plans = [DOMAIN[0 if i % 20 < 8 else 1 if i % 20 < 14 else 2 if i % 20 < 18 else 3]
             for i in range(FORM_DEVICES)]
    return {"strings": strings, "amounts": [float(x) for x in amounts], "plans": plans}


@needs_node
def test_forms_through_the_real_stack(
    built: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    """2000 Node devices (``registerForms(prefixOlh, prefixOlhMemo, cms, hierarchical)``;
    Square Wave is in the core) record four metrics through the real collector and issuer, and a
    memoised string metric in each of MEMO_EPOCHS days (an injected clock); the
    aggregator's answers cover the truth, the memoised metric's over its window (its
    stderr widened for the correlated reports of one device).  22 intervals at 1 - 1e-8
    and 5 discoveries that each fail with probability < 1e-9: a false failure has
    probability < 3e-7.  The distribution's
    target is the value rounded to the grid (tests/system/test_distribution_e2e.py:
    a quantile gets 1.5 grid steps of slack, a bucket's share moves by the few values
    near its edges, far below the intervals' half-width)."""
    import redis

    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    plan = form_plan()
    start = time.time() - (MEMO_EPOCHS - 1) * DAY   # the memoised metric's first day
    first = int(start // DAY)
    memo_plan = {"memoStart": start, "memoEpochs": MEMO_EPOCHS}
    (tmp_path / "plan.json").write_text(json.dumps({**plan, **memo_plan}))
    extra = {"LDP_ACCEPTANCE_HOURS": str(24 * (MEMO_EPOCHS + 2))}
    with start_collector(redis_server.url, log_dir=tmp_path / "collector",
                         extra_env=extra) as collector:
        resolved = []
        for spec in FORM_SPECS:
            answer = httpx.post(f"{collector.url}/v1/metrics", json=spec,
                                headers=auth(ADMIN_KEY), timeout=10)
            assert answer.status_code in (200, 201), answer.text
            params = answer.json()["params"]
            levels = params.get("levels", 1)   # the hierarchy's: its list of level oracles
            resolved.append(f"{params['mechanism']}/{levels if isinstance(levels, int) else 1}")
        assert resolved == ["prefix_olh/1", "square_wave/1", "cms/1", "prefix_olh/2",
                            "hierarchical/1"]
        node = subprocess.run(
            ["node", "dist/test/e2e-forms.js", collector.url, INGEST_KEY,
             str(tmp_path / "plan.json")], cwd=SDK, capture_output=True, text=True, timeout=900)
        assert node.returncode == 0, node.stderr[-3000:]
        totals = json.loads(node.stdout.strip().splitlines()[-1])
        reports = (len(FORM_SPECS) - 1 + MEMO_EPOCHS) * FORM_DEVICES
        # Every device's lifetime ledger: one memoised string, charged eps_inf once.
        assert totals == {"queued": reports, "sent": reports, "dropped": 0, "notQueued": [],
                          "memoCharged": FORM_DEVICES}, totals
    # The memoised metric's window reads its 3 x 325,632 counters in one request.
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis_server.url, "LDP_ANALYST_KEYS": ANALYST_KEY,
           "LDP_MAX_READ_COUNTERS": str(1 << 20)}
    strict = 1 - 1e-8
    with start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path / "agg") as agg:
        def get(name: str, n: int = FORM_DEVICES, **params: Any) -> dict[str, Any]:
            answer = httpx.get(f"{agg.url}/v1/estimates/{name}",
                               params={"confidence": strict, **params},
                               headers=auth(ANALYST_KEY), timeout=60)
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            assert body["n"] == n
            return body

        # The memoised strings over their window: every device in every epoch, so a
        # string's share of the reports is its share of the devices.
        window = get("js.f.memo", MEMO_EPOCHS * FORM_DEVICES, start=first,
                     end=first + MEMO_EPOCHS)
        assert window["window"]["epochs"] == MEMO_EPOCHS
        memo = window["estimate"]
        assert f"{MEMO_EPOCHS} epochs" in memo["stderr_basis"], memo["stderr_basis"]
        listed = {row["category"]: row for row in memo["values"] if row["confident"]}
        assert set(MEMO_HEAVY) <= set(listed), list(listed)
        for value, count in MEMO_HEAVY.items():
            print("js.f.memo", value, count / FORM_DEVICES, listed[value]["ci_low"],
                  listed[value]["ci_high"])
            assert listed[value]["ci_low"] <= count / FORM_DEVICES <= listed[value]["ci_high"]

        found = get("js.f.search")["estimate"]
        listed = {row["category"]: row for row in found["values"] if row["confident"]}
        assert set(HEAVY) <= set(listed), list(listed)
        for value, count in HEAVY.items():
            print("js.f.search", value, count / FORM_DEVICES, listed[value]["ci_low"],
                  listed[value]["ci_high"])
            assert listed[value]["ci_low"] <= count / FORM_DEVICES <= listed[value]["ci_high"]

        values = np.array(plan["amounts"])
        body = get("js.f.latency", buckets=8, quantiles="0.25,0.5,0.9")
        assert body["mechanism"] == "square_wave"
        est = body["estimate"]
        print("js.f.latency mean", values.mean(), est["ci_low"], est["ci_high"])
        assert est["ci_low"] <= values.mean() <= est["ci_high"]
        for b in est["distribution"]["buckets"]:
            inside = ((b["low"] <= values) & ((b["high"] > values) | (b["high"] == 100.0))).mean()
            assert b["ci_low"] <= inside <= b["ci_high"], (b, inside)
        k = MetricSpec.from_json(FORM_SPECS[1]).build().k  # type: ignore[attr-defined]
        for row in est["quantiles"]:
            truth = float(np.quantile(values, row["q"]))
            slack = 1.5 * 100 / k
            assert row["ci_low"] - slack <= truth <= row["ci_high"] + slack, (row, truth)

        rows = get("js.f.plan")["estimate"]["values"]
        for row, share in zip(rows, SHARES, strict=True):
            print("js.f.plan", row["value"], share, row["ci_low"], row["ci_high"])
            assert row["ci_low"] <= share <= row["ci_high"], (row, share)

        # The JS hierarchy's cells, decoded by the core's inverse: its mean covers the truth.
        body = get("js.f.hier")
        assert body["mechanism"] == "hierarchical"
        est = body["estimate"]
        print("js.f.hier mean", values.mean(), est["ci_low"], est["ci_high"])
        assert est["ci_low"] <= values.mean() <= est["ci_high"]
