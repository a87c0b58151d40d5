"""Strings nobody listed: ours (``prefix_olh``) against pure-LDP's heavy hitters, one run.

Workload (issue 16): 10,000 random strings over a-z of length 1..6 (uniform
length), Zipf(1.1) over them, n reports, eps = 4, one report per user.  The
same n reports go to every method.

False discoveries: confident strings that no device holds (true count 0 in the
run's data); the discovery cut states at most 0.05 expected per run.

Coverage is over the confident discoveries (above the Bonferroni cut), whose
intervals are conditional on that selection (``prefix_selection``); a candidate
listed only to fill the top 20 was picked by rank among ~30,000, and its plain
interval carries that selection (the winner's curse).  The coverage's 95%
Clopper-Pearson interval treats the discoveries as independent (those of one
run share its reports: an approximation).

- ours: the collector's tallies (``PrefixOLH.simulate_counts``, the device
  path's law, checked by tests/ldp_core/test_mechanisms.py) and
  ``PrefixOLH.discover(top=20)``; server time = discovery from the counters.
- pure-LDP 1.2.0 (``pip install 'ldp-telemetry[peers]'`` in a separate venv):
  PEM with Apple's CMS (k = 256 hashes, m = 1024; start length 2, one symbol per
  level, top-20 kept each level), TreeHist with CMS (one symbol per level) and
  Apple's SFP with CMS.  Their clients run per report (Python), their server
  time is ``aggregate`` over the reports plus ``find_heavy_hitters(k=20)``.
  Shims, stated: ``FreqOracleServer.__init__`` gets d = 1 when CMS passes None
  (numpy >= 1.25 refuses ``np.zeros(None)``: CMSServer and TreeHist raise
  TypeError as shipped); SFP gets its oracle explicitly (``SFPClient``
  has no default) and its alphabet as a set (its server calls
  ``alphabet.add``); the padding "*" is in PEM's alphabet (else no string
  shorter than 6 can be found) and not in TreeHist's (it refuses it).

Recall of the true top-k: |our top-k by estimate & true top-k| / k, averaged
over ``--runs`` data seeds (each run draws its own reports).  Coverage: the
share of found strings whose 95% interval holds the true share.  Large n
(ours only): tallies simulated from the value counts in bounded chunks (never
10^7 reports at once); decoding time and its peak traced memory.

    python benchmarks/bench_strings.py [--reports 100000] [--runs 3] [--big 1000000,10000000]
        [--peers pem,treehist,sfp] [--first-seed 100] [--null]

``--null``: the tail of the last level's support count for strings no device holds,
against the normal cut and the exact null law (``prefix_null``) at rates 1e-2..1e-6.
"""

from __future__ import annotations

import argparse
import string
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _smoke
from benchmarks._table import header, table
from ldp_core.clopper_pearson import cp_lower, cp_upper
from ldp_core.mechanisms.prefix import PrefixOLH
from ldp_core.mechanisms.prefix_discovery import FALSE_DISCOVERIES

EPSILON = 4.0
ZIPF_S = 1.1
DISTINCT = 10_000
LONGEST = 6
TOP = 20
#: SFP estimates 256 x 27^2 hashed fragments per position, each over every CMS row:
#: with 256 rows one run takes minutes, so its CMS has 16 rows (stated in the table).
SFP_HASHES = 16


def workload(seed: int) -> tuple[list[str], npt.NDArray[np.float64]]:
    """(the distinct strings, Zipf(1.1) shares by rank)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list(string.ascii_lowercase))
    out: set[str] = set()
    while len(out) < DISTINCT:
        out.add("".join(rng.choice(letters, size=int(rng.integers(1, LONGEST + 1)))))
    strings = sorted(out)
    rng.shuffle(strings)
    shares = np.arange(1, DISTINCT + 1, dtype=np.float64) ** -ZIPF_S
    return strings, shares / shares.sum()


def recall(found: list[str], counts: npt.NDArray[np.int64], strings: list[str], k: int) -> float:
    true = {strings[i] for i in np.argsort(-counts, kind="stable")[:k]}
    return len(set(found[:k]) & true) / k


def ours(strings: list[str], counts: npt.NDArray[np.int64], seed: int) -> dict[str, Any]:
    m = PrefixOLH(epsilon=EPSILON, max_length=LONGEST)
    codes = np.array([m.check_value(s) for s in strings], dtype=np.int64)
    tallies = m.simulate_counts(codes, counts, np.random.default_rng(seed))
    m.discover(tallies, top=TOP)  # warm the per-level plans (computed once per spec)
    start = time.perf_counter()
    found = m.discover(tallies, top=TOP)
    seconds = time.perf_counter() - start
    n = int(counts.sum())
    truth = dict(zip(strings, counts / n, strict=True))
    covered = [f.ci_low <= truth.get(f.value, 0.0) <= f.ci_high
               for f in found.found if f.confident]
    false = [f.value for f in found.found if f.confident and truth.get(f.value, 0.0) == 0]
    return {
        "names": [f.value for f in found.found], "seconds": seconds,
        "covered": covered, "threshold": found.threshold, "n": n, "false": false,
        "confident": sum(f.confident for f in found.found), "counters": m.num_counters,
    }


# -- pure-LDP ---------------------------------------------------------------------------


def _shim() -> None:
    import pure_ldp.core._freq_oracle_server as fos

    if getattr(fos.FreqOracleServer, "_ldp_shim", False):
        return
    original = fos.FreqOracleServer.__init__

    def init(self: Any, epsilon: float, d: Any, index_mapper: Any = None) -> None:
        original(self, epsilon, 1 if d is None else d, index_mapper)

    fos.FreqOracleServer.__init__ = init
    fos.FreqOracleServer._ldp_shim = True


def _cms(epsilon: float, hashes: int = 256) -> tuple[Any, Any]:
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer

    server = CMSServer(epsilon, hashes, 1024)
    return CMSClient(epsilon, server.get_hash_funcs(), 1024), server


def _peer(kind: str) -> tuple[Any, Any]:
    _shim()
    letters = list(string.ascii_lowercase)

    def mapper(_: str) -> int:
        return 0  # CMS hashes the string itself; the index map is unused

    if kind == "pem":
        from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer

        fo_client, fo_server = _cms(EPSILON)
        alphabet = [*letters, "*"]
        return (PEMClient(EPSILON, 2, LONGEST, 1, alphabet=alphabet, index_mapper=mapper,
                          fo_client=fo_client),
                PEMServer(EPSILON, 2, LONGEST, 1, alphabet=alphabet, index_mapper=mapper,
                          fo_server=fo_server))
    if kind == "treehist":
        from pure_ldp.heavy_hitters.treehistogram import TreeHistClient, TreeHistServer

        fo_client, fo_server = _cms(EPSILON / 2)
        return (TreeHistClient(EPSILON, 1, LONGEST, alphabet=letters, index_mapper=mapper,
                               fo_client=fo_client),
                TreeHistServer(EPSILON, LONGEST, 1, alphabet=letters, index_mapper=mapper,
                               fo_server=fo_server))
    from pure_ldp.heavy_hitters.apple_sfp import SFPClient, SFPServer

    # One CMS pair: SFP deep-copies it for words and fragments (its client ignores
    # frag_client and copies the word oracle), so both sides share its hashes.
    fo_client, fo_server = _cms(EPSILON / 2, SFP_HASHES)
    return (SFPClient(EPSILON, 2, LONGEST, alphabet=set(letters), index_mapper=mapper,
                      fo_client=fo_client),
            SFPServer(EPSILON, 2, LONGEST, alphabet=set(letters), index_mapper=mapper,
                      fo_server=fo_server))


def peer(kind: str, strings: list[str], counts: npt.NDArray[np.int64],
         seed: int) -> dict[str, Any]:
    import random

    random.seed(seed)  # their clients draw from the global generator
    client, server = _peer(kind)
    data = np.repeat(np.array(strings, dtype=object), counts)
    np.random.default_rng(seed).shuffle(data)
    reports = [client.privatise(s) for s in data]
    start = time.perf_counter()
    for r in reports:
        server.aggregate(r)
    found, _ = server.find_heavy_hitters(k=TOP)
    seconds = time.perf_counter() - start
    names = [str(f).replace("*", "") for f in found]
    return {"names": names, "seconds": seconds}


# -- the tables -------------------------------------------------------------------------


def side_by_side(reports: int, runs: int, peers: list[str], first: int = 0) -> str:
    rows: dict[str, list[dict[str, Any]]] = {"ours": [], **{p: [] for p in peers}}
    recalls: dict[str, list[tuple[float, float]]] = {k: [] for k in rows}
    for run in range(first, first + runs):
        strings, shares = workload(run)
        counts = np.random.default_rng(10_000 + run).multinomial(reports, shares)
        result = ours(strings, counts, seed=run)
        rows["ours"].append(result)
        for kind in peers:
            rows[kind].append(peer(kind, strings, counts, seed=run))
        for kind, done in rows.items():
            last = done[-1]
            recalls[kind].append((recall(last["names"], counts, strings, 10),
                                  recall(last["names"], counts, strings, TOP)))
    label = {"ours": "ours: prefix_olh (levels 2,4,6; OLH g=53, S=2048 seeds per level)",
             "pem": "PEM with Apple CMS (pure-LDP)", "treehist": "TreeHist with CMS (pure-LDP)",
             "sfp": f"Apple SFP with CMS, k = {SFP_HASHES} (pure-LDP)"}
    base = float(np.median([r["seconds"] for r in rows["ours"]]))
    out = []
    for kind, done in rows.items():
        r10 = [a for a, _ in recalls[kind]]
        r20 = [b for _, b in recalls[kind]]
        secs = float(np.median([r["seconds"] for r in done]))
        out.append([label[kind], f"{np.mean(r10):.2f} ({min(r10):.1f}-{max(r10):.1f})",
                    f"{np.mean(r20):.2f} ({min(r20):.2f}-{max(r20):.2f})",
                    f"{secs:.3f} s", f"{secs / base:.0f}x" if kind != "ours" else "1x"])
    covered = [c for r in rows["ours"] for c in r["covered"]]
    false = [len(r["false"]) for r in rows["ours"]]
    threshold = float(np.median([r["threshold"] for r in rows["ours"]]))
    lines = [
        f"n = {reports:,}, eps = {EPSILON:g}, {DISTINCT:,} strings, Zipf({ZIPF_S}), "
        f"{runs} runs, data seeds {first}-{first + runs - 1} (mean, range)",
        "",
        table(["method", "recall top-10", "recall top-20", "server time (median)",
               "time / ours"], out),
        "",
        f"ours: {sum(covered)} of {len(covered)} confident discoveries ({np.mean(covered):.3f}, "
        f"95% CP {cp_lower(sum(covered), len(covered), 0.025):.3f}-"
        f"{cp_upper(sum(covered), len(covered), 0.025):.3f}) have the "
        f"true share inside their 95% interval; detection threshold (found with 95% "
        f"probability) {threshold:.4f} = {threshold * reports:,.0f} reports; "
        f"{rows['ours'][0]['counters']:,} counters, whatever n.",
        f"ours: false discoveries (a confident string no device holds) {sum(false)} in "
        f"{runs} runs, {sum(x > 0 for x in false)} runs with one (the cut states <= "
        f"{FALSE_DISCOVERIES:g} expected per run).",
    ]
    return "\n".join(lines)


def big(sizes: list[int]) -> str:
    strings, shares = workload(0)
    m = PrefixOLH(epsilon=EPSILON, max_length=LONGEST)
    codes = np.array([m.check_value(s) for s in strings], dtype=np.int64)
    out = []
    for n in sizes:
        counts = np.random.default_rng(n).multinomial(n, shares)
        start = time.perf_counter()
        tallies = m.simulate_counts(codes, counts, np.random.default_rng(1))
        simulated = time.perf_counter() - start
        m.discover(tallies, top=TOP)
        tracemalloc.start()
        start = time.perf_counter()
        found = m.discover(tallies, top=TOP)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        names = [f.value for f in found.found]
        truth = dict(zip(strings, counts / n, strict=True))
        covered = [f.ci_low <= truth.get(f.value, 0.0) <= f.ci_high
                   for f in found.found if f.confident]
        out.append([f"{n:,}", f"{simulated:.1f} s", f"{seconds:.2f} s",
                    f"{peak / 2**20:.0f} MiB", f"{tallies.nbytes / 2**20:.1f} MiB",
                    f"{recall(names, counts, strings, 10):.2f}",
                    f"{recall(names, counts, strings, TOP):.2f}",
                    f"{sum(found.confident for found in found.found)}",
                    f"{np.mean(covered):.2f}", f"{found.threshold:.5f}"])
    return table(["n", "simulate tallies", "decode", "decode peak memory", "tallies",
                  "recall top-10", "recall top-20", "found (confident)", "coverage",
                  "threshold (share)"], out)


def null_tail(reports: int, runs: int, first: int, per_run: int = 50_000) -> str:
    """The last level's support count of random strings no device holds (length 6, the
    candidates' length there), against the two cuts at each rate alpha: the normal
    quantile at the null law's own mean and sd (the old cut) and the exact law's
    (``prefix_null.count_cut``).  Each column expects alpha x candidates."""
    from statistics import NormalDist

    from ldp_core.mechanisms.prefix_null import count_cut

    m = PrefixOLH(epsilon=EPSILON, max_length=LONGEST)
    level = len(m.cuts) - 1
    alphas = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
    normal, exact = np.zeros(len(alphas), dtype=int), np.zeros(len(alphas), dtype=int)
    letters = np.array(list(string.ascii_lowercase))
    tested = 0
    for run in range(first, first + runs):
        strings, shares = workload(run)
        counts = np.random.default_rng(10_000 + run).multinomial(reports, shares)
        codes = np.array([m.check_value(s) for s in strings], dtype=np.int64)
        tallies = m.simulate_counts(codes, counts, np.random.default_rng(run))
        block = tallies.reshape(len(m.cuts), m.seeds, m.g)[level]
        gen = np.random.default_rng(20_000 + run)
        held = set(strings)
        null = [s for s in ("".join(w) for w in gen.choice(letters, (per_run, LONGEST)))
                if s not in held]
        support = np.concatenate([
            m.support(level, block, np.array([m.check_value(s) for s in null[i:i + 2000]]))
            for i in range(0, len(null), 2000)])
        mean, sd = block.mean(axis=1).sum(), np.sqrt(block.var(axis=1).sum())
        for i, alpha in enumerate(alphas):
            normal[i] += int((support >= np.ceil(mean + NormalDist().inv_cdf(1 - alpha) * sd))
                             .sum())
            exact[i] += int((support >= count_cut(block, alpha)).sum())
        tested += len(null)
    rows = [["normal cut (old)", *map(str, normal)], ["exact law (new)", *map(str, exact)],
            ["expected", *(f"{a * tested:.1f}" for a in alphas)]]
    return (f"{tested:,} strings no device holds (random, length 6) over {runs} runs, data "
            f"seeds {first}-{first + runs - 1}: how many reach each cut\n\n"
            + table(["alpha", *(f"{a:g}" for a in alphas)], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--peers", default="pem,treehist,sfp",
                        help="comma-separated subset of pem,treehist,sfp ('' for none)")
    parser.add_argument("--big", default="", help="comma-separated n for ours alone")
    parser.add_argument("--null", action="store_true",
                        help="only the null tail of the last level's count (ours)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="data seed of the first run (the discovery settings were "
                             "chosen on seeds 0-11: report figures from others, e.g. 100)")
    args = parser.parse_args()
    _smoke.announce("bench_strings")
    if _smoke.on():
        args.reports, args.runs = min(args.reports, 5_000), 1
        args.big = ",".join("20000" for _ in args.big.split(",")) if args.big else ""
    peers = [p for p in args.peers.split(",") if p]
    if peers:
        try:
            import pure_ldp  # noqa: F401
        except ImportError as exc:
            sys.exit(f"pure-ldp is not installed here ({exc}); see the module docstring")
    print(header("Strings nobody listed: heavy hitters without a candidate list"))
    if args.null:
        print(null_tail(args.reports, args.runs, args.first_seed))
        return
    print(side_by_side(args.reports, args.runs, peers, args.first_seed))
    if args.big:
        print()
        print(big([int(float(x)) for x in args.big.split(",")]))


if __name__ == "__main__":
    main()
