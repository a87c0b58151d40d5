"""One folder, one owner; and ``ldp up`` supervises its children (real processes only).

A second ``ldp up`` on a held folder refuses in one line naming the first
one's pid and URLs, starts nothing and deletes nothing.  Under a real ``ldp
up``, kill -9 of Redis, the collector and the aggregator in turn (and SIGSTOP
of the collector: hung) each comes back on its port and serves, the killed
process is reaped (no zombie), every restart is a JSON line, and ``ldp
status`` never says "running" while a child is down.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.ldp_cli.test_up import Up, port_open, run_ldp
from tests.support.servers import REPO_ROOT


def status(data: Path) -> dict[str, Any]:
    return dict(json.loads((data / "status.json").read_text()))


def wait_until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def not_a_zombie(pid: int) -> bool:
    """The pid is gone (reaped) or at least not a zombie."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" not in text


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=2) as resp:  # noqa: S310
            return bool(resp.status == 200)
    except OSError:
        return False


def test_a_second_up_on_the_same_folder_refuses_and_deletes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "ldp-data"
    first = Up(data, tmp_path / "up1.log")
    try:
        urls = [first.url("collector"), first.url("aggregator")]
        before = {p.name: p.read_bytes() for p in data.iterdir() if p.is_file()}
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
        second = subprocess.run(
            [sys.executable, "-m", "ldp_cli.main", "up", "--data", str(data),
             "--collector-port", "0", "--aggregator-port", "0"],
            capture_output=True, text=True, timeout=30, cwd=REPO_ROOT, env=env, check=False,
        )
        assert second.returncode == 1
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert f"pid {first.process.pid}" in lines[0] and all(u in lines[0] for u in urls)
        assert second.stdout == ""
        after = {p.name: p.read_bytes() for p in data.iterdir() if p.is_file()}
        assert after == before  # endpoints.json, keys.json, status.json untouched
        assert all(healthy(u) for u in urls)
        assert run_ldp("status", data=data).returncode == 0
        assert first.stop(signal.SIGTERM) == 0
    finally:
        first.kill()
    stopped = run_ldp("status", data=data)
    assert stopped.returncode == 1 and "stopped" in stopped.stdout
    third = Up(data, tmp_path / "up3.log")  # the lock died with its holder
    try:
        assert third.stop(signal.SIGTERM) == 0
    finally:
        third.kill()


def test_up_restarts_each_killed_or_hung_child(tmp_path: Path) -> None:
    data = tmp_path / "ldp-data"
    up = Up(data, tmp_path / "up.log")
    try:
        created = run_ldp("metric", "create", "theme", "--kind", "boolean", "--epsilon", "1",
                          data=data)
        assert created.returncode == 0, created.stderr
        urls = {"collector": up.url("collector"), "aggregator": up.url("aggregator")}
        assert status(data)["state"] == "running"
        for name, how in (("redis", signal.SIGKILL), ("collector", signal.SIGKILL),
                          ("aggregator", signal.SIGKILL), ("collector", signal.SIGSTOP)):
            child = status(data)["children"][name]
            os.kill(child["pid"], how)
            if how == signal.SIGSTOP:  # hung: the state says so before the restart
                seen = wait_until(lambda: status(data)["state"] == "degraded", 15, "degraded")
                assert seen
                assert run_ldp("status", data=data).returncode == 1

            def back(name: str = name, old: dict[str, Any] = child) -> bool:
                now = status(data)
                c = now["children"][name]
                return bool(now["state"] == "running" and c["restarts"] == old["restarts"] + 1
                            and c["pid"] != old["pid"])

            wait_until(back, 45, f"{name} restarted")
            assert not_a_zombie(child["pid"])
            assert all(healthy(u) for u in urls.values())
            deadline = time.monotonic() + 30  # until the collector's client has reconnected
            while (listed := run_ldp("metric", "list", data=data)).returncode != 0:
                assert "store_unavailable" in listed.stderr, listed.stderr
                assert time.monotonic() < deadline, listed.stderr
                time.sleep(0.5)
            assert "theme" in listed.stdout  # Redis kept its data
            estimate = run_ldp("estimate", "theme", data=data)
            assert estimate.returncode == 0, estimate.stderr
        events = [json.loads(line) for line in up.text().splitlines() if line.startswith("{")]
        restarts = [e for e in events if e["event"] == "restarted"]
        assert [e["child"] for e in restarts] == ["redis", "collector", "aggregator", "collector"]
        assert "health checks" in restarts[-1]["reason"]
        assert up.stop(signal.SIGTERM) == 0
        assert not any(port_open(u) for u in urls.values())
    finally:
        up.kill()


@pytest.mark.parametrize("missing", ["status.json", "up.lock"])
def test_status_without_a_stack(tmp_path: Path, missing: str) -> None:
    data = tmp_path / "d"
    data.mkdir()
    (data / ("up.lock" if missing == "status.json" else "status.json")).write_text(
        json.dumps({"state": "running", "pid": 1, "children": {}})
    )
    done = run_ldp("status", data=data)
    assert done.returncode == 1 and "stopped" in done.stdout
