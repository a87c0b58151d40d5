"""``ldp audit`` (empirical epsilon with a null control) and ``ldp bench``."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ldp_core.audit import AuditResult

__all__ = ["audit_exit_code", "cmd_audit", "cmd_bench", "find_benchmarks"]


def audit_exit_code(results: Sequence[AuditResult]) -> int:
    """1 when any measured lower bound exceeds its declared epsilon, else 0."""
    return 1 if any(r.violation for r in results) else 0


def cmd_audit(args: argparse.Namespace) -> int:
    """Audit every mechanism; exit 1 when a measured lower bound exceeds a declared epsilon."""
    from ldp_core.audit import audit_all, format_table

    epsilons = tuple(float(e) for e in args.epsilons.split(","))
    results = audit_all(epsilons=epsilons, trials=args.trials, seed=args.seed)
    print(format_table(results))
    return audit_exit_code(results)


def find_benchmarks() -> Path | None:
    """benchmarks/run_all.py under the current folder, else beside the package."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[1]):
        candidate = root / "benchmarks" / "run_all.py"
        if candidate.is_file():
            return candidate
    return None


def cmd_bench(args: argparse.Namespace) -> int:
    script = find_benchmarks()
    if script is None:
        print(
            "ldp bench: no benchmarks/run_all.py found (run from the repository root)",
            file=sys.stderr,
        )
        return 2
    rest = list(args.rest)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return subprocess.call([sys.executable, str(script), *rest], cwd=script.parents[1])
