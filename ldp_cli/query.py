"""``ldp metric create|list``, ``ldp estimate NAME`` and ``ldp plot NAME``.

All go through the services' HTTP APIs (collector for metrics, aggregator for
estimates); nothing here reads Redis.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ldp_cli.api import Api
from ldp_cli.connect import api_for
from ldp_cli.table import format_estimate, format_series

__all__ = [
    "catalog_json",
    "cmd_estimate",
    "cmd_metric_create",
    "cmd_metric_list",
    "cmd_plot",
    "estimate_params",
    "fetch_estimate",
    "issuer_key_ids",
    "spec_from_args",
]


def spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The POST /v1/metrics body: from --spec FILE ('-' = stdin) or from the flags."""
    if args.spec:
        text = sys.stdin.read() if args.spec == "-" else Path(args.spec).read_text()
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the spec file must hold one JSON object")
        return data
    if not args.name or not args.kind or args.epsilon is None:
        raise ValueError("give NAME --kind K --epsilon E (or --spec FILE)")
    spec: dict[str, Any] = {
        "name": args.name,
        "kind": args.kind,
        "epsilon": args.epsilon,
        "mechanism": args.mechanism,
        "epoch": args.epoch,
        "unit": args.unit,
        "min_reports": args.min_reports,
    }
    if args.kind == "categorical":
        spec["domain"] = [v.strip() for v in (args.domain or "").split(",") if v.strip()]
    if args.kind == "numeric":
        spec["lo"], spec["hi"] = args.lo, args.hi
    if args.kind == "string":
        for key in ("max_length", "alphabet"):
            value = getattr(args, key, None)
            if value is not None:
                spec[key] = value
    if getattr(args, "statistics", None):  # the server refuses it for a non-numeric kind
        spec["statistics"] = [v.strip() for v in args.statistics.split(",") if v.strip()]
    if args.epsilon_inf is not None:
        spec["longitudinal"] = {"epsilon_inf": args.epsilon_inf}
    return spec


def cmd_metric_create(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    stored = api_for(args, "collector").post("/v1/metrics", spec)
    print(json.dumps(stored, indent=2))
    return 0


def cmd_metric_list(args: argparse.Namespace) -> int:
    """The registered metrics, read from the aggregator with the analyst key.

    ``--json`` prints the catalog an app ships (``Client(metrics="ldp-metrics.json")``,
    the TypeScript SDK's ``metrics``): ``{"metrics": [...], "issuer_keys": [...]}``, each spec
    as the collector serves it to devices (``catalog_json``) and the id of the
    collector's current token issuer key (``issuer_key_ids``) for the SDK to pin.
    """
    metrics = api_for(args, "aggregator").get("/v1/metrics")["metrics"]
    if args.json:
        print(json.dumps(catalog_json(metrics, issuer_key_ids(args)), indent=2))
        return 0
    print(f"{'name':<28} {'ver':>3} {'kind':<12} {'mechanism':<14} {'epsilon':>7}  unit")
    for m in metrics:
        unit = m.get("unit_text") or f"per {m['unit']}, per metric, per {m['epoch']}"
        print(
            f"{m['name']:<28} {m['version']:>3} {m['kind']:<12} {m['mechanism']:<14} "
            f"{m['epsilon']:>7g}  {unit}"
        )
    if not metrics:
        print("(no metric registered)")
    return 0


def catalog_json(metrics: list[dict[str, Any]], issuer_keys: list[str]) -> dict[str, Any]:
    """The catalog file of ``ldp metric list --json``: the specs without the fields the
    analyst API adds for people (``unit_text``), and ``issuer_keys`` when known.

    >>> catalog_json([{"name": "b", "kind": "boolean", "unit_text": "per device"}], ["ab"])
    {'metrics': [{'name': 'b', 'kind': 'boolean'}], 'issuer_keys': ['ab']}
    """
    from client_sdk._catalog import DISPLAY_FIELDS

    specs = [{k: v for k, v in m.items() if k not in DISPLAY_FIELDS} for m in metrics]
    return {"metrics": specs, **({"issuer_keys": issuer_keys} if issuer_keys else {})}


def issuer_key_ids(args: argparse.Namespace) -> list[str]:
    """The id of the collector's current token issuer key (``GET /v1/tokens/key``, its
    ``key_id`` checked against the key), asked with the collector's URL and admin key
    as ``ldp metric create`` finds them ($LDP_COLLECTOR_URL, $LDP_ADMIN_KEY, or the data
    folder of ``ldp up``).  ``[]`` with a note on stderr if the collector cannot tell."""
    from ldp_cli.api import ApiError
    from ldp_cli.connect import ConfigMissing
    from ldp_core.tokens import PublicKey

    collector = argparse.Namespace(url=None, key=None, data=getattr(args, "data", None))
    try:
        body = api_for(collector, "collector").get("/v1/tokens/key")
        return [PublicKey.from_json(body).key_id.hex()]
    except (ApiError, ConfigMissing, ValueError, TypeError, KeyError) as exc:
        print(f"ldp: no issuer_keys in the catalog, the collector's token key is unknown"
              f" ({exc}); the SDK will use any issuer key and log a WARNING",
              file=sys.stderr)
        return []


def estimate_params(args: argparse.Namespace, series: bool = False) -> dict[str, Any]:
    """The query of GET /v1/estimates/{name}: the window as given (the server converts
    dates and ``--since`` with the metric's epoch length)."""
    return {
        "start": args.start,
        "end": args.end,
        "since": getattr(args, "since", None),
        "confidence": args.confidence,
        "consistent": getattr(args, "consistent", False) or None,
        "series": "epoch" if series else None,
        "quantiles": getattr(args, "quantiles", None),
        "buckets": getattr(args, "buckets", None),
        "target": getattr(args, "target", None),
    }


def fetch_estimate(
    api: Api, name: str, args: argparse.Namespace, series: bool = False
) -> dict[str, Any]:
    """The estimate, with every page of its series when asked (``--page-size``)."""
    params = estimate_params(args, series)
    if series and getattr(args, "page_size", None):
        params["limit"] = args.page_size
    body: dict[str, Any] = api.get_pages(f"/v1/estimates/{name}", **params)
    return body


def cmd_estimate(args: argparse.Namespace) -> int:
    api = api_for(args, "aggregator")
    fmt = "json" if args.json else getattr(args, "format", "table")
    if fmt in ("csv", "jsonl"):
        params = estimate_params(args, args.series)
        if args.series and getattr(args, "page_size", None):
            params["limit"] = args.page_size
        sys.stdout.write(api.get_text(f"/v1/estimates/{args.name}", format=fmt, **params))
        return 0
    body = fetch_estimate(api, args.name, args, series=args.series)
    if fmt == "json":
        print(json.dumps(body, indent=2))
    else:
        print(format_estimate(body))
        if args.series:
            print()
            print(format_series(body))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from ldp_cli.plot import plot_estimate

    body = fetch_estimate(api_for(args, "aggregator"), args.name, args, series=True)
    plot_estimate(body, Path(args.output))
    print(f"wrote {args.output}")
    return 0
