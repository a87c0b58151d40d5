"""Child processes we own: stop them by their pid, and wait for them to answer.

Used by the embedded Redis (``ldp_server.redis_server``), ``ldp up``, the test
fixtures and the benchmarks, so every process we start is stopped the same way.

>>> import subprocess, sys
>>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
>>> stop(child, timeout=5.0)
>>> child.poll() is not None
True
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = [
    "answers_ok",
    "die_with_parent",
    "kill",
    "pid_alive",
    "stop",
    "uvicorn_workers",
    "wait_http_ok",
]


def stop(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM (a graceful shutdown), then SIGKILL if it lingers past ``timeout``."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            kill(process)


def kill(process: subprocess.Popen[Any]) -> None:
    """SIGKILL and reap: a crash, for fault tests, or the last resort of ``stop``."""
    if process.poll() is None:
        process.kill()
    process.wait()


def answers_ok(url: str, timeout: float = 1.0) -> bool:
    """Whether a GET of ``url`` (loopback) answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_http_ok(url: str, process: subprocess.Popen[Any], timeout: float) -> bool:
    """Poll ``url`` until it answers 200 (True), the process exits or time runs out (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if answers_ok(url):
            return True
        time.sleep(0.05)
    return False


def die_with_parent() -> None:
    """In a child (Linux, as ``preexec_fn``): SIGTERM when our process dies, even by SIGKILL.

    So a killed ``ldp up`` never leaves orphan services behind.  A no-op where
    prctl is unavailable.  Only for a parent with no other thread yet.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a zombie not yet reaped counts as alive).

    >>> import os
    >>> pid_alive(os.getpid())
    True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def uvicorn_workers() -> int:
    """How many workers the uvicorn that started this process runs (1 when this process
    is not one of uvicorn's workers).

    uvicorn (``--workers N``, ``WEB_CONCURRENCY``, ``uvicorn.run(workers=N)``) starts
    each worker with multiprocessing's spawn and hands it its ``Config``: the keyword
    arguments of this process's ``multiprocessing`` process object (a private
    attribute: where another uvicorn lacks it, the answer is 1, and nothing warns).

    >>> uvicorn_workers()  # pytest is nobody's worker
    1
    """
    import multiprocessing

    if multiprocessing.parent_process() is None:
        return 1
    kwargs = getattr(multiprocessing.current_process(), "_kwargs", None)
    config = kwargs.get("config") if isinstance(kwargs, dict) else None
    workers = getattr(config, "workers", 1)
    return workers if isinstance(workers, int) and workers > 1 else 1
