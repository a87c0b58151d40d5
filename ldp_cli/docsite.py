"""``ldp docs``: build the documentation site (MkDocs, ``mkdocs.yml``) and serve it on loopback.

    ldp docs                        # build into a temporary folder, serve http://127.0.0.1:8008/
    ldp docs --port 0               # any free port (the URL printed says which)
    ldp docs --build-only site      # write the site into ./site and exit

The build is ``mkdocs build --strict``: a broken link or anchor stops it.  The
site needs no network (no web fonts, no CDN); it is served by the standard
library's ``http.server`` on 127.0.0.1 only, so search (a Web Worker) works.
MkDocs comes with the ``dev`` extra; the pages come from a checkout's ``docs/``.

>>> config_file().name
'mkdocs.yml'
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import subprocess
import sys
import tempfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_PORT", "add_arguments", "build", "cmd_docs", "config_file", "server"]

DEFAULT_PORT = 8008


def config_file() -> Path:
    """The checkout's ``mkdocs.yml`` (next to the ``ldp_cli`` package)."""
    return Path(__file__).resolve().parent.parent / "mkdocs.yml"


def build(out: Path) -> Path:
    """Build the site into ``out`` with ``mkdocs build --strict``; return ``out``.

    Raises ``ValueError`` naming what is missing (MkDocs, or a checkout) or the
    build's own error output.
    """
    config = config_file()
    if not config.is_file():
        raise ValueError(f"no {config}: the documentation is built from a checkout")
    if importlib.util.find_spec("mkdocs") is None:
        raise ValueError("MkDocs is not installed: pip install -e '.[dev]'")
    out = out.resolve()
    # Never --quiet: mkdocs counts a warning for --strict only at a level it prints.
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--config-file", str(config), "--site-dir", str(out)],
        capture_output=True, text=True, env=_quiet_env(), check=False,
    )
    if done.returncode != 0:
        raise ValueError(f"mkdocs build failed (exit {done.returncode}):\n{done.stderr.strip()}")
    return out


def _quiet_env() -> dict[str, str]:
    import os

    return {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def server(directory: Path, port: int) -> ThreadingHTTPServer:
    """An HTTP server of ``directory`` on 127.0.0.1:``port`` (0: a free one), not yet serving."""
    handler = functools.partial(_Quiet, directory=str(directory))
    return ThreadingHTTPServer(("127.0.0.1", port), handler)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port on 127.0.0.1 (0: a free one; default {DEFAULT_PORT})")
    p.add_argument("--build-only", metavar="DIR",
                   help="write the site into DIR and exit, serving nothing")


def cmd_docs(args: argparse.Namespace) -> int:
    if args.build_only:
        out = build(Path(args.build_only))
        print(f"ldp docs: site written to {out}")
        return 0
    with tempfile.TemporaryDirectory(prefix="ldp-docs-") as tmp:
        site = build(Path(tmp))
        httpd = server(site, args.port)
        with httpd:
            print(f"ldp docs: serving http://127.0.0.1:{httpd.server_address[1]}/"
                  " (Ctrl-C stops)", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                httpd.serve_forever()
    return 0
