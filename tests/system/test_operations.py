"""Day-two operations (docs/operations.md), each run for real on this machine.

- the deploy env file (deploy/ldp.env.example, LDP_ENV=prod) with the documented
  token-key command starts the collector and the aggregator (/readyz 200);
- ``ldp_redis_used_memory_bytes`` / ``ldp_redis_maxmemory_bytes`` follow
  ``INFO memory`` of a real redis-server with maxmemory (NaN once it is gone);
- a Redis backup (an AOF copy and a BGSAVE snapshot) restored into a fresh
  redis-server holds every tally and dedupe key the real collector wrote;
- API-key rotation: two ingest keys both work; a removed one gets 401 after restart;
- deploy/prometheus/ldp-rules.yml passes ``promtool check rules`` and its unit
  tests, and the rules and deploy/grafana/ldp-dashboard.json name only metrics
  a real collector and aggregator export; the dashboard has the Grafana model's
  required fields.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
import yaml

from ldp_core.wire import encode_batch
from ldp_server.redis_server import RedisServer
from tests.support.reports import SPECS, envelope, today
from tests.support.servers import (
    ADMIN_KEY,
    INGEST_KEY,
    REPO_ROOT,
    ServiceProcess,
    auth,
    collector_env,
    start_collector,
    start_uvicorn,
)

DEPLOY = REPO_ROOT / "deploy"
DOC = REPO_ROOT / "docs" / "operations.md"
RULES = DEPLOY / "prometheus" / "ldp-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "ldp-dashboard.json"
MIB = 1 << 20


def parse_env(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile and compose's env_file read them."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


#: The token-key command of docs/operations.md, run here with /etc/ldp-telemetry/ replaced.
KEY_COMMAND = "(umask 077 && openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out /etc/ldp-telemetry/token-key.pem)"  # noqa: E501


def documented_key_command() -> str:
    """The one shell line of docs/operations.md that makes the token issuer key."""
    lines = [line.strip() for line in DOC.read_text().splitlines() if "openssl genpkey" in line]
    assert set(lines) == {KEY_COMMAND}, lines
    return lines[0]


def metric_value(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, (name, text[:3000])
    return float(found.group(1))


def test_deploy_env_file_starts_the_prod_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):  # exactly the env file: nothing from this process
        if name.startswith(("LDP_", "PROMETHEUS_")):
            monkeypatch.delenv(name)
    example = parse_env(DEPLOY / "ldp.env.example")
    assert example["LDP_ENV"] == "prod"
    command = documented_key_command()
    etc = tmp_path / "etc"  # stands for /etc/ldp-telemetry
    etc.mkdir()
    made = subprocess.run(["sh", "-c", command.replace("/etc/ldp-telemetry/", f"{etc}/")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    key_file = etc / command.split("-out /etc/ldp-telemetry/")[1].rstrip(")")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600

    server = RedisServer.start(tmp_path / "redis", guarded=True,
                               maxmemory=example["LDP_REDIS_MAXMEMORY"])
    try:
        assert server.password is not None
        env = dict(example, LDP_REDIS_PASSWORD=server.password,
                   LDP_REDIS_URL=example["LDP_REDIS_URL"]
                   .replace("PASSWORD", server.password)
                   .replace("@redis:6379", f"@127.0.0.1:{server.port}"))
        if "LDP_TOKEN_KEY_FILE" in env:
            env["LDP_TOKEN_KEY_FILE"] = env["LDP_TOKEN_KEY_FILE"].replace(
                "/etc/ldp-telemetry/", f"{etc}/")
        for name, value in env.items():  # the example's own recipes for the empty values
            if not value:
                env[name] = (secrets.token_hex(32) if name == "LDP_SERVER_SECRET"
                             else secrets.token_urlsafe(32))
        admin = env["LDP_ADMIN_KEYS"]
        with start_uvicorn("collector.app:create_app", env, log_dir=tmp_path,
                           ready_path="/readyz") as collector:
            assert httpx.get(collector.url + "/readyz").json() == {"ready": True}
            created = httpx.post(collector.url + "/v1/metrics", headers=auth(admin),
                                 json={**SPECS["browser"], "name": "deployed"})
            assert created.status_code == 201, created.text
            assert httpx.get(collector.url + "/metrics").status_code == 401  # key needed
            scraped = httpx.get(collector.url + "/metrics", headers=auth(env["LDP_METRICS_KEY"]))
            assert metric_value(scraped.text, "ldp_redis_maxmemory_bytes") == 1 << 30  # 1gb
        with start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path,
                           ready_path="/readyz") as aggregator:
            assert httpx.get(aggregator.url + "/readyz").status_code == 200
    finally:
        server.stop()
    assert env["LDP_TOKEN_KEY_FILE"] == str(key_file)  # the file the command made
    for place in (DEPLOY / "ldp.env.example", DEPLOY / "systemd" / "ldp-collector.service"):
        assert command in place.read_text(), place


def test_redis_memory_gauges_follow_info_memory(tmp_path: Path) -> None:
    server = RedisServer.start(tmp_path / "redis", guarded=True, maxmemory="64mb")
    env = collector_env(server.url, extra={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom")})
    (tmp_path / "prom").mkdir()
    try:
        with redis.Redis.from_url(server.url) as direct:
            direct.set("padding", b"x" * (8 * MIB))
            with start_uvicorn("collector.app:create_app", env, log_dir=tmp_path,
                               workers=2) as collector:
                for _ in range(6):  # new connections: both workers answer some
                    text = httpx.get(collector.url + "/metrics").text
                    info = direct.info("memory")
                    assert metric_value(text, "ldp_redis_maxmemory_bytes") == 64 * MIB
                    used = metric_value(text, "ldp_redis_used_memory_bytes")
                    # Read a moment apart: client buffers move used_memory by kilobytes.
                    assert 8 * MIB < used < 64 * MIB
                    assert abs(used - float(info["used_memory"])) < MIB, (used, info)
                server.stop()
                text = httpx.get(collector.url + "/metrics").text
                assert math.isnan(metric_value(text, "ldp_redis_used_memory_bytes"))
                assert math.isnan(metric_value(text, "ldp_redis_maxmemory_bytes"))
    finally:
        if server.process.poll() is None:
            server.stop()


def cli(port: int, *args: str) -> str:
    done = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, timeout=30, check=True)
    return done.stdout.strip()


def wait_persistence(port: int, *fields: str, timeout: float = 30.0) -> None:
    """Until every ``fields`` of INFO persistence reads 0 (a BGSAVE or rewrite ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = dict(line.split(":", 1) for line in cli(port, "INFO", "persistence").splitlines()
                    if ":" in line)
        if all(info[f].strip() == "0" for f in fields):
            assert "err" not in info["rdb_last_bgsave_status"] + info["aof_last_bgrewrite_status"]
            return
        time.sleep(0.05)
    raise AssertionError(f"{fields} still running after {timeout}s")


def contents(client: redis.Redis) -> dict[bytes, tuple[str, Any, bool]]:
    """Every key but the rate-limit buckets (they expire in seconds): (type, value, has a TTL)."""
    read: dict[str, Callable[[bytes], Any]] = {
        "hash": client.hgetall, "string": client.get, "set": client.smembers,
        "list": lambda k: client.lrange(k, 0, -1),
        "zset": lambda k: client.zrange(k, 0, -1, withscores=True)}
    found = {}
    for key in client.scan_iter(count=1000):
        if key.startswith(b"ldp:{rl:"):
            continue
        raw = client.type(key)
        kind = raw.decode() if isinstance(raw, bytes) else str(raw)
        found[key] = (kind, read[kind](key), client.pttl(key) > 0)
    return found


def post(url: str, envelopes: list[Any]) -> dict[str, Any]:
    r = httpx.post(url + "/v1/reports", content=orjson.dumps(encode_batch(envelopes)),
                   headers={**auth(INGEST_KEY), "Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_backup_and_restore_keep_every_tally(tmp_path: Path) -> None:
    source = RedisServer.start(tmp_path / "live")
    epoch = today()
    sent = [envelope("browser", 1, epoch, i % 4, device=i) for i in range(200)]
    restored: list[RedisServer] = []
    try:
        with start_collector(source.url, log_dir=tmp_path) as collector:
            assert httpx.post(collector.url + "/v1/metrics", json=SPECS["browser"],
                              headers=auth(ADMIN_KEY)).status_code == 201
            assert post(collector.url, sent)["accepted"] == len(sent)
        with redis.Redis(port=source.port) as live:
            before = contents(live)
        assert any(key.startswith(b"ldp:{m:browser:") for key in before), sorted(before)[:20]

        # docs/operations.md, "Backup": an AOF copy (rewrites paused while copying) ...
        cli(source.port, "CONFIG", "SET", "auto-aof-rewrite-percentage", "0")
        cli(source.port, "BGREWRITEAOF")
        wait_persistence(source.port, "aof_rewrite_in_progress", "aof_rewrite_scheduled")
        shutil.copytree(source.data_dir / "appendonlydir", tmp_path / "aof" / "appendonlydir")
        cli(source.port, "CONFIG", "SET", "auto-aof-rewrite-percentage", "100")
        # ... and a point-in-time snapshot.
        cli(source.port, "BGSAVE")
        wait_persistence(source.port, "rdb_bgsave_in_progress")
        (tmp_path / "rdb").mkdir()
        shutil.copy2(source.data_dir / "dump.rdb", tmp_path / "rdb" / "dump.rdb")
        source.stop()

        # Restore the AOF copy: a fresh redis-server on the copied appendonlydir.
        restored.append(RedisServer.start(tmp_path / "aof"))
        # Restore the snapshot: load it with appendonly off (with it on and no AOF, Redis
        # starts empty), turn the AOF on (a rewrite from memory), restart as deployed.
        loading = RedisServer.start(tmp_path / "rdb", extra=("--appendonly", "no"))
        cli(loading.port, "CONFIG", "SET", "appendonly", "yes")
        wait_persistence(loading.port, "aof_rewrite_in_progress", "aof_rewrite_scheduled")
        loading.stop()
        restored.append(RedisServer.start(tmp_path / "rdb"))

        for server in restored:
            with redis.Redis(port=server.port) as client:
                assert contents(client) == before
            with start_collector(server.url, log_dir=tmp_path) as collector:
                again = post(collector.url, sent[:10])  # retries: already counted
                assert again["accepted"] == 0 and again["duplicates"] == 10, again
    finally:
        for server in restored:
            server.stop()
        if source.process.poll() is None:
            source.stop()


def test_ingest_key_rotation(redis_url: str, tmp_path: Path) -> None:
    old, new = "rotate-old-0123456789abcdefghij", "rotate-new-0123456789abcdefghij"

    def status(service: ServiceProcess, key: str) -> int:
        return httpx.get(service.url + "/v1/metrics", headers=auth(key)).status_code

    with start_collector(redis_url, log_dir=tmp_path,
                         extra_env={"LDP_INGEST_KEYS": f"{old},{new}"}) as both:
        assert (status(both, old), status(both, new)) == (200, 200)
    with start_collector(redis_url, log_dir=tmp_path,
                         extra_env={"LDP_INGEST_KEYS": new}) as rotated:
        assert (status(rotated, old), status(rotated, new)) == (401, 200)
        refused = httpx.get(rotated.url + "/v1/metrics", headers=auth(old)).json()
        assert refused["code"] == "invalid_key"


def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.skip("promtool is not installed (Debian package prometheus: "
                    "scripts/install-system-deps.sh installs it where apt works)")
    return found


def test_alert_rules_check_and_unit_tests() -> None:
    tool = promtool()
    for argv in ([tool, "check", "rules", str(RULES)],
                 [tool, "test", "rules", str(RULES.with_name("ldp-rules.test.yml"))]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                              cwd=RULES.parent)
        assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    tool = promtool()
    rules = [{"record": f"ldp:dashboard_query_{i}", "expr": expr}
             for i, expr in enumerate(dashboard_exprs())]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def dashboard_exprs() -> list[str]:
    model = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in model["panels"] for t in panel["targets"]]


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The ldp_* series an expression reads (quoted label values dropped first)."""
    return set(re.findall(r"\bldp_[a-z0-9_]+", re.sub(r'"[^"]*"', '""', expr)))


def exported_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {name + "_bucket", name + "_count", name + "_sum"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """Every series name a collector (2 workers, as deployed) and an aggregator export,
    after an accepted, a duplicate, a rejected report and a refused batch."""
    folder = tmp_path_factory.mktemp("exported")
    server = RedisServer.start(folder / "redis", guarded=True, maxmemory="64mb")
    (folder / "prom").mkdir()
    env = collector_env(server.url, extra={"PROMETHEUS_MULTIPROC_DIR": str(folder / "prom")})
    try:
        with start_uvicorn("collector.app:create_app", env, log_dir=folder,
                           workers=2) as collector:
            assert httpx.post(collector.url + "/v1/metrics", json=SPECS["browser"],
                              headers=auth(ADMIN_KEY)).status_code == 201
            report = envelope("browser", 1, today(), 1, device=1)
            unknown = envelope("no_such_metric", 1, today(), 1, device=2)
            assert post(collector.url, [report, unknown])["accepted"] == 1
            assert post(collector.url, [report])["duplicates"] == 1
            assert httpx.post(collector.url + "/v1/reports", content=b"{",
                              headers=auth(INGEST_KEY)).status_code == 400
            names = set()
            for _ in range(4):
                names |= exported_names(httpx.get(collector.url + "/metrics").text)
        env.pop("PROMETHEUS_MULTIPROC_DIR")
        with start_uvicorn("aggregator.app:create_app", env, log_dir=folder) as aggregator:
            httpx.get(aggregator.url + "/readyz")
            names |= exported_names(httpx.get(aggregator.url + "/metrics").text)
        yield names
    finally:
        server.stop()


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_rules_and_dashboard_name_only_exported_metrics(source: str, exported: set[str]) -> None:
    exprs = rule_exprs() if source == "rules" else dashboard_exprs()
    used = set().union(*map(metric_names, exprs))
    assert {"ldp_redis_used_memory_bytes", "ldp_redis_maxmemory_bytes"} <= used
    assert used - exported == set(), sorted(exported)
    for expr in exprs:  # each reads a service metric, except the scrape's own `up`
        assert metric_names(expr) or expr.startswith("up{"), expr


def test_dashboard_has_the_grafana_model_fields() -> None:
    model = json.loads(DASHBOARD.read_text())
    assert isinstance(model["title"], str) and model["title"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", model["uid"])
    assert isinstance(model["schemaVersion"], int) and model["schemaVersion"] >= 36
    assert model["templating"]["list"][0]["type"] == "datasource"
    panels = model["panels"]
    assert panels and len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["type"] in {"timeseries", "gauge", "stat"} and panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(set(refs)) == len(refs)
        assert all(t["expr"].strip() for t in panel["targets"])
