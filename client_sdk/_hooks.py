"""Process-wide hooks: one atexit and one at-fork registration for every pipeline.

At exit every live pipeline flushes within its ``atexit_timeout``; around a
fork every pipeline's locks are held so the child starts from a consistent
state (``Pipeline._after_fork_child`` then resets it).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client_sdk._pipeline import Pipeline

__all__ = ["LIVE"]

#: Every pipeline that is not closed (a pipeline adds itself, and leaves on close).
LIVE: weakref.WeakSet[Pipeline] = weakref.WeakSet()


def _close_all_at_exit() -> None:
    pipelines = list(LIVE)
    if not pipelines:
        return
    deadline = time.monotonic() + max(p.config.atexit_timeout for p in pipelines)
    for p in pipelines:
        with contextlib.suppress(Exception):
            p.close(max(0.0, deadline - time.monotonic()))


_FORKING: list[Pipeline] = []


def _before_fork() -> None:
    _FORKING[:] = [p for p in LIVE if not p._closed]
    for p in _FORKING:
        p._before_fork()


def _after_fork_parent() -> None:
    for p in _FORKING:
        p._after_fork_parent()
    _FORKING.clear()


def _after_fork_child() -> None:
    for p in _FORKING:
        p._after_fork_child()
    _FORKING.clear()


atexit.register(_close_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork_parent, after_in_child=_after_fork_child
    )
