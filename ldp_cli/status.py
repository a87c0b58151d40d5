"""``ldp status``: is an ``ldp up`` running on this data folder, and are its children up?

It reads DIR/status.json (written by ``ldp_cli.supervise``) only while the
folder's lock is held (``ldp_cli.lock``): a stack killed with SIGKILL leaves a
file but no lock, and is reported stopped.  Exit status 0 only when running.
"""

from __future__ import annotations

import argparse
import fcntl
import os
from pathlib import Path

from ldp_cli.keys import default_data_dir
from ldp_cli.lock import LOCK_FILE
from ldp_cli.supervise import read_status

__all__ = ["cmd_status", "held"]


def held(data_dir: Path) -> bool:
    """Whether some process holds the folder's lock now (a shared probe, released at once)."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def cmd_status(args: argparse.Namespace) -> int:
    data_dir = Path(args.data) if args.data else default_data_dir()
    status = read_status(data_dir) if held(data_dir) else None
    if status is None:
        print(f"stopped: no ldp up holds {data_dir}")
        return 1
    print(f"{status.get('state', '?')} (ldp up pid {status.get('pid', '?')})")
    children = status.get("children", {})
    for name, child in children.items() if isinstance(children, dict) else ():
        state = "up" if child.get("up") else "DOWN"
        print(f"  {name:<11}{state:<6}pid {child.get('pid')}  restarts {child.get('restarts')}")
    return 0 if status.get("state") == "running" else 1
