"""Fixtures of the @ldp-telemetry/sdk tests: the built package and a page server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

SDK = Path(__file__).resolve().parents[2] / "sdk-js"
#: How docs/sdk-js.md builds the package, from the repository root.
BUILD = "cd sdk-js && npm ci && npm run build"


@pytest.fixture(scope="session")
def built() -> Path:
    """``npm ci`` + ``npm run build`` in sdk-js/ (once a session): its dist/ folder."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed (scripts/install-system-deps.sh)")
    # docs/sdk-js.md's command, verbatim (tests/system/test_doc_commands.py checks that it
    # is here); npm's own config from the environment skips the audit and funding calls.
    env = {**os.environ, "npm_config_audit": "false", "npm_config_fund": "false"}
    done = subprocess.run(["bash", "-c", BUILD], cwd=SDK.parent, env=env, capture_output=True,
                          text=True, timeout=900, check=False)
    assert done.returncode == 0, f"{BUILD}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    print(done.stdout[-600:])
    return SDK / "dist"


class _PageHandler(SimpleHTTPRequestHandler):
    """Serves sdk-js/dist and the page; POST /done receives the page's result."""

    result: list[dict[str, Any]]
    arrived: threading.Event

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.result.append(json.loads(body))
        self.send_response(204)
        self.end_headers()
        self.arrived.set()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def page_server(built: Path) -> Iterator[tuple[str, list[dict[str, Any]], threading.Event]]:
    (built / "page.html").write_text(
        '<!doctype html><meta charset="utf-8"><title>ldp sdk e2e</title>'
        '<script type="module" src="/e2e-page.js"></script>')
    result: list[dict[str, Any]] = []
    arrived = threading.Event()
    handler = type("H", (_PageHandler,), {"result": result, "arrived": arrived})
    server = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(built)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", result, arrived
    finally:
        server.shutdown()
        server.server_close()


