"""The documentation site: ``mkdocs build --strict`` of docs/ passes, fails on a broken
link or anchor, loads nothing from the network, and ``ldp docs`` serves it on loopback.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from ldp_cli.docsite import build, config_file

ROOT = Path(__file__).resolve().parents[2]
LDP = Path(sys.executable).with_name("ldp")


def _mkdocs(config: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--config-file", str(config), "--site-dir", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1"},
    )


def test_site_builds_strict_with_every_page_and_no_network_load(tmp_path: Path) -> None:
    site = build(tmp_path / "site")
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    assert "index" in pages and "token-protocol" in pages
    for page in pages:
        assert (site / f"{page}.html").is_file(), f"docs/{page}.md has no page in the site"
    # Offline: no script, stylesheet, font or image comes from another host.
    loads = re.compile(r"""<(?:script|img|link|iframe)\b[^>]*?(?:src|href)=["'](https?:)?//""")
    for html in site.glob("*.html"):
        text = html.read_text()
        bad = [m.group(0) for m in loads.finditer(text)]
        assert not bad, f"{html.name} loads from the network: {bad[:3]}"
    for css in (site / "assets").rglob("*.css"):
        assert not re.search(r"@import\s+url\(\s*['\"]?https?:", css.read_text()), css.name
    assert (site / "search" / "search_index.json").is_file()


@pytest.mark.parametrize("link", ["[gone](no-such-page.md)",
                                  "[gone](performance.md#no-such-anchor)",
                                  "[gone](../README.md)"])
def test_a_broken_link_fails_the_build(tmp_path: Path, link: str) -> None:
    """The same tree builds; one broken link or anchor added to a copy makes it fail."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(config_file(), tmp_path / "mkdocs.yml")
    clean = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert clean.returncode == 0, clean.stderr
    page = tmp_path / "docs" / "analysts.md"
    page.write_text(page.read_text() + f"\nSee {link}.\n")
    broken = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert broken.returncode != 0
    assert "analysts.md" in broken.stderr, broken.stderr


def test_ldp_docs_serves_the_site_on_loopback() -> None:
    proc = subprocess.Popen([str(LDP), "docs", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, f"no URL printed: {line!r} {proc.stderr.read() if proc.poll() else ''}"
        url = match.group(0)
        with urllib.request.urlopen(url + "index.html", timeout=10) as r:  # noqa: S310
            assert r.status == 200 and b"local differential privacy" in r.read()
        with urllib.request.urlopen(url + "token-protocol.html", timeout=10) as r:  # noqa: S310
            assert b"The protocol, precisely" in r.read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
