"""One data folder, one owner: the lock ``ldp up`` holds on DIR/up.lock while it runs.

An exclusive ``fcntl.flock`` on DIR/up.lock, taken before anything starts and
held for the life of the stack (the kernel drops it when the process dies, even
by SIGKILL, so a stale file never locks anyone out).  The file says who holds
it: the pid and, once the services answer, their URLs.  A second ``ldp up`` on
the same folder gets ``FolderBusy`` naming them, starts nothing and deletes
nothing.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> first = DataLock.acquire(folder)
>>> first.publish({"collector": "http://127.0.0.1:8000"})
>>> try:
...     DataLock.acquire(folder)
... except FolderBusy as exc:
...     print(str(exc).replace(str(folder), "DIR").replace(str(os.getpid()), "PID"))
DIR is in use by ldp up (pid PID; collector http://127.0.0.1:8000): stop that one first
>>> first.release()
>>> DataLock.acquire(folder).release()
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LOCK_FILE", "DataLock", "FolderBusy"]

LOCK_FILE = "up.lock"


class FolderBusy(RuntimeError):
    """Another live process holds the data folder; the message names it."""


@dataclass
class DataLock:
    """The held lock: an open descriptor of DIR/up.lock with ``flock(LOCK_EX)`` on it."""

    path: Path
    fd: int

    @classmethod
    def acquire(cls, data_dir: Path) -> DataLock:
        """Take the folder (made 0700 if missing) or raise FolderBusy without touching it."""
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = data_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(fd)
            os.close(fd)
            raise FolderBusy(
                f"{data_dir} is in use by ldp up ({holder}): stop that one first"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        lock = cls(path, fd)
        lock.publish({})
        return lock

    def publish(self, urls: dict[str, str]) -> None:
        """Write our pid and the services' URLs into the lock file (for a second ``up``)."""
        body = json.dumps({"pid": os.getpid(), **urls}).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, body, 0)

    def release(self) -> None:
        """Unlock and close; the file stays (an unlocked file means nobody holds it)."""
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def _describe(fd: int) -> str:
    """'pid N; collector URL; aggregator URL' from the holder's lock file."""
    try:
        raw = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        raw = {}
    if not isinstance(raw, dict):
        raw = {}
    parts = [f"pid {raw.get('pid', '?')}"]
    parts += [f"{k} {v}" for k, v in raw.items() if k != "pid"]
    return "; ".join(parts)
