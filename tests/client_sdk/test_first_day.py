"""Issue 33, "the first day works": the documented quickstart, and faults that must degrade.

Each test fails on the SDK before the fix:
- ``ldp metric list --json > ldp-metrics.json`` (the command of docs/sdk-python.md, run
  verbatim through a shell) wrote specs with ``unit_text``, which the SDK refused one by
  one and silently; a first launch with the collector down then held the record and
  forgot it at close (logged at INFO).  Now the file is a catalog (specs as devices get
  them, and the collector's issuer key id), the record is spooled offline and delivered
  by the next launch, and the pinned key means no unpinned-key WARNING;
- a spec of the bundled catalog that cannot load is logged at WARNING (name and
  reason) and counted, a held value forgotten at close is logged at WARNING;
- a state folder that cannot be created raised ``StateError`` from ``Client(...)``
  into the app; now the Client runs disabled with a reason.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from client_sdk import Client, DeliveryConfig
from ldp_server.redis_server import RedisServer, free_port
from tests.support.sdk_fixtures import BROWSERS, specs, spool_rows
from tests.support.servers import ADMIN_KEY, ANALYST_KEY, INGEST_KEY, REPO_ROOT, auth
from tests.support.stack import Stack, StackSettings, start_stack
from tests.support.tokens import test_key as issuer_key

FAST = DeliveryConfig(interval=60.0, backoff_base=0.05, backoff_max=0.2, request_timeout=2.0)
#: The two metrics of the quickstart in docs/sdk-python.md.
QUICKSTART = [
    {"name": "browser", "kind": "categorical", "domain": ["firefox", "chrome", "safari"],
     "epsilon": 1.0},
    {"name": "session_minutes", "kind": "numeric", "lo": 0, "hi": 120, "epsilon": 1.0},
]


@pytest.fixture()
def stack(redis_server: RedisServer, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    monkeypatch.delenv("LDP_ISSUER_KEYS", raising=False)   # pins come from the catalog only
    with start_stack(redis_server, tmp_path / "stack", StackSettings()) as started:
        started.register(*QUICKSTART)
        yield started.with_aggregator()


def reports(stack: Stack, metric: str) -> int:
    """How many reports of ``metric`` the server holds (the aggregator's ``n``)."""
    answer = httpx.get(f"{stack.aggregator_url}/v1/estimates/{metric}",
                       headers=auth(ANALYST_KEY), timeout=30)
    assert answer.status_code == 200, answer.text
    n: int = answer.json()["n"]
    return n


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "client_sdk" and r.levelno >= logging.WARNING]


def test_documented_catalog_records_offline_then_delivers(
        stack: Stack, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    app = tmp_path / "app"
    app.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    env.update({
        "PATH": f"{REPO_ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": str(REPO_ROOT), "LDP_DATA_DIR": str(tmp_path / "no-ldp-up"),
        "LDP_AGGREGATOR_URL": stack.aggregator_url, "LDP_ANALYST_KEY": ANALYST_KEY,
        "LDP_COLLECTOR_URL": stack.collector.url, "LDP_ADMIN_KEY": ADMIN_KEY,
    })
    done = subprocess.run("ldp metric list --json > ldp-metrics.json", shell=True,  # noqa: S602
                          cwd=app, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    catalog = json.loads((app / "ldp-metrics.json").read_text())
    assert catalog["issuer_keys"] == [issuer_key().public.key_id.hex()]
    state = tmp_path / "state"
    with caplog.at_level(logging.INFO, logger="client_sdk"):
        # First launch, the collector down (nothing listens on that port).
        offline = Client(f"http://127.0.0.1:{free_port()}", api_key=INGEST_KEY,
                         state_dir=state, metrics=app / "ldp-metrics.json", delivery=FAST)
        statuses = [offline.record("browser", "firefox").status,
                    offline.record("session_minutes", 12.5).status]
        offline.close(0.5)
        assert statuses == ["queued", "queued"]
        assert offline.counters().refused == {} and offline.counters().config_errors == {}
        assert len(spool_rows(state)) == 2
        assert (reports(stack, "browser"), reports(stack, "session_minutes")) == (0, 0)
        # Next launch, the collector up: the spooled reports go out.
        with Client(stack.collector.url, api_key=INGEST_KEY, state_dir=state,
                    metrics=app / "ldp-metrics.json", delivery=FAST) as online:
            assert online.flush(20)
            counters = online.counters()
    assert (counters.sent, counters.config_errors) == (2, {})
    assert (reports(stack, "browser"), reports(stack, "session_minutes")) == (1, 1)
    assert warnings_of(caplog) == []        # no skipped spec, no unpinned key, nothing dropped


def test_a_bundled_spec_that_cannot_load_is_logged_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    display = {**specs()[0], "unit_text": "per device, per metric, per day"}   # tolerated
    odd = {"name": "odd_flag", "kind": "boolean", "epsilon": 1.0, "colour": "red"}
    with caplog.at_level(logging.WARNING, logger="client_sdk"):
        for run in range(2):                # a second Client: logged again (new process)
            c = Client(f"http://127.0.0.1:{free_port()}", api_key=INGEST_KEY,
                       state_dir=tmp_path / str(run), metrics=[display, odd, odd],
                       background=False)
            assert c.record(display["name"], BROWSERS[0]).status == "queued"
            assert c.counters().config_errors == {"bundled_spec_invalid": 1}
            c.close(0)
    skipped = [m for m in warnings_of(caplog) if "odd_flag" in m]
    assert len(skipped) == 2, warnings_of(caplog)      # once per Client, not per copy
    assert "colour: unknown field" in skipped[0] and "bundled with the app" in skipped[0]


def test_a_value_still_held_at_close_is_dropped_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    c = Client(f"http://127.0.0.1:{free_port()}", api_key=INGEST_KEY, state_dir=tmp_path,
               delivery=FAST, background=False)
    assert c.record("browser", BROWSERS[0]).status == "held"
    with caplog.at_level(logging.WARNING, logger="client_sdk"):
        c.close(0.2)
    assert c.counters().refused == {"hold_dropped": 1}
    assert any("forgotten at close" in m for m in warnings_of(caplog)), caplog.records


@pytest.mark.parametrize("where", ["under_a_file", "newer_schema"])
def test_an_unusable_state_folder_degrades_instead_of_raising(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str) -> None:
    if where == "under_a_file":
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("a regular file")
        state = blocker / "state"            # mkdir fails for root too (ENOTDIR)
    else:
        state = tmp_path / "state"
        Client("http://127.0.0.1:9", api_key=INGEST_KEY, state_dir=state,
               background=False).close(0)
        with contextlib.closing(sqlite3.connect(state / "spool.sqlite3")) as db:
            db.execute("PRAGMA user_version = 999")     # a spool of a future SDK
    with caplog.at_level(logging.WARNING, logger="client_sdk"):
        c = Client("http://127.0.0.1:9", api_key=INGEST_KEY, state_dir=state,
                   metrics=specs(), background=False)
        results = [c.record("browser", BROWSERS[0]) for _ in range(3)]
        assert c.flush(0.1) and c.close(0.1)
    assert [r.status for r in results] == ["state_unavailable"] * 3
    assert not any(r.ok for r in results)
    counters = c.counters()
    assert counters.refused == {"state_unavailable": 3}
    assert counters.config_errors == {"state_unavailable": 1}
    assert c.privacy_report().units == ()
    logged = warnings_of(caplog)
    assert len(logged) == 1 and str(state) in logged[0], logged
    assert "state_unavailable" in logged[0]
