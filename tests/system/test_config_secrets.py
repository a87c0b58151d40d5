"""No key, or any part of one, in any output: configuration errors, logs, problem bodies.

Every bad configuration of both services is started as a real process (the
uvicorn factory and the production entry point ``ldp serve``): each must exit
non-zero with one line that names the variable, and nothing it printed may
hold any 8-character substring of any key or secret it was given.  Then both
services run with good keys and are sent wrong keys, wrong roles and key-like
garbage: no response body and no log line holds key material.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ldp_server.redis_server import RedisServer, free_port
from ldp_server.service import uvicorn_argv
from tests.support.servers import REPO_ROOT, start_uvicorn

ADMIN = "adm1n-Key-0123456789abcdefghijkl"
INGEST = "1ngest-Key-0123456789abcdefghijk"
ANALYST = "anaLyst-Key-0123456789abcdefghij"
SECRET = "9f" * 24
SHORT = "shrtKey-12"
PASSWORD = "redisPassw0rd-xyz12345"

PROD_OK = {
    "LDP_ENV": "prod", "LDP_REDIS_URL": "redis://127.0.0.1:1/0", "LDP_ADMIN_KEYS": ADMIN,
    "LDP_INGEST_KEYS": INGEST, "LDP_ANALYST_KEYS": ANALYST, "LDP_SERVER_SECRET": SECRET,
}

#: (service, environment, variables the one line must name)
CASES: list[tuple[str, dict[str, str], tuple[str, ...]]] = [
    ("collector", {"LDP_REDIS_URL": f"http://:{PASSWORD}@127.0.0.1/0"}, ("LDP_REDIS_URL",)),
    ("collector", {"LDP_REDIS_URL": f"redis://:{PASSWORD}@h:port/0"}, ("LDP_REDIS_URL",)),
    ("collector", {"LDP_REDIS_URL": f"redis://:{PASSWORD}@h/db{ADMIN}"}, ("LDP_REDIS_URL",)),
    ("collector", {"LDP_REDIS_CLUSTER_NODES": f"{ADMIN}"}, ("LDP_REDIS_CLUSTER_NODES",)),
    ("collector", {"LDP_REDIS_URL": "redis://h/0", "LDP_REDIS_CLUSTER_NODES": "h:1"},
     ("LDP_REDIS_URL", "LDP_REDIS_CLUSTER_NODES")),
    ("collector", {"LDP_ADMIN_KEYS": ADMIN, "LDP_INGEST_KEYS": f"{INGEST},{ADMIN}"},
     ("LDP_ADMIN_KEYS", "LDP_INGEST_KEYS")),
    ("collector", {"LDP_ANALYST_KEYS": INGEST, "LDP_INGEST_KEYS": INGEST},
     ("LDP_INGEST_KEYS", "LDP_ANALYST_KEYS")),
    ("collector", {"LDP_INGEST_KEYS": f"{INGEST}, {ADMIN} x"}, ("LDP_INGEST_KEYS",)),
    ("collector", {"LDP_ADMIN_KEYS": f"{ADMIN}\u00e9"}, ("LDP_ADMIN_KEYS",)),
    ("collector", {**PROD_OK, "LDP_ADMIN_KEYS": SHORT}, ("LDP_ADMIN_KEYS",)),
    ("collector", {**PROD_OK, "LDP_INGEST_KEYS": f"{INGEST},{SHORT}"}, ("LDP_INGEST_KEYS",)),
    ("collector", {k: v for k, v in PROD_OK.items() if k != "LDP_SERVER_SECRET"},
     ("LDP_SERVER_SECRET",)),
    ("collector", {"LDP_ENV": "prod", "LDP_REDIS_URL": "redis://h/0"},
     ("LDP_ADMIN_KEYS", "LDP_INGEST_KEYS", "LDP_SERVER_SECRET")),
    ("collector", {**PROD_OK, "LDP_REDIS_URL": ""}, ("LDP_REDIS_URL",)),
    ("collector", {**PROD_OK, "LDP_CORS_ORIGINS": "*"}, ("LDP_CORS_ORIGINS",)),
    ("collector", {"LDP_SERVER_SECRET": ADMIN}, ("LDP_SERVER_SECRET",)),
    ("collector", {"LDP_SERVER_SECRET": SECRET[:16]}, ("LDP_SERVER_SECRET",)),
    ("collector", {"LDP_SHARDS": ADMIN}, ("LDP_SHARDS",)),
    ("collector", {"LDP_RATE_LIMIT_BURST": "0"}, ("LDP_RATE_LIMIT_BURST",)),
    ("collector", {"LDP_ENV": ADMIN}, ("LDP_ENV",)),
    ("aggregator", {"LDP_REDIS_URL": f"unix:{PASSWORD}"}, ("LDP_REDIS_URL",)),
    ("aggregator", {"LDP_REDIS_URL": f"rediss://:{ANALYST}@/0"}, ("LDP_REDIS_URL",)),
    ("aggregator", {"LDP_REDIS_CLUSTER_NODES": f"h:{ANALYST}"}, ("LDP_REDIS_CLUSTER_NODES",)),
    ("aggregator", {"LDP_ANALYST_KEYS": ADMIN, "LDP_ADMIN_KEYS": ADMIN},
     ("LDP_ADMIN_KEYS", "LDP_ANALYST_KEYS")),
    ("aggregator", {"LDP_ANALYST_KEYS": f"{ANALYST};{ADMIN}"}, ("LDP_ANALYST_KEYS",)),
    ("aggregator", {**PROD_OK, "LDP_ANALYST_KEYS": SHORT}, ("LDP_ANALYST_KEYS",)),
    ("aggregator", {**PROD_OK, "LDP_ANALYST_KEYS": ""}, ("LDP_ANALYST_KEYS",)),
    ("aggregator", {**PROD_OK, "LDP_REDIS_URL": ""}, ("LDP_REDIS_URL",)),
    ("aggregator", {"LDP_MAX_EPOCHS": ANALYST}, ("LDP_MAX_EPOCHS",)),
    ("aggregator", {"LDP_REDIS_TIMEOUT_SECONDS": "-1"}, ("LDP_REDIS_TIMEOUT_SECONDS",)),
]

MATERIAL = (ADMIN, INGEST, ANALYST, SECRET, SHORT, PASSWORD)


def leaks(text: str, material: Iterable[str] = MATERIAL) -> list[str]:
    """Every 8-character substring of every secret that appears in ``text``."""
    return [
        key[i : i + 8] for key in material for i in range(len(key) - 7) if key[i : i + 8] in text
    ]


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LDP_", "PROMETHEUS"))}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def launch(service: str, env: dict[str, str], how: str) -> subprocess.CompletedProcess[str]:
    port = free_port()
    argv = (
        uvicorn_argv(f"{service}.app:create_app", "127.0.0.1", port)
        if how == "uvicorn"
        else [sys.executable, "-m", "ldp_cli.main", "serve", service, "--port", str(port)]
    )
    try:
        return subprocess.run(argv, env={**base_env(), **env}, cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired as exc:  # it started: a failure, reported with the others
        out = (exc.stdout or b"") + (exc.stderr or b"")
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        return subprocess.CompletedProcess(argv, 0, "still running after 30 s: " + text, "")


@pytest.mark.parametrize("how", ["uvicorn", "serve"])
def test_every_bad_configuration_refuses_in_one_line_without_key_material(how: str) -> None:
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda case: launch(case[0], case[1], how), CASES))
    failures = []
    for (service, env, names), out in zip(CASES, done, strict=True):
        text = out.stdout + out.stderr
        lines = text.strip().splitlines()
        ok = (
            out.returncode != 0
            and len(lines) == 1
            and lines[0].startswith(f"{service}: ")
            and all(name in lines[0] for name in names)
            and not leaks(text)
        )
        if not ok:
            failures.append(f"{service} {sorted(env)} -> {out.returncode}: {text[:600]!r}")
    assert not failures, "\n".join(failures)


def test_wrong_keys_leave_no_key_material_in_bodies_or_logs(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis_server.url, "LDP_ADMIN_KEYS": ADMIN,
           "LDP_INGEST_KEYS": INGEST, "LDP_ANALYST_KEYS": ANALYST, "LDP_SERVER_SECRET": SECRET}
    near = [ADMIN[:-1] + "X", INGEST + "0", "Bearer " + ANALYST[1:], ANALYST.upper(), ADMIN * 2]
    bodies: list[str] = []
    with start_uvicorn("collector.app:create_app", env, log_dir=tmp_path / "c") as collector, \
            start_uvicorn("aggregator.app:create_app", env, log_dir=tmp_path / "a") as aggregator:
        calls = [
            (collector.url, "GET", "/v1/metrics"), (collector.url, "POST", "/v1/metrics"),
            (collector.url, "POST", "/v1/reports"), (aggregator.url, "GET", "/v1/metrics"),
            (aggregator.url, "GET", "/v1/estimates/x"), (aggregator.url, "GET", "/"),
        ]
        with httpx.Client(timeout=10) as client:
            for base, method, path in calls:
                presented = [*near, ADMIN, INGEST, ANALYST]
                for key in presented:
                    r = client.request(method, base + path,
                                       headers={"Authorization": f"Bearer {key}"},
                                       content=f'{{"key": "{key}"'.encode())
                    bodies.append(r.text + str(r.headers))
                r = client.get(base + path + "?key=" + ANALYST)
                bodies.append(r.text + str(r.headers))
        logs = collector.log() + aggregator.log()
    assert not leaks("\n".join(bodies), (ADMIN, INGEST, ANALYST, SECRET))
    assert not leaks(logs)
