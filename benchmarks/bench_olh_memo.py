"""The variance price of a memoised OLH with no per-device constant on the wire.

Rare-value variance x n (``unit_variance``: Var[f_hat] * n as f -> 0, exact from the
integer thresholds) of one report at eps_1 = 1, for:

- new olh: permanent GRR over d at eps_inf, then a fresh OLH report of it at
  eps_2 = eps_1 (``LongitudinalOLH``; g chosen for the lowest variance);
- eps_2 solved up: the same design with eps_2 raised until the composed channel
  costs eps_1 (floats, best g): lower variance, but a report then pins the
  permanent value and links (pair test 0.99 at d = 1024, eps_inf = 2);
- old olh: memoised (seed, bucket), the seed sent unchanged every epoch; its
  one-report channel was a one-level OLH at eps_1 (pinned at rel 1e-6 by the
  old test_one_report_costs_no_accuracy), so its figure is OLH(eps_1)'s;
- two-level grr and oue (their one-report channels, same eps_1 and eps_inf).

A window of T epochs adds (T - 1) x the permanent level's variance to every
two-level mechanism (``aggregator.estimate``); the last column is that term
for the new olh (its permanent level is GRR over d, the same as two-level grr's).

    .venv/bin/python benchmarks/bench_olh_memo.py
"""

from __future__ import annotations

import math

from ldp_core import longitudinal, mechanism
from ldp_core.mechanisms._projective import family, is_prime, smallest_bucket

DOMAINS = (16, 1024)
LIFETIMES = (2.0, 4.0, 8.0)
EPSILON = 1.0


def solved_up_variance(epsilon: float, epsilon_inf: float, d: int) -> tuple[float, int]:
    """(variance, g) of the design with eps_2 solved up to a composed eps_1 (floats)."""
    e = math.exp(epsilon_inf)
    p1 = e / (e + d - 1)
    q1 = (1 - p1) / (d - 1)
    best = (math.inf, 0)
    top = next(n for n in range(d, 2 * d + 3) if is_prime(n))
    for g in (g for g in range(2, top + 1) if is_prime(g)):
        c, n = float(family(g, d)[2]), smallest_bucket(g, d)
        scale = math.exp(epsilon)

        def gap(p2: float, g: int = g, n: int = n, scale: float = scale) -> float:
            q2 = (1 - p2) / (g - 1)
            spread = d * q2 + n * (p2 - q2)
            return q1 * spread + (p1 - q1) * p2 - scale * (q1 * spread + (p1 - q1) * q2)

        low, high = gap(0.0), gap(1.0)
        p2 = 1.0 if high <= 0 else low / (low - high)
        rest = c * p2 + (1 - c) * (1 - p2) / (g - 1)
        p, q = p1 * p2 + (1 - p1) * rest, q1 * p2 + (1 - q1) * rest
        best = min(best, (q * (1 - q) / (p - q) ** 2, g))
    return best


def table() -> str:
    rows = [
        f"rare-value variance x n of one report, eps_1 = {EPSILON:g}",
        "",
        "| d | eps_inf | new olh (g) | new / old | eps_2 solved up (g) | old olh "
        "| two-level grr | two-level oue | new olh permanent term per extra epoch |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for d in DOMAINS:
        old = mechanism("olh", epsilon=EPSILON, domain_size=d).unit_variance()
        for eps_inf in LIFETIMES:
            new = longitudinal("olh", epsilon=EPSILON, epsilon_inf=eps_inf, domain_size=d)
            grr = longitudinal("grr", epsilon=EPSILON, epsilon_inf=eps_inf, domain_size=d)
            oue = longitudinal("oue", epsilon=EPSILON, epsilon_inf=eps_inf, domain_size=d)
            up, up_g = solved_up_variance(EPSILON, eps_inf, d)
            permanent = new.permanent.unit_variance()  # type: ignore[attr-defined]
            rows.append(
                f"| {d} | {eps_inf:g} | {new.unit_variance():.4g} ({new.g}) "  # type: ignore[attr-defined]
                f"| {new.unit_variance() / old:.3g}x | {up:.4g} ({up_g}) | {old:.4g} "
                f"| {grr.unit_variance():.4g} | {oue.unit_variance():.4g} | {permanent:.4g} |"
            )
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
