"""The ldp-telemetry version, the one every part reports.

The SDK's ``__version__``, ``ldp --version`` and both services' ``/healthz`` and
OpenAPI ``info.version`` read it from here, so they never disagree:

>>> from ldp_core.version import package_version
>>> package_version().count(".") >= 2
True
"""

from __future__ import annotations

import re
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["package_version"]

_DISTRIBUTION = "ldp-telemetry"


@cache
def package_version() -> str:
    """The installed distribution's version, else the source tree's ``pyproject.toml``."""
    try:
        return version(_DISTRIBUTION)
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        text = pyproject.read_text() if pyproject.is_file() else ""
        found = re.search(r'^version = "([^"]+)"', text, re.M)
        return found.group(1) + "+source" if found else "0.0.0+unknown"
