"""``ldp serve collector|aggregator``: the production entry point of a service.

    ldp serve collector  --host 0.0.0.0 --port 8000 --workers 4
    ldp serve aggregator --host 0.0.0.0 --port 8001 --workers 2

What it does, in order:

1. checks the settings (``LDP_*``, see docs/operating.md) and
   exits 1 with one line naming the refused variables, never their values;
2. with more than one worker (or ``--metrics-dir``), empties a folder for
   prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``;
   default: a fresh private temporary folder) so that /metrics sums every
   worker and a counter never goes back (a worker that dies is replaced by
   uvicorn; the next scrape drops its live series, so ``ldp_workers`` counts
   the live workers; plain ``uvicorn --workers N`` without the folder logs a
   WARNING in each worker instead);
3. runs uvicorn with the workers, its JSON log configuration
   (``collector.logs.uvicorn_log_config``: every line one JSON object, access
   lines without the client address or query string), no ``Server`` header,
   and a graceful shutdown on SIGTERM/SIGINT: requests in flight get
   ``--graceful-seconds`` to finish, then the lifespans close Redis;
4. guards every connection (``ldp_server.guard``: header and body deadlines,
   ``LDP_MAX_CONNECTIONS`` per worker) and believes X-Forwarded-For only from
   ``LDP_TRUSTED_PROXIES`` (``ldp_server.serve_asgi``).

Every HTTP request is timed into ``ldp_http_request_duration_seconds``
(``collector.telemetry.HttpMetrics``).  TLS belongs to the reverse proxy in
front (deploy/Caddyfile or deploy/nginx.conf).

>>> parser = argparse.ArgumentParser()
>>> add_arguments(parser)
>>> args = parser.parse_args(["collector", "--workers", "2"])
>>> (args.service, args.port, args.workers)
('collector', 0, 2)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI's parser imports this module: no server import at run time
    from fastapi import FastAPI

__all__ = ["add_arguments", "aggregator_app", "cmd_serve", "collector_app"]

DEFAULT_PORTS = {"collector": 8000, "aggregator": 8001}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("service", choices=sorted(DEFAULT_PORTS))
    p.add_argument("--host", default=os.environ.get("LDP_HOST", "127.0.0.1"),
                   help="interface (default $LDP_HOST or 127.0.0.1; 0.0.0.0 in a container)")
    p.add_argument("--port", type=int, default=0,
                   help="port (default $LDP_PORT, else 8000 collector, 8001 aggregator)")
    p.add_argument("--workers", type=int, default=int(os.environ.get("LDP_WORKERS", "1")),
                   help="worker processes (default $LDP_WORKERS or 1)")
    p.add_argument("--metrics-dir", default=os.environ.get("PROMETHEUS_MULTIPROC_DIR"),
                   help="folder of the multiprocess metrics (emptied at start)")
    p.add_argument("--graceful-seconds", type=int, default=20,
                   help="time requests in flight get on SIGTERM (default 20)")
    p.add_argument("--log-level", default=os.environ.get("LDP_LOG_LEVEL", "info"))


def collector_app() -> FastAPI:
    """``collector.app.create_app`` (a uvicorn factory; it times its own requests)."""
    from collector.app import create_app

    return create_app()


def aggregator_app() -> FastAPI:
    """``aggregator.app.create_app`` (a uvicorn factory; it times its own requests)."""
    from aggregator.app import create_app

    return create_app()


def _check_settings(service: str) -> None:
    """Exit 1 with the one-line refusal, before any worker starts."""
    from ldp_server.settings import load_or_exit

    if service == "collector":
        from collector.settings import Settings as CollectorSettings

        load_or_exit(CollectorSettings, service)
    else:
        from aggregator.settings import Settings as AggregatorSettings

        load_or_exit(AggregatorSettings, service)


def _metrics_dir(args: argparse.Namespace) -> str | None:
    if args.workers <= 1 and not args.metrics_dir:
        return None
    if args.metrics_dir:
        folder = Path(args.metrics_dir)
        if folder.exists():
            for stale in folder.glob("*.db"):  # counters of an earlier run
                stale.unlink()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return str(folder)
    return tempfile.mkdtemp(prefix=f"ldp-{args.service}-metrics-")


def cmd_serve(args: argparse.Namespace) -> int:
    _check_settings(args.service)
    if args.workers < 1:
        print(f"{args.service}: --workers must be >= 1, not {args.workers}", file=sys.stderr)
        return 2
    folder = _metrics_dir(args)
    own_folder = folder is not None and not args.metrics_dir
    if folder:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder  # inherited by every worker
    import uvicorn

    from collector.logs import uvicorn_log_config
    from ldp_server.guard import raise_file_limit
    from ldp_server.serve_asgi import launch_options
    from ldp_server.settings import ListenSettings

    raise_file_limit()

    port = args.port or int(os.environ.get("LDP_PORT", "0")) or DEFAULT_PORTS[args.service]
    try:
        uvicorn.run(
            f"ldp_cli.serve:{args.service}_app",
            factory=True,
            host=args.host,
            port=port,
            workers=args.workers,
            log_config=uvicorn_log_config(args.log_level),
            log_level=args.log_level.lower(),
            access_log=True,
            server_header=False,
            timeout_graceful_shutdown=args.graceful_seconds,
            **launch_options(ListenSettings()),  # checked with the service's settings
        )
    finally:
        if own_folder and folder:
            shutil.rmtree(folder, ignore_errors=True)
    return 0
