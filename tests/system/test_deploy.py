"""Every deployment artefact run or checked by its own validator on this machine.

- deploy/systemd/*.service: ``systemd-analyze verify`` (no warning at all), and
  their ExecStart is a valid ``ldp serve`` command line;
- deploy/Caddyfile: ``caddy validate`` (TLS and ACME e-mail variants), and
  its adapted JSON proxies each host to its service and hides /metrics;
- compose.yaml: the Compose Specification's JSON schema
  (tests/support/compose-spec.json, from compose-spec/compose-spec, Apache-2.0)
  and its references (volumes, env file, mounted files, commands);
- Containerfile: built by deploy/build-image.sh (buildah, RUN steps in a chroot,
  a Debian base made from Debian packages), then the image's collector and
  aggregator are started from it and serve against a real Redis.

Each test skips only when its validator is not installed (Debian packages
systemd, caddy, buildah/podman) or, for the image, when no Debian base image
exists: ``scripts/install-system-deps.sh`` (run by ``.ci/run``) makes it with
``deploy/build-image.sh --base-only`` (debootstrap, about a minute), so it skips
only where apt or the Debian mirror cannot be reached.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ldp_cli.main import build_parser
from ldp_server import processes
from ldp_server.redis_server import RedisServer, free_port
from tests.support.reports import SPECS
from tests.support.servers import ADMIN_KEY, ANALYST_KEY, INGEST_KEY, REPO_ROOT, auth

DEPLOY = REPO_ROOT / "deploy"
BASE_IMAGE = "localhost/ldp-debian:bookworm"


def need(tool: str) -> str:
    found = shutil.which(tool)
    if not found:
        pytest.skip(f"{tool} is not installed (Debian package); nothing to validate with")
    return found


def test_systemd_units_verify(tmp_path: Path) -> None:
    need("systemd-analyze")
    units = sorted((DEPLOY / "systemd").glob("*.service"))
    assert [u.name for u in units] == ["ldp-aggregator.service", "ldp-collector.service"]
    stub = tmp_path / "ldp"  # verify checks that ExecStart is executable: a stand-in
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    for unit in units:
        text = unit.read_text()
        execstart = next(line for line in text.splitlines() if line.startswith("ExecStart="))
        argv = shlex.split(execstart.removeprefix("ExecStart="))
        assert argv[0] == "/opt/ldp-telemetry/bin/ldp"
        args = build_parser().parse_args(argv[1:])
        assert args.command == "serve" and unit.name == f"ldp-{args.service}.service"
        copy = tmp_path / unit.name
        copy.write_text(text.replace("/opt/ldp-telemetry/bin/ldp", str(stub)))
    done = subprocess.run(["systemd-analyze", "verify", *map(str, tmp_path.glob("*.service"))],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


@pytest.mark.parametrize("tls", ["internal", "ops@example.org"])
def test_caddyfile_validates_and_routes(tls: str, tmp_path: Path) -> None:
    caddy = need("caddy")
    env = {**os.environ, "LDP_TLS": tls, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)}
    config = str(DEPLOY / "Caddyfile")
    done = subprocess.run([caddy, "validate", "--config", config, "--adapter", "caddyfile"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "Valid configuration" in done.stdout + done.stderr, (
        done.stdout + done.stderr)
    adapted = subprocess.run([caddy, "adapt", "--config", config, "--adapter", "caddyfile"],
                             env=env, capture_output=True, text=True, timeout=60, check=True)
    text = adapted.stdout
    for upstream in ("collector:8000", "aggregator:8001"):
        assert f'"dial":"{upstream}"' in text.replace(" ", "")
    assert "collector.localhost" in text and "aggregator.localhost" in text
    routes = json.loads(text)["apps"]["http"]["servers"]
    assert routes and '"/metrics"' in text  # answered 404 at the proxy


def test_compose_file_matches_the_spec_and_its_references() -> None:
    import jsonschema_rs

    compose: dict[str, Any] = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())
    schema = json.loads((REPO_ROOT / "tests" / "support" / "compose-spec.json").read_text())
    errors = [str(e) for e in jsonschema_rs.validator_for(schema).iter_errors(compose)]
    assert not errors, errors
    services = compose["services"]
    assert set(services) == {"redis", "collector", "aggregator", "proxy"}
    redis_command = " ".join(services["redis"]["command"])
    assert "--appendonly yes" in redis_command and "--maxmemory-policy noeviction" in redis_command
    assert "redis-data:/data" in services["redis"]["volumes"]
    key_mount = "./deploy/token-key.pem:/etc/ldp-telemetry/token-key.pem:ro"
    assert key_mount in services["collector"]["volumes"]  # made by the operator (docs)
    assert (services["collector"]["environment"]["LDP_TOKEN_KEY_FILE"]
            == "/etc/ldp-telemetry/token-key.pem")
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if volume == key_mount:
                continue
            if source.startswith("./"):
                assert (REPO_ROOT / source).exists(), volume
            else:
                assert source in compose["volumes"], volume
        assert service["env_file"] == "deploy/ldp.env"
        if name != "proxy":
            assert "ports" not in service, f"{name} must not publish a port"
            assert service["networks"] == ["internal"]
            assert service["healthcheck"]["test"][0] == "CMD-SHELL"
        if name in ("collector", "aggregator"):
            args = build_parser().parse_args(["serve", *[
                part.replace("${LDP_COLLECTOR_WORKERS:-2}", "2")
                .replace("${LDP_AGGREGATOR_WORKERS:-2}", "2") for part in service["command"]
            ]])
            assert args.service == name and args.workers == 2
            assert service["depends_on"]["redis"]["condition"] == "service_healthy"
    assert compose["networks"]["internal"]["internal"] is True
    example = (DEPLOY / "ldp.env.example").read_text()
    for variable in ("LDP_REDIS_PASSWORD", "LDP_ADMIN_KEYS", "LDP_INGEST_KEYS",
                     "LDP_ANALYST_KEYS", "LDP_SERVER_SECRET", "LDP_METRICS_KEY", "LDP_TLS",
                     "LDP_TOKEN_KEY_FILE"):
        assert f"\n{variable}=" in example


def _base_image_present() -> bool:
    if not (shutil.which("buildah") and shutil.which("podman")):
        pytest.skip("buildah/podman are not installed (Debian packages)")
    done = subprocess.run(["podman", "image", "exists", BASE_IMAGE], timeout=60, check=False)
    return done.returncode == 0


@pytest.mark.slow
def test_image_builds_and_its_services_serve(redis_server: RedisServer, tmp_path: Path) -> None:
    if not _base_image_present():
        pytest.skip(f"no {BASE_IMAGE}: scripts/install-system-deps.sh could not build it "
                    "(deploy/build-image.sh --base-only needs root, podman and a Debian mirror)")
    tag = "localhost/ldp-telemetry:test"
    env = {**os.environ, "PYTHON": sys.executable, "LDP_BASE": BASE_IMAGE, "LDP_IMAGE": tag,
           "LDP_BUILDER": "buildah bud --isolation chroot"}
    built = subprocess.run([str(DEPLOY / "build-image.sh")], env=env, cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    with httpx.Client(timeout=10) as client:
        redis_env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis_server.url,
                     "LDP_ADMIN_KEYS": ADMIN_KEY, "LDP_INGEST_KEYS": INGEST_KEY,
                     "LDP_ANALYST_KEYS": ANALYST_KEY}
        with FromImage(tag, "collector", redis_env, tmp_path) as collector:
            r = client.post(collector + "/v1/metrics", json={**SPECS["browser"], "name": "img"},
                            headers=auth(ADMIN_KEY))
            assert r.status_code in (200, 201), r.text
            assert client.get(collector + "/readyz").json() == {"ready": True}
        with FromImage(tag, "aggregator", redis_env, tmp_path) as aggregator:
            listed = client.get(aggregator + "/v1/metrics", headers=auth(ANALYST_KEY)).json()
            assert "img" in [m["name"] for m in listed["metrics"]]


class FromImage:
    """``buildah run --isolation chroot`` of the image's entry point (host network)."""

    def __init__(self, tag: str, service: str, env: dict[str, str], tmp: Path) -> None:
        self.tag, self.service, self.env, self.tmp = tag, service, env, tmp

    def __enter__(self) -> str:
        self.container = subprocess.run(["buildah", "from", self.tag], capture_output=True,
                                        text=True, timeout=120, check=True).stdout.strip()
        port = free_port()
        flags = [f"--env={k}={v}" for k, v in self.env.items()]
        self.log = self.tmp / f"{self.service}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                ["buildah", "run", "--isolation", "chroot", *flags, self.container, "--",
                 "ldp", "serve", self.service, "--host", "127.0.0.1", "--port", str(port)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        url = f"http://127.0.0.1:{port}"
        if not processes.wait_http_ok(url + "/healthz", self.process, 60):
            self.__exit__()
            raise AssertionError(self.log.read_text())
        return url

    def __exit__(self, *exc: object) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        subprocess.run(["buildah", "rm", self.container], capture_output=True, timeout=60,
                       check=False)
