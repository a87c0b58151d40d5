"""Coverage of 95% window intervals for memoised (two-level) and one-level metrics.

Run: ``.venv/bin/python benchmarks/bench_window_coverage.py [replications]``
(default 100,000; about 3 s).  The experiment is the one of
tests/aggregator/test_window_coverage.py (exact simulation of the support count of a
1000-device fleet that reports one fixed value in every epoch; eps_1 = 1,
eps_inf = 2): for each mechanism and window of T epochs it prints the
coverage with the window variance (``estimate(..., epochs=T)``), the coverage
of the naive interval that treats every report as independent (the code before
the fix), and the true spread of the estimate over its mean reported stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._table import header, table
from tests.aggregator.test_window_coverage import CASES, REPLICATIONS, WINDOWS, coverage


def coverage_table(replications: int = REPLICATIONS) -> str:
    rows = []
    for i, case in enumerate(CASES):
        for epochs in WINDOWS:
            result = coverage(case, epochs, replications, seed=epochs * 1000 + i)
            rows.append([
                case.label,
                "2" if case.two_level else "1",
                str(epochs),
                f"{100 * result.honest:.2f}%",
                f"{100 * result.naive:.2f}%",
                f"{result.spread_ratio:.3f}",
            ])
    return table(
        ["mechanism / checked value", "levels", "epochs", "coverage (window variance)",
         "coverage (naive)", "sd / stderr"],
        rows,
    )


def main() -> None:
    replications = int(sys.argv[1]) if len(sys.argv) > 1 else REPLICATIONS
    print(header(f"Window interval coverage, 95% nominal, {replications} replications"))
    print(coverage_table(replications))


if __name__ == "__main__":
    main()
