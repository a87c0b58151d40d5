"""Coverage of 95% window intervals for memoised (two-level) and one-level metrics.

Run: ``.venv/bin/python benchmarks/bench_window_coverage.py [replications] [numeric]``
(defaults 100,000, about 3 s; and 20,000 for the grid means, about 1 minute).
The experiment is the one of tests/aggregator/test_window_coverage.py (exact
simulation of the support count of a 1000-device fleet that reports one fixed
value in every epoch; eps_1 = 1, eps_inf = 2): for each mechanism and window of
T epochs it prints the coverage with the window variance
(``estimate(..., epochs=T)``), the coverage of the naive interval that treats
every report as independent (the code before the fix), and the true spread of
the estimate over its mean reported stderr.  A second table does the same for
the memoised Piecewise mean (tests/aggregator/test_window_numeric.py: 1000
devices at 2.5 or 3.5 on [0, 10], eps_1 = 1), whose reports are cells.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._table import header, table
from tests.aggregator import test_window_numeric as numeric
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


def numeric_table(replications: int = numeric.REPLICATIONS) -> str:
    rows = []
    for i, case in enumerate(numeric.CASES):
        for epochs in numeric.WINDOWS:
            result = numeric.coverage(case, epochs, replications, seed=epochs * 1000 + i)
            rows.append([
                case.label,
                "2" if case.two_level else "1",
                str(epochs),
                f"{100 * result.honest:.2f}%",
                f"{100 * result.naive:.2f}%",
                f"{result.spread_ratio:.3f}",
            ])
    return table(
        ["grid mean (eps_1 = 1)", "levels", "epochs", "coverage (window variance)",
         "coverage (naive)", "sd / stderr"],
        rows,
    )


def main() -> None:
    replications = int(sys.argv[1]) if len(sys.argv) > 1 else REPLICATIONS
    grid = int(sys.argv[2]) if len(sys.argv) > 2 else numeric.REPLICATIONS
    print(header(f"Window interval coverage, 95% nominal, {replications} replications"))
    print(coverage_table(replications))
    print()
    print(header(f"Memoised grid means, 95% nominal, {grid} replications"))
    print(numeric_table(grid))


if __name__ == "__main__":
    main()
