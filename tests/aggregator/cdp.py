"""Drive headless Chromium over the DevTools protocol on a pipe (standard library only).

``--remote-debugging-pipe``: Chromium reads commands on fd 3 and writes
answers and events on fd 4, each a JSON message ended by a NUL byte.  Used by
the dashboard browser test to hold a session cookie (set through
``Network.setCookie``, since the key never travels in a URL), load pages at a
given width, dump the DOM and take full-page screenshots.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["Browser"]


class Browser:
    """One headless Chromium with one page target, driven over a pipe."""

    def __init__(self, executable: str, profile: Path, timeout: float = 30.0) -> None:
        self.timeout = timeout
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:  # in the child: its fd 3 reads commands, fd 4 writes answers
            # Through fresh copies: dup2(fd, fd) would keep close-on-exec when a pipe
            # end already is fd 3 or 4.
            reader, writer = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(reader, 3)
            os.dup2(writer, 4)

        self.process = subprocess.Popen(
            [
                executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-dev-shm-usage", "--hide-scrollbars",
                f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # close_fds would run after preexec_fn and close fds 3 and 4 again; Python's
            # own descriptors are close-on-exec anyway (PEP 446).
            preexec_fn=wire,  # only dup and dup2 run between fork and exec
            close_fds=False,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                 flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Network.enable", session=True)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer (events in between are dropped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result

    def open(self, url: str, width: int, height: int = 900) -> None:
        """Load ``url`` in a viewport ``width`` CSS pixels wide; wait for the load event."""
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width,
                  height=height, deviceScaleFactor=1, mobile=False)
        self._next_id += 1
        ident = self._next_id
        command = {"id": ident, "method": "Page.navigate", "params": {"url": url},
                   "sessionId": self.session}
        os.write(self._to_chrome, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._read(deadline)
            if message.get("id") == ident and "error" in message:
                raise RuntimeError(f"navigate: {message['error']}")
            if message.get("method") == "Page.loadEventFired":
                return

    def set_cookie(self, name: str, value: str, url: str) -> None:
        self.call("Network.setCookie", session=True, name=name, value=value, url=url,
                  httpOnly=True, sameSite="Strict")

    def evaluate(self, expression: str) -> Any:
        """The value of a DevTools expression (the page's CSP does not apply to DevTools)."""
        out = self.call("Runtime.evaluate", session=True, expression=expression,
                        returnByValue=True)
        return out["result"].get("value")

    def dom(self) -> str:
        text: str = self.evaluate("document.documentElement.outerHTML")
        return text

    def screenshot(self, path: Path) -> None:
        """A PNG of the whole page (beyond the viewport) at the current width."""
        shot = self.call("Page.captureScreenshot", session=True, format="png",
                         captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        os.close(self._to_chrome)
        os.close(self._from_chrome)
