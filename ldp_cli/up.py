"""``ldp up``: embedded Redis + collector + aggregator until Ctrl-C (SIGINT/SIGTERM).

The keys are made on the first run in the data folder (0600) and printed
once; later runs print where they are kept.  Data persists in DIR/redis.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TextIO

from ldp_cli.keys import (
    Keys,
    clear_endpoints,
    default_data_dir,
    load_or_create_keys,
    save_endpoints,
)
from ldp_cli.lock import DataLock
from ldp_cli.stack import Stack, StackError
from ldp_cli.supervise import StatusFile

__all__ = ["add_arguments", "banner", "cmd_up", "start_stack", "wait_for_signal"]


def add_arguments(p: argparse.ArgumentParser, *, default_ports: tuple[int, int]) -> None:
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    p.add_argument(
        "--collector-port",
        type=int,
        default=default_ports[0],
        help=f"collector port (0: a free one; default {default_ports[0]})",
    )
    p.add_argument(
        "--aggregator-port",
        type=int,
        default=default_ports[1],
        help=f"aggregator port (0: a free one; default {default_ports[1]})",
    )


def start_stack(args: argparse.Namespace, data_dir: Path) -> tuple[Stack, Keys, bool]:
    """The folder's lock, keys (made on first run) and the three services.

    Env LDP_REDIS_URL skips the embedded Redis.  A folder held by another
    ``ldp up`` raises ``FolderBusy`` (naming its pid and URLs) before anything
    starts or is written.
    """
    lock = DataLock.acquire(data_dir)
    try:
        keys, created = load_or_create_keys(data_dir)
        stack = Stack.start(
            data_dir,
            keys,
            host=args.host,
            collector_port=args.collector_port,
            aggregator_port=args.aggregator_port,
            redis_url=os.environ.get("LDP_REDIS_URL") or None,
            cluster_nodes=os.environ.get("LDP_REDIS_CLUSTER_NODES") or None,
        )
    except BaseException:
        lock.release()
        raise
    stack.lock = lock
    urls = {"collector": stack.collector_url, "aggregator": stack.aggregator_url}
    lock.publish(urls)
    save_endpoints(data_dir, urls)
    return stack, keys, created


def banner(stack: Stack, keys: Keys, created: bool, data_dir: Path, out: TextIO) -> None:
    """The two base URLs; the keys only when they were just created."""
    embedded = "embedded, append-only in " + str(data_dir / "redis") if stack.redis else "external"
    print(f"collector:  {stack.collector_url}", file=out)
    print(f"aggregator: {stack.aggregator_url}   (dashboard: {stack.aggregator_url}/)", file=out)
    print(f"redis:      {embedded}", file=out)
    print(f"data:       {data_dir}", file=out)
    if created:
        print(f"keys (shown this once; kept 0600 in {data_dir / 'keys.json'}):", file=out)
        print(f"  admin    {keys.admin}", file=out)
        print(f"  ingest   {keys.ingest}", file=out)
        print(f"  analyst  {keys.analyst}", file=out)
        print(f"dashboard:  sign in at {stack.aggregator_url}/ with the analyst key", file=out)
    else:
        print(f"keys:       in {data_dir / 'keys.json'} (shown on the first run only)", file=out)
    out.flush()


#: A child restarted this many times within RESTART_WINDOW seconds is given up on.
MAX_RESTARTS, RESTART_WINDOW = 5, 60.0


def wait_for_signal(stack: Stack, out: TextIO, *, probe_every: float = 2.0) -> int:
    """Supervise until SIGINT/SIGTERM (0), or a child that keeps dying (1).

    Every 0.5 s a child that exited is started again; every ``probe_every`` s each
    is asked for its health (Redis: PING; the services: GET /healthz in 2 s) and
    one that fails three checks in a row is killed and started again.  Each
    restart is one JSON line on ``out``.  DIR/status.json says ``running`` only
    while every child is alive and answered its last check (``ldp status``).
    """
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        del frame
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    status = StatusFile(stack)
    history: list[float] = []
    next_probe = time.monotonic() + probe_every
    try:
        while not stop.wait(0.5):
            now = time.monotonic()
            probe = now >= next_probe
            if probe:
                next_probe = now + probe_every
            status.update()  # a child found dead is "degraded" before its restart
            try:
                restarts = stack.supervise(probe)
            except (StackError, RuntimeError, OSError) as exc:
                _event(out, "restart_failed", error=str(exc).splitlines()[0])
                return 1
            for child, reason in restarts:
                _event(out, "restarted", child=child, reason=reason)
                history.append(now)
            history[:] = [t for t in history if now - t < RESTART_WINDOW]
            if len(history) > MAX_RESTARTS:
                _event(out, "giving_up", restarts=len(history), seconds=RESTART_WINDOW)
                return 1
            status.update()
        return 0
    finally:
        status.clear()
        for s, h in previous.items():
            signal.signal(s, h)


def _event(out: TextIO, event: str, **fields: object) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(json.dumps({"ts": stamp, "event": event, **fields}), file=out, flush=True)


def cmd_up(args: argparse.Namespace) -> int:
    data_dir = Path(args.data) if args.data else default_data_dir()
    try:
        stack, keys, created = start_stack(args, data_dir)
    except (StackError, RuntimeError, OSError) as exc:
        print(f"ldp up: {exc}", file=sys.stderr)
        return 1
    try:
        banner(stack, keys, created, data_dir, sys.stdout)
        print("running; Ctrl-C stops everything (data persists)", flush=True)
        code = wait_for_signal(stack, sys.stderr)
    finally:
        clear_endpoints(data_dir)  # while the lock is ours: never a successor's file
        stack.stop()  # releases the lock last
    print("stopped", flush=True)
    return code
