"""Packaging: the sdist and the wheel build, and the device install works on its own.

``python -m build`` (no isolation: the dev extra brings setuptools and build) makes
the sdist, then the wheel from the sdist (so the sdist is complete).  The wheel is
installed into a clean venv with its real dependencies -- none: ``--no-index``
would fail on any -- and, with no extra installed, the device SDK records into
its spool from a bundled catalog, and ``ldp up`` prints the one-line hint for the
server extra (exit 2, no traceback) instead of "No module named uvicorn".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.support.servers import REPO_ROOT

PACKAGES = ("ldp_core", "client_sdk", "ldp_server", "collector", "aggregator", "ldp_cli")
#: Files the wheel must carry besides modules (see [tool.setuptools.package-data]).
DATA = {".py", ".typed", ".lua", ".html", ".js", ".css"}


def source_files() -> set[str]:
    return {
        p.relative_to(REPO_ROOT).as_posix()
        for pkg in PACKAGES for p in (REPO_ROOT / pkg).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in DATA
    }


def clean_env() -> dict[str, str]:
    """The environment without this checkout on the path (the venv must stand alone)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")           # never build in the checkout itself
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(REPO_ROOT / pkg, src / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                           str(out), str(src)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_sdist_and_wheel_carry_every_package_file(dist: Path) -> None:
    (wheel,) = dist.glob("ldp_telemetry-*.whl")
    (sdist,) = dist.glob("ldp_telemetry-*.tar.gz")
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {n for n in zf.namelist() if not n.split("/")[0].endswith(".dist-info")}
        metadata = next(zf.read(n).decode() for n in zf.namelist()
                        if n.endswith(".dist-info/METADATA"))
    with tarfile.open(sdist) as tf:
        in_sdist = {n.split("/", 1)[1] for n in tf.getnames()
                    if "/" in n and n.split("/")[1] in PACKAGES and tf.getmember(n).isfile()}
    expected = source_files()
    assert expected <= in_wheel and expected <= in_sdist
    assert "client_sdk/py.typed" in in_wheel
    assert not any(line.startswith("Requires-Dist:") and "extra ==" not in line
                   for line in metadata.splitlines())    # the device install pulls nothing


def test_device_install_without_extras_records_and_ldp_says_how_to_get_the_server(
        dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("ldp_telemetry-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120, env=clean_env())
    python = venv / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
         "--no-cache-dir", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=300, env=clean_env(), check=False)
    assert install.returncode == 0, install.stderr[-3000:]

    script = textwrap.dedent("""
        import importlib.metadata, importlib.util, json, sqlite3, sys, tempfile
        import client_sdk, ldp_core
        from client_sdk import Client
        for package in (client_sdk, ldp_core):
            assert package.__file__.startswith(sys.prefix), package.__file__
        # The wheel alone: no other distribution came with it.
        names = sorted(d.metadata["Name"] for d in importlib.metadata.distributions())
        assert names == ["ldp-telemetry"], names
        state = tempfile.mkdtemp()
        bundle = state + "/metrics.json"
        with open(bundle, "w") as f:
            json.dump({"metrics": [{"name": "flag", "kind": "boolean", "epsilon": 1.0}]}, f)
        c = Client("https://collector.example", api_key="k", state_dir=state + "/s",
                   metrics=bundle, background=False)
        status = c.record("flag", True).status
        c.close(0)
        rows = sqlite3.connect(state + "/s/spool.sqlite3").execute(
            "SELECT metric FROM spool").fetchall()
        print(json.dumps({"version": client_sdk.__version__, "status": status,
                          "rows": rows, "numpy": importlib.util.find_spec("numpy") is None,
                          "fastapi": importlib.util.find_spec("fastapi") is None}))
    """)
    run = subprocess.run([str(python), "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=clean_env(), check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert run.stdout.strip() == (f'{{"version": "{version}", "status": "queued",'
                                  ' "rows": [["flag"]], "numpy": true, "fastapi": true}')

    ldp = venv / "bin" / "ldp"
    helped = subprocess.run([str(ldp), "--help"], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path, env=clean_env(), check=False)
    assert helped.returncode == 0 and "up" in helped.stdout, helped.stderr
    for command in (["up", "--data", str(tmp_path / "data")], ["demo"]):
        up = subprocess.run([str(ldp), *command], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path, env=clean_env(), check=False)
        assert up.returncode == 2, (up.stdout, up.stderr)
        assert up.stdout == ""
        assert up.stderr.splitlines() == [
            f"ldp {command[0]}: needs the server extra (fastapi is not installed):"
            " pip install '.[server]' in a checkout of ldp-telemetry (it is not on PyPI yet)"]
    assert not (tmp_path / "data").exists()               # nothing was started
