"""docs/operating.md's "Operating" section is exactly what ``python -m ldp_cli.docs`` generates.

The section sits between ``<!-- operating:start -->`` and ``<!-- operating:end -->``.
A document without the markers fails (the section was removed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ldp_cli.docs import END, START, operating_section
from tests.support.servers import REPO_ROOT

NOTE = REPO_ROOT / "notes" / "opsdeploy-readme.md"


def section(path: Path) -> str | None:
    text = path.read_text()
    if START not in text or END not in text:
        return None
    return text[text.index(START) : text.index(END) + len(END)] + "\n"


def test_readme_operating_section_is_generated() -> None:
    found = section(REPO_ROOT / "docs" / "operating.md")
    if found is None:
        pytest.fail(f"docs/operating.md lost its {START} ... {END} section")
    assert found == operating_section(), "regenerate: python -m ldp_cli.docs"
