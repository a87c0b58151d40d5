"""Peer comparison: ours against pure-LDP (``pip install 'ldp-telemetry[peers]'``).

The same Zipf(1.1) data, the same (n, d, epsilon) for GRR (their DE), OUE (their
UE with use_oue), OLH (their LH with use_olh) and their fast OLH variant
(FastLH, a fixed pool of k xxhash functions).  For each:

- encode: our vectorised simulation path (``ldp_core.simulate.tallies``, which
  randomises AND tallies) against their client's ``privatise`` loop, in
  reports/s; plus our device path (``m.randomize``, OS CSPRNG) per report;
- aggregation: our ``aggregator.estimate`` on the tally vector against their
  ``aggregate_all`` + ``estimate_all`` over the same reports;
- accuracy: MSE of the count estimates summed over the domain, divided by the
  theory for that mechanism's own channel (the exact variance formula
  n q*(1-q*)/(p*-q*)^2 + c(v)(1-p*-q*)/(p*-q*) summed over v).  For their
  OLH q* = 1/g (an ideal hash), which a fixed pool does not achieve.

Their LH server hashes every value for every report (d xxhash calls per report),
so its aggregation is timed on small chunks and extrapolated per report to n,
and its MSE is computed on the first ``olh_subset`` reports (stated in the
output).  Ratios are computed from figures of the same run.

Run: ``.venv/bin/python benchmarks/bench_peers.py [--quick]``.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aggregator import estimate
from aggregator.estimate import exact_count_variance
from benchmarks._table import header, median_seconds, table
from ldp_core import mechanism
from ldp_core.simulate import tallies

__all__ = ["PeerRow", "available", "section", "theory_sum", "zipf_data"]

ZIPF_S = 1.1


def available() -> str | None:
    """None if pure-ldp imports, else the reason it does not."""
    try:
        import pure_ldp.frequency_oracles  # noqa: F401
    except Exception as exc:  # any import failure means: skip the section
        return f"{type(exc).__name__}: {exc}"
    return None


def zipf_data(d: int, n: int, seed: int = 2026) -> npt.NDArray[np.int64]:
    """n values in [0, d) with P[v] proportional to (v + 1)^-1.1."""
    weights = np.arange(1, d + 1, dtype=np.float64) ** -ZIPF_S
    values = np.random.default_rng(seed).choice(d, size=n, p=weights / weights.sum())
    return values.astype(np.int64)


def theory_sum(p: float, q: float, n: int, counts: npt.NDArray[np.int64]) -> float:
    """Sum over the domain of Var[c_hat(v)] for a pure channel (p*, q*)."""
    c = counts.astype(np.float64)
    return float((n * q * (1 - q) / (p - q) ** 2 + c * (1 - p - q) / (p - q)).sum())


@dataclass(frozen=True)
class PeerRow:
    """One (mechanism, implementation) line of the comparison."""

    mechanism: str
    implementation: str
    encode_per_s: float
    device_us: float | None
    aggregate_s: float
    aggregate_note: str
    mse_ratio: float
    mse_note: str


def _median_per_item(run: Callable[[Sequence[Any]], object], items: Sequence[Any],
                     chunks: int = 3) -> float:
    """Median seconds per item of ``run`` over ``chunks`` equal slices of ``items``."""
    return _timed_map(run, items, chunks)[0]


def _timed_map(run: Callable[[Sequence[Any]], Any], items: Sequence[Any],
               chunks: int = 3) -> tuple[float, list[Any]]:
    """(median seconds per item over ``chunks`` slices, concatenated outputs of ``run``)."""
    size = max(1, math.ceil(len(items) / chunks))
    times, out = [], []
    for i in range(chunks):
        part = items[i * size:(i + 1) * size]
        if not part:
            continue
        start = time.perf_counter()
        result = run(part)
        times.append((time.perf_counter() - start) / len(part))
        if isinstance(result, list):
            out.extend(result)
    return statistics.median(times), out


def _ours(name: str, d: int, eps: float, values: npt.NDArray[np.int64], trials: int,
          counts: npt.NDArray[np.int64]) -> PeerRow:
    m = mechanism(name, epsilon=eps, domain_size=d)
    n = len(values)
    sim_s = median_seconds(lambda: tallies(m, values, seed=1), repeats=3)
    calls = 200 if name == "oue" else 2000
    dev_s = median_seconds(lambda: [m.randomize(int(v)) for v in values[:calls]], repeats=3)
    t, _ = tallies(m, values, seed=2)
    agg_s = median_seconds(lambda: estimate(m, t, n), repeats=5)
    sq = []
    for trial in range(trials):
        tt, _ = tallies(m, values, seed=100 + trial)
        e = estimate(m, tt, n)
        sq.append(float(((e.value * n - counts) ** 2).sum()))
    theory = float(exact_count_variance(m, n, counts).sum())
    return PeerRow(name, "ours", n / sim_s, dev_s / calls * 1e6, agg_s, "measured",
                   statistics.mean(sq) / theory, f"{trials} trials")


def _theirs(name: str, d: int, eps: float, values: npt.NDArray[np.int64],
            counts: npt.NDArray[np.int64], olh_subset: int, fast_k: int) -> PeerRow:
    from pure_ldp.frequency_oracles.direct_encoding import DEClient, DEServer
    from pure_ldp.frequency_oracles.local_hashing import (
        FastLHClient,
        FastLHServer,
        LHClient,
        LHServer,
    )
    from pure_ldp.frequency_oracles.unary_encoding import UEClient, UEServer

    random.seed(3)
    np.random.seed(3)

    def ident(x: int) -> int:
        return x

    n = len(values)
    data = [int(v) for v in values]
    note = "measured"
    if name == "grr":
        client: Any = DEClient(eps, d, index_mapper=ident)
        server: Any = DEServer(eps, d, index_mapper=ident)
        e = math.exp(eps)
        p, q = e / (e + d - 1), 1 / (e + d - 1)
        label = "pure-LDP DE"
    elif name == "oue":
        client = UEClient(eps, d, use_oue=True, index_mapper=ident)
        server = UEServer(eps, d, use_oue=True, index_mapper=ident)
        p, q = 0.5, 1 / (math.exp(eps) + 1)
        label = "pure-LDP UE (OUE)"
    elif name == "olh":
        client = LHClient(eps, d, use_olh=True, index_mapper=ident)
        server = LHServer(eps, d, use_olh=True, index_mapper=ident)
        e, g = math.exp(eps), client.g
        p, q = e / (e + g - 1), 1 / g
        label = f"pure-LDP LH (OLH, g={g})"
    else:
        client = FastLHClient(eps, d, fast_k, use_olh=True, index_mapper=ident)
        build = time.perf_counter()
        server = FastLHServer(eps, d, fast_k, use_olh=True, index_mapper=ident)
        note = f"+ {time.perf_counter() - build:.1f} s once for the k x d hash matrix"
        e, g = math.exp(eps), client.g
        p, q = e / (e + g - 1), 1 / g
        label = f"pure-LDP FastLH (k={fast_k}, g={g})"
    if name == "olh":
        encode_item = _median_per_item(
            lambda part: [client.privatise(x) for x in part], data[: min(n, 30_000)]
        )
        # d xxhash calls per report: time chunks, extrapolate per report to n.
        sample = [client.privatise(x) for x in data[:600]]
        probe = LHServer(eps, d, use_olh=True, index_mapper=ident)
        per_report = _median_per_item(probe.aggregate_all, sample)
        sub = data[:olh_subset]
        reports = [client.privatise(x) for x in sub]
        server.aggregate_all(reports)
        start = time.perf_counter()
        est = np.asarray(server.estimate_all(range(d), suppress_warnings=True))
        finish = time.perf_counter() - start
        agg_s = per_report * n + finish
        note = f"extrapolated: {per_report * 1e6:,.0f} us/report x n (chunks of 200)"
        sub_counts = np.bincount(np.asarray(sub), minlength=d)
        mse = float(((est - sub_counts) ** 2).sum())
        return PeerRow(name, label, 1 / encode_item, None, agg_s, note,
                       mse / theory_sum(p, q, len(sub), sub_counts),
                       f"1 trial on the first {len(sub):,} reports")
    encode_item, reports = _timed_map(lambda part: [client.privatise(x) for x in part], data)
    start = time.perf_counter()
    server.aggregate_all(reports)
    est = np.asarray(server.estimate_all(range(d), suppress_warnings=True))
    agg_s = time.perf_counter() - start
    mse = float(((est - counts) ** 2).sum())
    return PeerRow(name if name != "fast_olh" else "olh", label, 1 / encode_item, None, agg_s,
                   note, mse / theory_sum(p, q, n, counts), "1 trial")


def _ratio(x: float) -> str:
    """1.23x, 12.3x, 1,234x."""
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x" if x < 100 else f"{x:,.0f}x"


def section(quick: bool = False) -> str:
    """The peers tables (Markdown), or a clear skip message."""
    why = available()
    title = header("Peers: ours vs pure-LDP 1.2.0")
    if why is not None:
        return (title + "\nSKIPPED: pure-ldp is not importable "
                f"({why}); install it with `pip install -e '.[peers]'`.\n")
    d, eps = 1024, 1.0
    n = 10_000 if quick else 100_000
    trials = 3 if quick else 10
    olh_subset = 1_000 if quick else 5_000
    fast_k = 200 if quick else 1000
    values = zipf_data(d, n)
    counts = np.bincount(values, minlength=d)
    rows: list[PeerRow] = []
    for name in ("grr", "oue", "olh"):
        rows.append(_ours(name, d, eps, values, trials, counts))
        rows.append(_theirs(name, d, eps, values, counts, olh_subset, fast_k))
    rows.append(_theirs("fast_olh", d, eps, values, counts, olh_subset, fast_k))
    ours = {r.mechanism: r for r in rows if r.implementation == "ours"}
    out_rows = []
    for r in rows:
        mine = ours[r.mechanism]
        enc_ratio = "" if r is mine else _ratio(mine.encode_per_s / r.encode_per_s)
        agg_ratio = "" if r is mine else _ratio(r.aggregate_s / mine.aggregate_s)
        out_rows.append((
            r.mechanism, r.implementation, f"{r.encode_per_s / 1e6:.3f}M",
            "" if r.device_us is None else f"{r.device_us:.1f}", enc_ratio,
            f"{r.aggregate_s * 1e3:,.1f}", agg_ratio, r.aggregate_note,
            f"{r.mse_ratio:.2f}", r.mse_note,
        ))
    olh_theirs = next(r for r in rows if r.implementation.startswith("pure-LDP LH"))
    enc_min = min(ours[r.mechanism].encode_per_s / r.encode_per_s
                  for r in rows if r.implementation != "ours")
    agg_olh = olh_theirs.aggregate_s / ours["olh"].aggregate_s
    ours_ok = all(0.9 <= r.mse_ratio <= 1.1 for r in ours.values())
    theirs_out = [r.implementation for r in rows
                  if r.implementation != "ours" and not 0.9 <= r.mse_ratio <= 1.1]
    goals = [
        (f"OLH aggregation >= 1000x faster than pure-LDP at d = {d}, n = {n:,}",
         _ratio(agg_olh), "met" if agg_olh >= 1000 else "missed"),
        ("encode >= 20x faster (simulation path vs their privatise loop), every row",
         f"min {_ratio(enc_min)}", "met" if enc_min >= 20 else "missed"),
        ("our MSE/theory within [0.9, 1.1]",
         ", ".join(f"{k} {v.mse_ratio:.2f}" for k, v in ours.items()),
         "met" if ours_ok else "missed"),
        ("theirs outside [0.9, 1.1]", ", ".join(theirs_out) or "none", ""),
    ]
    return "\n".join([
        title,
        f"Zipf({ZIPF_S}) over d = {d}, n = {n:,}, epsilon = {eps}.  Encode: reports/s "
        "(ours = vectorised simulation incl. tallying; theirs = client.privatise loop); "
        "device us = our m.randomize with the OS CSPRNG.  Aggregation: ours = estimate() "
        "with intervals on the tally vector; theirs = aggregate_all + estimate_all.  "
        "MSE/theory: squared error of the counts summed over the domain, over the exact "
        "variance of that implementation's own channel (theirs: q* = 1/g for LH).\n",
        table(("mechanism", "implementation", "encode reports/s", "device us/report",
               "ours/theirs encode", "aggregation ms", "theirs/ours aggregation",
               "aggregation timing", "MSE/theory", "MSE over"), out_rows),
        "",
        table(("goal", "measured", "verdict"), goals),
    ]) + "\n"


def main() -> None:
    """Print the peers section."""
    ap = argparse.ArgumentParser(description="peer comparison")
    ap.add_argument("--quick", action="store_true")
    print(section(ap.parse_args().quick))


if __name__ == "__main__":
    main()
