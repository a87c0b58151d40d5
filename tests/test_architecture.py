"""The one-way imports of DESIGN.md, checked on the source (ast), module by module.

client_sdk -> ldp_core; collector -> ldp_core; aggregator -> ldp_core and
collector.store only; ldp_core -> nothing of ours (standard library, numpy
lazily inside functions); no part imports ldp_cli.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("ldp_core", "client_sdk", "collector", "aggregator", "ldp_cli")
ALLOWED = {
    "ldp_core": ("ldp_core",),
    "client_sdk": ("ldp_core", "client_sdk"),
    "collector": ("ldp_core", "collector"),
    "aggregator": ("ldp_core", "aggregator", "collector.store"),
    "ldp_cli": OURS,
}


def imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at top level?) for every import in a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top = set(map(id, tree.body))
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, id(node) in top))
    return found


@pytest.mark.parametrize("package", list(ALLOWED))
def test_imports_go_one_way(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        for module, _ in imports(path):
            if module.split(".")[0] not in OURS:
                continue
            allowed = ALLOWED[package]
            assert any(module == a or module.startswith(a + ".") for a in allowed), (
                f"{path.relative_to(ROOT)} imports {module}"
            )


def test_ldp_core_imports_numpy_only_lazily() -> None:
    for path in sorted((ROOT / "ldp_core").rglob("*.py")):
        for module, at_top in imports(path):
            if module.split(".")[0] in ("numpy", "scipy"):
                assert not at_top or "TYPE_CHECKING" in path.read_text(), (
                    f"{path.name} imports {module} at module level"
                )


def test_device_packages_import_without_server_dependencies(tmp_path: Path) -> None:
    """ldp_core and client_sdk import with numpy, redis, fastapi, pydantic blocked."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'numpy', 'redis', 'fastapi', 'pydantic',"
        " 'uvicorn', 'scipy', 'starlette', 'orjson'}:\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    code = (
        "import ldp_core, client_sdk, random\n"
        "from ldp_core import mechanism\n"
        "for name in ('grr', 'oue', 'olh', 'sue'):\n"
        "    m = mechanism(name, epsilon=1.0, domain_size=32)\n"
        "    m.decode(m.encode(m.randomize(3)))\n"
        "mechanism('one_bit_mean', epsilon=1.0, lo=0, hi=1).randomize(0.5)\n"
        "print('ok')\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
