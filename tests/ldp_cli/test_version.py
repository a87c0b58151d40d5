"""``ldp --version`` prints the package version (a real process)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.servers import REPO_ROOT


def test_version_matches_pyproject() -> None:
    declared = re.search(r'^version = "([^"]+)"', (REPO_ROOT / "pyproject.toml").read_text(),
                         re.M)
    assert declared
    done = subprocess.run([sys.executable, "-m", "ldp_cli.main", "--version"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == f"ldp {declared.group(1)}"
