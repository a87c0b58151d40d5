"""Linkability of memoised reports: can an observer tell two epochs' reports of one device?

For every registered two-level mechanism, N devices (fresh secrets, values
uniform over the domain; for strings, random a-z strings of 1 to 6 letters)
each send one memoised report in each of two epochs.
An observer who sees both epochs' reports, but no identifier, scores pairs with
the best simple rule for the mechanism's report shape (equal report for one
output; the number of shared set bits for the unary encodings; for memoised
strings, the same (level, seed) cohort then the same bucket; for OLH, whose
reports carry a fresh seed, the exact likelihood ratio of "one permanent u
behind both reports" against "two independent devices", which is the most
powerful test of a pair when values are uniform), thresholded at the value
that separates best on a calibration half, and is measured two ways:

- pair test: balanced accuracy of "same device?" over same-device pairs and as
  many random different-device pairs (0.5 = no better than a coin);
- re-identification: for each epoch-2 report, the chance that the best-scoring
  epoch-1 report is its own device's (ties broken uniformly), against 1/N.

    .venv/bin/python benchmarks/bench_linkability.py [--devices 2000] [--domain 1024]
"""

from __future__ import annotations

import argparse
import functools
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from ldp_core import Memoisable
from ldp_core.registry import classes, longitudinal

Score = Callable[[Any, Any], float]


def olh_likelihood_ratio(m: Any) -> Score:
    """P[r1, r2 | one device] / (P[r1] P[r2]) for two-level OLH, values uniform.

    u is uniform too (a GRR of a uniform value), and given u each report is
    (s, y) with y = h_s(u) kept with P2, else one of the other g - 1 buckets.
    With n_i values hashing to y_i under s_i and n_12 to both:
        sum_u P[r1|u] P[r2|u] ~ d q2^2 + q2 (p2 - q2)(n_1 + n_2) + (p2 - q2)^2 n_12,
        sum_u P[r_i|u] ~ d q2 + (p2 - q2) n_i.
    """
    d, g = m.domain_size, m.g
    p2 = float(m.instantaneous_keep)
    q2 = (1 - p2) / (g - 1)
    values = np.arange(d)

    @functools.cache
    def preimage(seed: int, y: int) -> Any:
        return m.family.hashes(np.full(d, seed), values) == y

    def score(a: Any, b: Any) -> float:
        one, two = preimage(*a), preimage(*b)
        n1, n2, n12 = int(one.sum()), int(two.sum()), int((one & two).sum())
        joint = d * q2**2 + q2 * (p2 - q2) * (n1 + n2) + (p2 - q2) ** 2 * n12
        return float(d * joint / ((d * q2 + (p2 - q2) * n1) * (d * q2 + (p2 - q2) * n2)))

    return score


def score_for(m: Any) -> Score:
    """The observer's similarity of two reports of mechanism ``m``."""
    if m.name in ("sue", "oue"):
        return lambda a, b: float(len(set(a) & set(b)))
    if m.name == "olh":
        return olh_likelihood_ratio(m)
    if m.kind == "string":  # (level, seed) is the device's cohort; the bucket breaks ties
        return lambda a, b: 2.0 * (a // m.g == b // m.g) + (a % m.g == b % m.g)
    return lambda a, b: float(a == b)


def reports(m: Any, devices: int, seed: int) -> tuple[list[Any], list[Any]]:
    rng = random.Random(seed)
    first, second = [], []
    for _ in range(devices):
        secret = rng.randbytes(32)
        if m.kind == "string":  # a random a-z string of 1 to 6 letters
            letters = "abcdefghijklmnopqrstuvwxyz"
            value = m.check_value("".join(rng.choices(letters, k=rng.randint(1, 6))))
        else:
            value = rng.random() if m.kind == "mean" else rng.randrange(m.domain_size)
            value = m.check_value(value * (m.hi - m.lo) + m.lo if m.kind == "mean" else value)
        first.append(m.randomize_memoised(value, secret, "link|ctx", rng))
        second.append(m.randomize_memoised(value, secret, "link|ctx", rng))
    return first, second


def pair_accuracy(score: Score, first: list[Any], second: list[Any], seed: int) -> float:
    """Balanced accuracy of the best threshold, chosen on one half, measured on the other."""
    rng = random.Random(seed)
    n = len(first)
    same = [score(first[i], second[i]) for i in range(n)]
    other = [score(first[i], second[(i + 1 + rng.randrange(n - 1)) % n]) for i in range(n)]
    half = n // 2

    def accuracy(t: float, lo: int, hi: int) -> float:
        tpr = sum(s >= t for s in same[lo:hi]) / (hi - lo)
        tnr = sum(s < t for s in other[lo:hi]) / (hi - lo)
        return (tpr + tnr) / 2

    thresholds = [*sorted(set(same[:half]) | set(other[:half])), float("inf")]
    best = max(thresholds, key=lambda t: accuracy(t, 0, half))
    return accuracy(best, half, n)


def reidentification(score: Score, first: list[Any], second: list[Any]) -> float:
    """P[the top-scoring epoch-1 report is the device's own], ties broken uniformly."""
    hits = 0.0
    for i, r in enumerate(second):
        scores = [score(a, r) for a in first]
        top = max(scores)
        ties = sum(s == top for s in scores)
        hits += (scores[i] == top) / ties
    return hits / len(second)


RULES = {"sue": "shared set bits >= t", "oue": "shared set bits >= t",
         "olh": "likelihood ratio of one u >= t",
         "prefix_olh": "same (level, seed), then same bucket"}


def table(devices: int, domain: int, reid_devices: int, only: str | None = None) -> str:
    rows = [
        f"two reports per device, eps_1 = 1, eps_inf = 2, d = {domain}, {devices} devices "
        f"(re-identification among {reid_devices})",
        "",
        "| mechanism | rule | pair test (0.5 = chance) | re-identification | chance |",
        "|---|---|---|---|---|",
    ]
    for cls in classes(levels=2):
        if only is not None and cls.name != only:
            continue
        m = longitudinal(cls.name, epsilon=1.0, epsilon_inf=2.0, domain_size=domain,
                         lo=0.0, hi=1.0)
        assert isinstance(m, Memoisable)
        first, second = reports(m, devices, seed=len(cls.name))
        score = score_for(m)
        rule = RULES.get(m.name, "same report")
        pair = pair_accuracy(score, first, second, seed=1)
        reid = reidentification(score, first[:reid_devices], second[:reid_devices])
        rows.append(f"| {m.name} | {rule} | {pair:.3f} | {reid:.4f} | {1 / reid_devices:.4f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=2000)
    parser.add_argument("--domain", type=int, default=1024)
    parser.add_argument("--reid-devices", type=int, default=500)
    parser.add_argument("--only", help="one mechanism's row (e.g. olh)")
    args = parser.parse_args()
    print(table(args.devices, args.domain, args.reid_devices, args.only))


if __name__ == "__main__":
    main()
