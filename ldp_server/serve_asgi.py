"""``python -m ldp_server.serve_asgi FACTORY --host H --port P ...``: uvicorn with the guards.

The command line of ``ldp up``'s services and of the tests' (``ldp_server.service.uvicorn_argv``):
``uvicorn --factory`` with its access log off, but with what uvicorn's own
command line cannot say:

- the HTTP protocol ``ldp_server.guard.GuardedHttpTools`` (header and body
  deadlines, a cap on connections per worker), named by its import path so
  that every worker process imports it;
- X-Forwarded-For believed only from ``LDP_TRUSTED_PROXIES`` (uvicorn's own
  default believes 127.0.0.1, so that any local client could pick the address
  its rate limit is counted under); unset, the header is ignored;
- the soft file limit raised to the hard one.

Refused ``LDP_*`` connection settings exit 1 with one line, like the services'.

>>> launch_options(ListenSettings(trusted_proxies="10.0.0.0/8"))["forwarded_allow_ips"]
['10.0.0.0/8']
>>> launch_options(ListenSettings())["proxy_headers"]
False
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ldp_server.guard import raise_file_limit
from ldp_server.settings import ListenSettings, SettingsError, load

__all__ = ["GUARDED_HTTP", "launch_options", "main"]

#: uvicorn's ``http`` option: an import path, so spawned workers import the class.
GUARDED_HTTP = "ldp_server.guard:GuardedHttpTools"


def launch_options(listen: ListenSettings) -> dict[str, Any]:
    """The uvicorn options these settings decide (protocol, proxy headers)."""
    proxies = list(listen.trusted_proxy_list())
    return {
        "http": GUARDED_HTTP,
        "proxy_headers": bool(proxies),
        "forwarded_allow_ips": proxies or None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ldp_server.serve_asgi")
    p.add_argument("factory", help="module:callable returning the ASGI app")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--log-level", default="warning")
    p.add_argument("--log-config", type=Path, default=None)
    args = p.parse_args(argv)
    name = args.factory.partition(".")[0]
    try:
        listen = load(ListenSettings)
    except SettingsError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    raise_file_limit()
    import uvicorn

    log_config: Any = str(args.log_config) if args.log_config else uvicorn.config.LOGGING_CONFIG
    uvicorn.run(args.factory, factory=True, host=args.host, port=args.port,
                workers=args.workers, access_log=False, log_level=args.log_level,
                log_config=log_config, **launch_options(listen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
