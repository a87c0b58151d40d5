"""Where the services are and which key to use: flags, then env, then the data folder.

aggregator: ``--url`` / LDP_AGGREGATOR_URL / DIR/endpoints.json, key
``--key`` / LDP_ANALYST_KEY / DIR/keys.json (analyst);
collector: ``--url`` / LDP_COLLECTOR_URL / DIR/endpoints.json, key
``--key`` / LDP_ADMIN_KEY / DIR/keys.json (admin).  DIR is ``--data``, else
$LDP_DATA_DIR, else ~/.local/share/ldp-telemetry: after ``ldp up --data DIR``, give
the other commands the same ``--data DIR`` (or export LDP_DATA_DIR=DIR).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Literal

from ldp_cli.api import Api
from ldp_cli.keys import default_data_dir, load_endpoints, load_keys

__all__ = ["ConfigMissing", "add_connection_arguments", "api_for"]

Service = Literal["aggregator", "collector"]


class ConfigMissing(RuntimeError):
    """No URL or no key could be found."""


def add_connection_arguments(p: argparse.ArgumentParser, service: Service) -> None:
    env_url = "LDP_AGGREGATOR_URL" if service == "aggregator" else "LDP_COLLECTOR_URL"
    env_key = "LDP_ANALYST_KEY" if service == "aggregator" else "LDP_ADMIN_KEY"
    p.add_argument("--url", help=f"{service} base URL (else ${env_url}, else `ldp up`'s)")
    p.add_argument("--key", help=f"API key (else ${env_key}, else the data folder's)")
    p.add_argument(
        "--data",
        help="data folder of `ldp up` (default: $LDP_DATA_DIR or ~/.local/share/ldp-telemetry)",
    )


def api_for(args: argparse.Namespace, service: Service) -> Api:
    data_dir = Path(args.data) if getattr(args, "data", None) else default_data_dir()
    if service == "aggregator":
        url = args.url or os.environ.get("LDP_AGGREGATOR_URL")
        key = args.key or os.environ.get("LDP_ANALYST_KEY")
    else:
        url = args.url or os.environ.get("LDP_COLLECTOR_URL")
        key = args.key or os.environ.get("LDP_ADMIN_KEY")
    url = url or load_endpoints(data_dir).get(service)
    if not key:
        keys = load_keys(data_dir)
        if keys is not None:
            key = keys.analyst if service == "aggregator" else keys.admin
    if not url:
        raise ConfigMissing(f"no {service} URL: {_how_to_connect(service, data_dir)}")
    if not key:
        raise ConfigMissing(f"no {service} key: {_how_to_connect(service, data_dir, key=True)}")
    return Api(url, key)


def _how_to_connect(service: Service, data_dir: Path, *, key: bool = False) -> str:
    """Where the CLI looked, and the options and variables that point it elsewhere.

    >>> print(_how_to_connect("aggregator", Path("/srv/ldp")))  # doctest: +NORMALIZE_WHITESPACE
    no `ldp up` is running on the data folder /srv/ldp; pass --data DIR (the folder given
    to `ldp up --data DIR`) or set LDP_DATA_DIR, or give the URL and key with --url/--key
    (or LDP_AGGREGATOR_URL/LDP_ANALYST_KEY)
    >>> print(_how_to_connect("collector", Path("/srv/ldp"), key=True))
    ... # doctest: +NORMALIZE_WHITESPACE
    no keys.json in the data folder /srv/ldp; pass --data DIR (the folder given to
    `ldp up --data DIR`) or set LDP_DATA_DIR, or give the key with --key (or LDP_ADMIN_KEY)
    """
    env_url, env_key = (("LDP_AGGREGATOR_URL", "LDP_ANALYST_KEY") if service == "aggregator"
                        else ("LDP_COLLECTOR_URL", "LDP_ADMIN_KEY"))
    folder = ("pass --data DIR (the folder given to `ldp up --data DIR`) or set LDP_DATA_DIR")
    if key:
        return (f"no keys.json in the data folder {data_dir}; {folder}, or give the key with"
                f" --key (or {env_key})")
    return (f"no `ldp up` is running on the data folder {data_dir}; {folder}, or give the URL"
            f" and key with --url/--key (or {env_url}/{env_key})")
