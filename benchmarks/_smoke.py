"""``LDP_BENCH_SMOKE=1``: a benchmark the docs name runs in seconds, through the same code.

tests/system/test_doc_commands.py runs every documented benchmark command line
verbatim with this variable set: the same argument parsing and the same code path,
with sizes, rounds and durations shrunk (its figures then mean nothing), and any
file the command would write into the checkout (``benchmarks/results/``, a
``--save`` path) written under ``$TMPDIR/ldp-bench-smoke/`` instead::

    LDP_BENCH_SMOKE=1 .venv/bin/python benchmarks/bench_ingest.py --single

>>> size(100_000, 500, environ={})
100000
>>> size(100_000, 500, environ={"LDP_BENCH_SMOKE": "1"})
500
>>> output(Path("runs.json"), environ={}).as_posix()
'runs.json'
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

__all__ = ["ENV", "announce", "on", "output", "size"]

#: The switch; any value but "" and "0" turns smoke mode on.
ENV = "LDP_BENCH_SMOKE"
T = TypeVar("T")


def on(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this run is a smoke run."""
    return (os.environ if environ is None else environ).get(ENV, "") not in ("", "0")


def size(full: T, smoke: T, environ: Mapping[str, str] | None = None) -> T:
    """``full``, or ``smoke`` in a smoke run (a size, a count, a duration, a tuple)."""
    return smoke if on(environ) else full


def output(path: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Where a result file goes: ``path``, or ``$TMPDIR/ldp-bench-smoke/<its name>`` in
    a smoke run (the checkout stays clean)."""
    if not on(environ):
        return path
    folder = Path(tempfile.gettempdir()) / "ldp-bench-smoke"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / path.name


def announce(script: str) -> None:
    """Say on stderr that the figures to follow are a smoke run's, if they are."""
    if on():
        print(f"{script}: {ENV} is set: smoke sizes, the figures mean nothing",
              file=sys.stderr, flush=True)
