"""The proof-of-work vectors shared with the TypeScript SDK are the Python core's.

sdk-js/test/pow-vectors.json is regenerated (sdk-js/scripts/gen_pow_vectors.py,
which also checks RFC 7914's vectors against ``hashlib``) and must equal the
committed file; sdk-js/test/pow.test.ts checks it in Node (here, compiled on
its own, and in the node test runner of tests/sdk_js/test_sdk_js.py with every
other test), and sdk-js/test/e2e-register.ts registers installs with a real
collector through ``registerInstall`` with both scrypts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ldp_server.redis_server import RedisServer
from tests.support.servers import INGEST_KEY, REPO_ROOT, flushed_collector

SDK = REPO_ROOT / "sdk-js"


def test_pow_vectors_match_the_python_core() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    fresh = subprocess.run([sys.executable, str(SDK / "scripts" / "gen_pow_vectors.py")],
                           env=env, capture_output=True, text=True, check=True,
                           timeout=300).stdout
    committed = (SDK / "test" / "pow-vectors.json").read_text()
    assert fresh == committed, "stale sdk-js/test/pow-vectors.json: run " \
        "sdk-js/scripts/gen_pow_vectors.py"


def compile_pow_files(out: Path) -> Path:
    """Compile the proof-of-work sources and their tests with the SDK's compiler options
    into ``out`` (not dist/: the package build is the node test runner's fixture)."""
    tsc = SDK / "node_modules" / ".bin" / "tsc"
    if shutil.which("node") is None or not tsc.exists():
        pytest.skip("node or sdk-js/node_modules missing (npm ci in sdk-js)")
    config = {
        "extends": str(SDK / "tsconfig.json"),
        "compilerOptions": {"outDir": str(out / "out"), "rootDir": str(SDK),
                            "declaration": False,
                            "typeRoots": [str(SDK / "node_modules" / "@types")]},
        "include": [],
        "files": [str(SDK / "test" / name)
                  for name in ("pow.test.ts", "e2e-register.ts", "e2e-gate.ts")],
    }
    (out / "tsconfig.json").write_text(json.dumps(config))
    (out / "package.json").write_text('{"type": "module"}')
    done = subprocess.run([str(tsc), "-p", str(out / "tsconfig.json")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (out / "test").mkdir(exist_ok=True)
    shutil.copy(SDK / "test" / "pow-vectors.json", out / "test" / "pow-vectors.json")
    return out / "out" / "test"


def node_test(script: Path, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run(["node", "--test", str(script)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})
    summary = [line for line in done.stdout.splitlines() if line.startswith("# ")]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "# fail 0" in summary, summary
    return summary


def test_typescript_checks_the_shared_vectors(tmp_path: Path) -> None:
    summary = node_test(compile_pow_files(tmp_path) / "pow.test.js")
    assert "# pass 8" in summary, summary


def test_typescript_registers_an_install_with_a_real_collector(
        redis_server: RedisServer, tmp_path: Path) -> None:
    tests = compile_pow_files(tmp_path)
    cheap = {"LDP_INSTALL_POW_N": "16", "LDP_INSTALL_POW_R": "1", "LDP_INSTALL_POW_BITS": "6"}
    with flushed_collector(redis_server, log_dir=tmp_path / "collector",
                           extra_env=cheap) as collector:
        summary = node_test(tests / "e2e-register.js",
                            {"LDP_E2E_URL": collector.url, "LDP_E2E_KEY": INGEST_KEY})
    assert "# pass 3" in summary, summary


def test_the_typescript_client_registers_when_the_issuer_asks(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """Fails without the hooks in sdk-js/src/stock.ts and client.ts: the issuer's 403 was
    a refused key there (counted in configErrors, retried for ever: flush false)."""
    import httpx

    from tests.support.servers import ADMIN_KEY, auth

    tests = compile_pow_files(tmp_path)
    gated = {"LDP_INSTALL_POW_N": "16", "LDP_INSTALL_POW_R": "1", "LDP_INSTALL_POW_BITS": "6",
             "LDP_INSTALL_REGISTRATION_REQUIRED": "true"}
    with flushed_collector(redis_server, log_dir=tmp_path / "collector",
                           extra_env=gated) as collector:
        r = httpx.post(f"{collector.url}/v1/metrics", headers=auth(ADMIN_KEY), json={
            "name": "js.gate", "kind": "categorical", "domain": ["a", "b"], "epsilon": 1.0,
            "mechanism": "grr"})
        assert r.status_code == 201, r.text
        summary = node_test(tests / "e2e-gate.js",
                            {"LDP_E2E_URL": collector.url, "LDP_E2E_KEY": INGEST_KEY})
    assert "# pass 1" in summary, summary
