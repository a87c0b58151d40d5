"""The one-way imports of DESIGN.md, checked on the source (ast) and by importing.

    ldp_core    -> nothing of ours (standard library; numpy only lazily, in functions)
    client_sdk  -> ldp_core
    ldp_server  -> nothing of ours (the server kit)
    collector   -> ldp_core, ldp_server
    aggregator  -> ldp_core, ldp_server, collector.store (the read side) only
    ldp_cli     -> everything; no part imports ldp_cli

Module lists come from the packages themselves (``pkgutil.walk_packages`` and
``rglob``), so modules that move or appear are checked without editing this file.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("ldp_core", "client_sdk", "ldp_server", "collector", "aggregator", "ldp_cli")
ALLOWED = {
    "ldp_core": ("ldp_core",),
    "client_sdk": ("ldp_core", "client_sdk"),
    "ldp_server": ("ldp_server",),
    "collector": ("ldp_core", "ldp_server", "collector"),
    "aggregator": ("ldp_core", "ldp_server", "aggregator", "collector.store"),
    "ldp_cli": OURS,
}
#: Third-party packages a device package may import only inside a function.
SERVER_ONLY = ("numpy", "scipy", "redis", "fastapi", "starlette", "uvicorn", "pydantic",
               "pydantic_settings", "orjson", "cryptography", "gmpy2")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path) -> list[tuple[str, bool]]:
    """(absolute module, runs at import time?) for every import in a file.

    An import runs at import time unless it is inside a function body or under
    ``if TYPE_CHECKING:``; relative imports are resolved against the file's package.
    """
    return imports_of(path.read_text(), _module_name(path), path.name == "__init__.py")


def imports_of(text: str, module: str, is_package: bool = False) -> list[tuple[str, bool]]:
    """``imports`` of the source ``text`` of ``module``."""
    tree = ast.parse(text)
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, eager: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, eager) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((module, eager))
        for child in ast.iter_child_nodes(node):
            lazy = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, eager and not lazy and not _is_type_checking(node))

    visit(tree, True)
    return found


@pytest.mark.parametrize("package", list(ALLOWED))
def test_imports_go_one_way(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no modules under {package}/"
    for path in files:
        for module, _ in imports(path):
            if module.split(".")[0] not in OURS:
                continue
            allowed = ALLOWED[package]
            assert any(module == a or module.startswith(a + ".") for a in allowed), (
                f"{path.relative_to(ROOT)} imports {module}"
            )


@pytest.mark.parametrize("package", ["collector", "aggregator", "ldp_cli"])
def test_services_and_cli_use_the_server_kit(package: str) -> None:
    used = {m for p in (ROOT / package).rglob("*.py") for m, _ in imports(p)}
    assert any(m == "ldp_server" or m.startswith("ldp_server.") for m in used), package


def test_the_checker_sees_lazy_and_relative_imports() -> None:
    """The checker itself: lazy and TYPE_CHECKING imports are seen as such."""
    text = (
        "from typing import TYPE_CHECKING\n"
        "import numpy\n"
        "if TYPE_CHECKING:\n    import redis\n"
        "def f():\n    import fastapi\n"
        "class C:\n    import uvicorn\n"
        "from .wire import COLUMNS\n"
        "from .. import client_sdk\n"
    )
    found = dict(imports_of(text, "ldp_core.mechanisms.probe"))
    assert found == {"typing": True, "numpy": True, "redis": False, "fastapi": False,
                     "uvicorn": True, "ldp_core.mechanisms.wire": True, "ldp_core": True}


def test_device_packages_import_numpy_and_servers_only_lazily() -> None:
    for package in ("ldp_core", "client_sdk"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for module, eager in imports(path):
                top = module.split(".")[0]
                assert not (eager and top in SERVER_ONLY), (
                    f"{path.relative_to(ROOT)} imports {module} when it is imported"
                )


_BLOCKER = """
import importlib, pkgutil, sys
BLOCKED = {blocked!r}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in BLOCKED:
            raise ImportError('blocked: ' + name)
        return None
sys.meta_path.insert(0, Block())
names = []
for package in ('ldp_core', 'client_sdk'):
    root = importlib.import_module(package)
    names.append(package)
    for info in pkgutil.walk_packages(root.__path__, package + '.'):
        importlib.import_module(info.name)
        names.append(info.name)
print('\\n'.join(names))
"""


def test_every_device_module_imports_without_server_dependencies() -> None:
    """Every module of ldp_core and client_sdk imports with the server world blocked.

    A meta-path finder refuses numpy, scipy, redis, fastapi, starlette, uvicorn,
    pydantic, orjson and our server packages, so only imports inside functions pass.
    """
    blocked = set(SERVER_ONLY) | {"ldp_server", "collector", "aggregator", "ldp_cli"}
    code = _BLOCKER.format(blocked=sorted(blocked))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    imported = set(out.stdout.split())
    on_disk = {_module_name(p) for pkg in ("ldp_core", "client_sdk")
               for p in (ROOT / pkg).rglob("*.py")}
    assert imported == on_disk, sorted(on_disk ^ imported)
    assert {"ldp_core.audit", "ldp_core.simulate", "ldp_core.wire"} <= imported


def test_device_mechanisms_run_without_server_dependencies(tmp_path: Path) -> None:
    """Randomising and decoding on a device needs none of the server dependencies."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {set(SERVER_ONLY)!r}:\n"
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
