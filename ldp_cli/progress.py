"""A plain-text progress bar on stderr (redrawn in place on a terminal).

On a terminal the bar is redrawn with a carriage return; elsewhere (a log, a
test) one line is written per 10% so the output stays short.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``update(done)`` as often as you like; ``finish()`` ends the line."""

    def __init__(
        self, label: str, total: int, stream: TextIO | None = None, width: int = 30
    ) -> None:
        self.label = label
        self.total = max(total, 1)
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self._last_decile = -1
        self._last_draw = 0.0
        self._done = 0

    def _line(self, done: int, note: str) -> str:
        frac = min(done / self.total, 1.0)
        filled = int(frac * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.monotonic() - self.start
        return (
            f"{self.label} [{bar}] {done:,}/{self.total:,} {frac:4.0%} "
            f"{elapsed:5.1f}s{(' ' + note) if note else ''}"
        )

    def update(self, done: int, note: str = "") -> None:
        self._done = done
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw >= 0.1 or done >= self.total:
                self.stream.write("\r" + self._line(done, note) + "\x1b[K")
                self.stream.flush()
                self._last_draw = now
            return
        decile = min(int(10 * done / self.total), 10)
        if decile > self._last_decile:
            self._last_decile = decile
            self.stream.write(self._line(done, note) + "\n")
            self.stream.flush()

    def finish(self, note: str = "") -> None:
        if self.tty:
            self.stream.write("\r" + self._line(self._done, note) + "\x1b[K\n")
        elif note:
            self.stream.write(self._line(self._done, note) + "\n")
        self.stream.flush()
