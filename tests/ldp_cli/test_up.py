"""``ldp up`` as a real process, then the query commands against it over HTTP.

First run: keys made (0600) and printed once, the two URLs printed; a metric
is created with ``ldp metric create``; a small fleet reports through the real
SDK; ``ldp estimate`` / ``--json`` / ``ldp plot`` read it back.  SIGINT stops
everything; a second ``ldp up`` on the same folder prints no key and still
has the data (Redis append-only file).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client_sdk import Fleet
from ldp_server.redis_server import RedisServer
from tests.support.sdk_children import FixedClock
from tests.support.servers import REPO_ROOT

DEVICES = 1500


def ldp_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "ldp_cli.main", *args]


def run_ldp(*args: str, data: Path, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    return subprocess.run(
        ldp_argv(*args, "--data", str(data)),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env=env,
        check=False,
    )


class Up:
    """An ``ldp up`` process whose stdout goes to a file we poll (bounded)."""

    def __init__(self, data: Path, log: Path, env_extra: dict[str, str] | None = None) -> None:
        self.log = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
        env.update(env_extra or {})
        with open(log, "w") as out:
            # A session of its own, like a shell job: Ctrl-C reaches its whole group.
            self.process = subprocess.Popen(
                ldp_argv(
                    "up", "--data", str(data), "--collector-port", "0", "--aggregator-port", "0"
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO_ROOT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while "running;" not in self.text():
            assert self.process.poll() is None, self.text()
            assert time.monotonic() < deadline, self.text()
            time.sleep(0.1)

    def text(self) -> str:
        return self.log.read_text()

    def url(self, name: str) -> str:
        found = re.search(rf"^{name}:\s+(http://\S+)", self.text(), re.M)
        assert found, self.text()
        return found.group(1)

    def stop(self, sig: signal.Signals = signal.SIGINT, group: bool = False) -> int:
        """``group``: to the whole process group, as a terminal's Ctrl-C does."""
        if group:
            os.killpg(self.process.pid, sig)
        else:
            self.process.send_signal(sig)
        return self.process.wait(30)

    def kill(self) -> None:
        """Cleanup after a failure: SIGKILL our process group (ldp and its Redis).

        The uvicorn services get SIGTERM from the kernel when ldp dies
        (PR_SET_PDEATHSIG, see ``ldp_cli.stack``).
        """
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def port_open(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    return tmp_path / "ldp-data"


def test_up_query_stop_and_restart(data: Path, tmp_path: Path) -> None:
    up = Up(data, tmp_path / "up1.log")
    try:
        first = up.text()
        keys = json.loads((data / "keys.json").read_text())
        assert stat.S_IMODE((data / "keys.json").stat().st_mode) == 0o600
        for role in ("admin", "ingest", "analyst"):
            assert keys[role] in first and len(keys[role]) >= 40
        collector, aggregator = up.url("collector"), up.url("aggregator")
        assert collector.startswith("http://127.0.0.1:")

        created = run_ldp(
            "metric",
            "create",
            "theme",
            "--kind",
            "categorical",
            "--domain",
            "light,dark,auto",
            "--epsilon",
            "2",
            "--min-reports",
            "100",
            data=data,
        )
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["version"] == 1
        bad = run_ldp(
            "metric", "create", "Bad Name", "--kind", "boolean", "--epsilon", "1", data=data
        )
        assert bad.returncode == 1 and "invalid_spec" in bad.stderr
        listed = run_ldp("metric", "list", data=data)
        assert listed.returncode == 0 and "theme" in listed.stdout
        assert "per device, per metric, per day" in listed.stdout

        # A stopped clock: the per-day series below expects every report in one epoch.
        fleet = Fleet(collector, api_key=keys["ingest"], background=False,
                      clock=FixedClock(time.time()))
        assert fleet.refresh_metrics(10)
        for i in range(DEVICES):
            assert fleet.device().record("theme", ("light", "dark", "auto")[i % 3]).ok
        assert fleet.flush(60)
        fleet.close(1)

        table = run_ldp("estimate", "theme", data=data)
        assert table.returncode == 0, table.stderr
        assert f"n = {DEVICES} reports" in table.stdout
        assert "epsilon = 2 per report, per device, per metric, per day" in table.stdout
        rows = [line.split()[0] for line in table.stdout.splitlines()[3:]]
        assert rows == ["light", "dark", "auto"]
        per_day = run_ldp("estimate", "theme", "--series", data=data)
        assert per_day.returncode == 0, per_day.stderr
        assert "per day: share of" in per_day.stdout
        assert re.search(
            rf"^\s*\d+ \d{{4}}-\d\d-\d\d\s+{DEVICES}\s+0\.\d{{4}}", per_day.stdout, re.M
        )
        raw = run_ldp("estimate", "theme", "--json", "--confidence", "0.9", data=data)
        body = json.loads(raw.stdout)
        assert body["confidence"] == 0.9 and body["n"] == DEVICES
        missing = run_ldp("estimate", "nope", data=data)
        assert missing.returncode == 1 and "unknown_metric" in missing.stderr

        png = tmp_path / "theme.png"
        plotted = run_ldp("plot", "theme", "-o", str(png), data=data)
        assert plotted.returncode == 0, plotted.stderr
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000

        assert up.stop(signal.SIGINT, group=True) == 0
        assert "stopped" in up.text()
        assert not port_open(collector) and not port_open(aggregator)
        assert "ready to exit" in (data / "redis" / "redis.log").read_text()
        for secret in keys.values():
            for log in (data / "logs").iterdir():
                assert secret not in log.read_text()
    finally:
        up.kill()

    again = Up(data, tmp_path / "up2.log")
    try:
        second = again.text()
        assert "shown on the first run only" in second
        assert all(k not in second for k in keys.values())
        table = run_ldp("estimate", "theme", data=data)
        assert f"n = {DEVICES} reports" in table.stdout, table.stdout + table.stderr
        assert again.stop(signal.SIGTERM) == 0
        assert "stopped" in again.text()
    finally:
        again.kill()


def test_up_with_an_external_redis(data: Path, tmp_path: Path, redis_server: RedisServer) -> None:
    up = Up(data, tmp_path / "up.log", {"LDP_REDIS_URL": redis_server.url})
    try:
        assert "redis:      external" in up.text()
        assert not (data / "redis").exists()
        listed = run_ldp("metric", "list", data=data)
        assert listed.returncode == 0, listed.stderr
        # Without --data (nor LDP_DATA_DIR) the CLI looks in the default folder, where
        # no `ldp up` runs: the message says how to point it at this one.
        home = tmp_path / "home"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("LDP_") and k != "XDG_DATA_HOME"}
        lost = subprocess.run(
            ldp_argv("metric", "create", "theme", "--kind", "boolean", "--epsilon", "1"),
            capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False,
            env={**env, "HOME": str(home)},
        )
        assert lost.returncode == 1 and lost.stdout == ""
        default = home / ".local" / "share" / "ldp-telemetry"
        assert lost.stderr == (
            "ldp metric: no collector URL: no `ldp up` is running on the data folder"
            f" {default}; pass --data DIR (the folder given to `ldp up --data DIR`) or set"
            " LDP_DATA_DIR, or give the URL and key with --url/--key"
            " (or LDP_COLLECTOR_URL/LDP_ADMIN_KEY)\n"), lost.stderr
        assert up.stop(signal.SIGTERM) == 0
    finally:
        up.kill()
    assert redis_server.ping()


def test_killed_ldp_leaves_no_service_behind(data: Path, tmp_path: Path) -> None:
    """SIGKILL to ``ldp`` alone: the kernel's PDEATHSIG stops Redis and both services."""
    up = Up(data, tmp_path / "up.log")
    urls = [up.url("collector"), up.url("aggregator")]
    up.process.kill()
    up.process.wait()
    deadline = time.monotonic() + 20
    redis_log = data / "redis" / "redis.log"
    while any(port_open(u) for u in urls) or "ready to exit" not in redis_log.read_text():
        assert time.monotonic() < deadline, "services outlived a killed ldp"
        time.sleep(0.1)


def test_estimate_without_a_running_system_says_so(data: Path) -> None:
    done = run_ldp("estimate", "theme", data=data)
    assert done.returncode == 1
    assert "no aggregator URL: no `ldp up` is running on the data folder" in done.stderr
    assert f"{data}; pass --data DIR" in done.stderr


def _pids_matching(*needles: str) -> list[int]:
    """PIDs whose command line holds every needle (our own children only: unique ports)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if all(n in cmdline for n in needles):
            found.append(int(entry.name))
    return found


def _children(parent: int, comm: str) -> list[int]:
    """Live (not zombie) children of ``parent`` named ``comm``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if name == comm and int(stat_fields[1]) == parent and stat_fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _healthz(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except OSError:
        return False


def test_up_restarts_a_killed_child_redis_included(data: Path, tmp_path: Path) -> None:
    """kill -9 of the collector, the aggregator and Redis in turn: each is started again
    on its own port (and Redis on its own folder, password and data), with one JSON line
    per restart, and ``ldp up`` stays up (it used to stop the whole stack, and a killed
    Redis left a zombie and a stack that said "running")."""
    up = Up(data, tmp_path / "up.log")
    try:
        collector, aggregator = up.url("collector"), up.url("aggregator")
        targets = {
            "collector": lambda: _pids_matching("collector.app:create_app",
                                                collector.rsplit(":", 1)[1]),
            "aggregator": lambda: _pids_matching("aggregator.app:create_app",
                                                 aggregator.rsplit(":", 1)[1]),
            "redis": lambda: _children(up.process.pid, "redis-server"),
        }
        for restarts, (child, find) in enumerate(targets.items(), start=1):
            pids = find()
            assert len(pids) == 1, (child, pids)
            os.kill(pids[0], signal.SIGKILL)
            deadline = time.monotonic() + 45
            while up.text().count('"event": "restarted"') < restarts:
                assert up.process.poll() is None, up.text()
                assert time.monotonic() < deadline, up.text()
                time.sleep(0.2)
            assert f'"child": "{child}"' in up.text()
        # Everything answers again; Redis came back with its data (the metric list).
        assert _healthz(collector) and _healthz(aggregator)
        keys = json.loads((data / "keys.json").read_text())
        deadline = time.monotonic() + 30  # until the collector's client has reconnected
        while (done := run_ldp("metric", "list", data=data)).returncode != 0:
            assert "store_unavailable" in done.stderr, done.stderr
            assert time.monotonic() < deadline, done.stderr
            time.sleep(0.5)
        assert up.process.poll() is None
        assert len(_children(up.process.pid, "redis-server")) == 1  # no zombie left
        supervision = up.text().split("running;", 1)[1]  # the banner shows keys once, by design
        assert all(key not in supervision for key in keys.values())
        assert up.stop() == 0
    finally:
        up.kill()
