"""SDK under process faults and concurrency: kill -9, fork, threads, and its imports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk import Client, DeliveryConfig, Fleet
from tests.support.sdk_children import FixedClock
from tests.support.sdk_fixtures import many_metrics, specs, spool_rows
from tests.support.sdk_http import Reply, ScriptedCollector
from tests.support.servers import REPO_ROOT

KEY = "ingest-key-for-tests"

#: The sending process: record N reports (one per metric), say so, then deliver.
CHILD = textwrap.dedent("""
    import sys, time
    from client_sdk import Client, DeliveryConfig
    url, state, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    c = Client(url, api_key="ingest-key-for-tests", state_dir=state,
               delivery=DeliveryConfig(batch_size=1000, interval=0.05, request_timeout=30,
                                       backoff_base=0.05, backoff_max=0.1))
    assert c.refresh_metrics(5) or c.metrics(), "no specs"
    for i in range(n):
        assert c.record(f"m{i}", "b").ok
    print("recorded", flush=True)
    c.flush(60)
    time.sleep(60)
""")


@pytest.fixture()
def server() -> Iterator[ScriptedCollector]:
    with ScriptedCollector(specs() + many_metrics(40)) as srv:
        yield srv


def _spawn(url: str, state: Path, n: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(state), str(n)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO_ROOT,
    )


def _kill9(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL


def test_kill9_while_offline_then_restart_delivers_everything_once(
    server: ScriptedCollector, tmp_path: Path
) -> None:
    server.script.extend([Reply(503, {"Retry-After": "60"}, b"{}")])  # the collector is down
    proc = _spawn(server.url, tmp_path, 30)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "recorded"
        server.wait_posts(1)
    finally:
        _kill9(proc)
    assert len(spool_rows(tmp_path)) == 30  # durable before record returned
    c = Client(server.url, api_key=KEY, state_dir=tmp_path, background=False)
    try:
        assert c.flush(10)
        assert len(server.accepted) == len(set(server.accepted)) == 30
        assert (c.counters().sent, c.counters().duplicates) == (30, 0)
    finally:
        c.close(0)


def test_kill9_during_delivery_resend_counts_once(
    server: ScriptedCollector, tmp_path: Path
) -> None:
    stored = threading.Event()
    server.on_batch = stored.set
    # The collector stores the batch, then the sender dies before it reads the answer.
    server.script.append(Reply(200, {}, b"{}", delay=3.0, store=True))
    proc = _spawn(server.url, tmp_path, 25)
    try:
        assert stored.wait(20), "the batch never reached the collector"
    finally:
        _kill9(proc)
    assert len(server.accepted) == 25
    assert len(spool_rows(tmp_path)) == 25  # not acknowledged: still spooled
    c = Client(server.url, api_key=KEY, state_dir=tmp_path, background=False)
    try:
        assert c.flush(10)  # the dead sender's lease is freed
        assert (c.counters().sent, c.counters().duplicates) == (0, 25)
        assert len(server.accepted) == len(set(server.accepted)) == 25
        assert spool_rows(tmp_path) == []
    finally:
        c.close(0)


def test_fork_child_starts_empty_with_its_own_sender(
    server: ScriptedCollector, tmp_path: Path
) -> None:
    c = Client(
        server.url,
        api_key=KEY,
        state_dir=tmp_path,
        metrics=server.metrics,
        delivery=DeliveryConfig(durability="batch", interval=60, persist_interval=60),
    )
    try:
        assert c.record("m0", "a").ok  # in the parent's memory queue
        assert c.counters().pending == 1
        pid = os.fork()
        if pid == 0:  # the child: never return to pytest
            code = 3
            try:
                before = c.counters()
                result = c.record("m1", "c")
                delivered = c.flush(10)
                after = c.counters()
                sender = [t for t in threading.enumerate() if t.name == "ldp-telemetry-sender"]
                code = (
                    0
                    if (
                        before.queued,
                        before.pending,
                        result.ok,
                        delivered,
                        after.sent,
                        len(sender),
                    )
                    == (0, 0, True, True, 1, 1)
                    else 1
                )
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert len(server.accepted) == 1  # only the child's report
        assert c.flush(10)
        assert len(server.accepted) == 2 and c.counters().sent == 1
        metrics = Counter(json.loads(p.body)["metric"][0] for p in server.posts())
        assert metrics == {"m0": 1, "m1": 1}
    finally:
        c.close(1)


def test_concurrent_record_is_thread_safe(server: ScriptedCollector, tmp_path: Path) -> None:
    c = Client(
        server.url,
        api_key=KEY,
        state_dir=tmp_path,
        metrics=server.metrics,
        delivery=DeliveryConfig(batch_size=7, interval=0.05),
        clock=FixedClock(time.time()),  # one epoch, even if midnight UTC passes meanwhile
    )
    results: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        mine = [c.record(f"m{i}", "a").status for i in range(40)]
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        # One report per (device, metric, epoch): of 8 racing records exactly one wins.
        assert Counter(results) == {"queued": 40, "over_budget": 280}
        assert c.flush(10)
        assert len(server.accepted) == len(set(server.accepted)) == 40
        assert (c.counters().sent, c.counters().dropped) == (40, {})
    finally:
        c.close(1)


def test_concurrent_fleet_devices(server: ScriptedCollector) -> None:
    fleet = Fleet(
        server.url,
        api_key=KEY,
        metrics=server.metrics,
        delivery=DeliveryConfig(batch_size=200, interval=0.05, durability="batch"),
    )

    def worker() -> None:
        for _ in range(150):
            d = fleet.device()
            assert d.record("browser", "quokkachrome-91c2").ok
            assert d.record("session_minutes", 30).ok

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert fleet.flush(20)
        assert len(server.accepted) == len(set(server.accepted)) == 1800
    finally:
        fleet.close(1)


BLOCKER = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = {"numpy", "redis", "fastapi", "pydantic", "uvicorn", "starlette", "httpx",
               "orjson", "collector", "aggregator", "ldp_cli"}
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked: {name}")
            return None
    sys.meta_path.insert(0, Block())
    import client_sdk
    from client_sdk import Fleet
    import json
    specs = json.loads(sys.argv[1])
    fleet = Fleet("http://127.0.0.1:9", api_key="k", metrics=specs, background=False)
    d = fleet.device()
    for name, value in [("browser", "zebrafox-7f3a"), ("session_minutes", 3.5),
                        ("dark_mode", True), ("theme", "zebrafox-7f3a"), ("page", "p2")]:
        assert d.record(name, value).ok, name
    fleet.close(0)
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not leaked, leaked
    print("ok")
""")


def test_imports_only_stdlib_and_ldp_core() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", BLOCKER, json.dumps(specs())],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_atexit_flushes_with_a_deadline(server: ScriptedCollector, tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import sys
        from client_sdk import Client, DeliveryConfig
        c = Client(sys.argv[1], api_key="k", state_dir=sys.argv[2],
                   delivery=DeliveryConfig(interval=600, atexit_timeout=5))
        assert c.refresh_metrics(5)
        assert c.record("m0", "a").ok and c.record("m1", "b").ok
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", script, server.url, str(tmp_path)],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert len(server.accepted) == 2  # sent at exit, not after interval=600
    assert time.monotonic() - start < 30
