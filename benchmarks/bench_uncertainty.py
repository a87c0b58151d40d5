"""Does every served uncertainty describe its number?  The full run of issue 40's harness.

Run::

    .venv/bin/python benchmarks/bench_uncertainty.py [--replicates 2000] [--quantile-replicates 200]

For each cell (statistic, mechanism, law, eps, where, target) it draws that many
populations of n = 20,000 users from the law, randomises them through the exact
simulation, estimates with the served code (quantiles: the served 1,000
bootstrap tallies), and prints the interval's coverage of the target's truth
(the users' own statistic for ``reporters``, the law's for ``population``), the
share of estimates that serve a stderr, sd(error) / rms(stderr) over those, and
the bias (frequencies and bucket shares in percentage points) with its share of
the mean interval width.  Rows "(smoothed)" read the shape's own quantile (the
value served before issue 40) against the same interval.  The harness is
tests/aggregator/uncertainty_harness.py; tests/aggregator/test_uncertainty.py
runs it small in ``make test``.  Costs on a 2-core machine: about 1 minute for
the closed forms at 2,000 and 1.2 s per quantile population (both targets).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _smoke
from benchmarks._table import table
from tests.aggregator import uncertainty_harness as h


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=2000,
                        help="populations per cell for means, frequencies, buckets")
    parser.add_argument("--quantile-replicates", type=int, default=200,
                        help="populations per (law, eps) for the quantiles")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    _smoke.announce("bench_uncertainty")
    r = _smoke.size(args.replicates, 5)
    rq = _smoke.size(args.quantile_replicates, 1)
    boot = _smoke.size(1000, 200)
    laws, epsilons = ["beta", "bimodal"], [1.0, 4.0]
    cells: dict[h.Key, h.Cell] = {}
    started = time.perf_counter()
    h.run_means(laws, epsilons, 20_000, r, args.seed, cells)
    h.run_frequencies(epsilons, 20_000, r, args.seed + 1, cells)
    h.run_buckets(laws, epsilons, 20_000, r, args.seed + 2, cells)
    closed = time.perf_counter() - started
    h.run_quantiles(laws, epsilons, 20_000, rq, args.seed + 3, cells, boot=boot)
    print(f"Served uncertainty over repeated populations (n = 20,000; R = {r} per cell, "
          f"{rq} for the quantiles with {boot} bootstrap tallies)")
    print(table(h.HEADER, h.rows(cells)))
    print(f"\n{closed:.0f} s for the closed forms, "
          f"{time.perf_counter() - started - closed:.0f} s for the quantiles")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
