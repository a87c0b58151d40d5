"""The covariance the window variance assumes is the one the real samplers produce.

``aggregator.estimate`` bounds the variance of a window of a two-level metric
with Cov(X_t, X_s) = (p2 - q2)^2 pi (1 - pi): two reports of one device and one
value, X = [report supports u], pi = p1 (value u) or q1 (another value), or
pi = P[B' = 1 | x] for 1BitMean.  Here each device is the mechanism's own
memoised path, ``randomize_memoised(value, secret, context, rng)``, with a
fresh 32-byte secret per device and two epochs (two instantaneous draws of the
same HMAC_DRBG-derived permanent response).

Tolerance: the unbiased sample covariance of D i.i.d. pairs has variance
Var[(X_1 - mu)(X_2 - mu)] / D (to O(1/D^2)), computed exactly below from the
two-level law; the sample mean of X_1 has variance mu (1 - mu) / D.  Each of the
24 checks allows z_for(1e-6, 24) = 5.6 standard deviations, so the file
fails by chance with probability <= 1e-6.  Every expected covariance is above
2 tolerances (2 x 5.6 sd), so a sampler whose reports were independent given
the value (covariance 0, the model behind today's intervals) would fail.  OLH's
reports are fresh OLH draws of u at eps_2 = eps_1, so its covariance is small
(0.014 for the device's own value): it gets 45,000 devices to keep that margin;
for another value (pi = q1 = 0.045, covariance 0.0027) only the formula is
checked, independence could not be told apart there.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from ldp_core import Mechanism, longitudinal
from tests.aggregator.test_window_coverage import EPS, EPS_INF, HI, LO, two_level_law
from tests.stats import z_for

DEVICES = 20_000
#: Mechanisms whose covariance needs more devices to stand 2 tolerances above 0.
MORE_DEVICES = {"olh": 45_000}
CHECKS = 24  # 6 mechanisms x 2 laws x (covariance, mean)
Z = z_for(1e-6, CHECKS)
CONTEXT = "window.test/v1"


def _mechanisms() -> list[tuple[str, Mechanism]]:
    return [
        ("grr", longitudinal("grr", epsilon=EPS, epsilon_inf=EPS_INF, domain_size=4)),
        ("sue", longitudinal("sue", epsilon=EPS, epsilon_inf=EPS_INF, domain_size=16)),
        ("oue", longitudinal("oue", epsilon=EPS, epsilon_inf=EPS_INF, domain_size=16)),
        ("olh", longitudinal("olh", epsilon=EPS, epsilon_inf=EPS_INF, domain_size=16)),
        ("binary_rr", longitudinal("binary_rr", epsilon=EPS, epsilon_inf=EPS_INF)),
        ("one_bit_mean",
         longitudinal("one_bit_mean", epsilon=EPS, epsilon_inf=EPS_INF, lo=LO, hi=HI)),
    ]


def supports(m: Mechanism, report: object, u: int) -> int:
    """1 if ``report`` supports value ``u`` (counter 1 for binary and mean)."""
    if m.kind != "frequency":
        return int(report == 1)
    one_hot = [0] * m.num_counters
    for c in m.counters(report):  # type: ignore[arg-type]
        one_hot[c] += 1
    return int(m.support_counts(one_hot)[u] > 0)


def pair_law(pi: Fraction, p2: Fraction, q2: Fraction) -> tuple[float, float, float]:
    """(mu, covariance, Var[(X1 - mu)(X2 - mu)]) of two reports of one device."""
    mu = pi * p2 + (1 - pi) * q2
    cov = (p2 - q2) ** 2 * pi * (1 - pi)

    def second(rho: Fraction) -> Fraction:  # E[(X - mu)^2 | B']
        return rho * (1 - mu) ** 2 + (1 - rho) * mu**2

    fourth = pi * second(p2) ** 2 + (1 - pi) * second(q2) ** 2
    return float(mu), float(cov), float(fourth - cov**2)


def draw_pairs(m: Mechanism, value: float | int, targets: list[int],
               seed: int, devices: int = DEVICES) -> dict[int, np.ndarray]:
    """Per target u: ``devices`` rows of (X_epoch1, X_epoch2) from the memoised device path."""
    rng = random.Random(seed)
    out = {u: np.zeros((devices, 2), dtype=np.int8) for u in targets}
    for i in range(devices):
        secret = rng.randbytes(32)  # a fresh device
        for epoch in range(2):
            report = m.randomize_memoised(value, secret, CONTEXT, rng=rng)  # type: ignore[attr-defined]
            for u in targets:
                out[u][i, epoch] = supports(m, report, u)
    return out


def _cases(name: str, m: Mechanism) -> list[tuple[float | int, int, Fraction]]:
    """(device value, checked value u, pi): both laws of B' for each mechanism."""
    p1, q1 = m.permanent.channel  # type: ignore[attr-defined]
    if m.kind == "frequency":
        return [(0, 0, p1), (0, 1, q1)]
    if m.kind == "binary":
        return [(1, 1, p1), (0, 1, q1)]
    base = m.permanent  # type: ignore[attr-defined]
    return [(HI, 1, p1), (2.5, 1, Fraction(base.one_probability(2.5)))]


@pytest.mark.parametrize("name", [name for name, _ in _mechanisms()])
def test_two_reports_of_one_device_covary_as_the_bound_assumes(name: str) -> None:
    m = dict(_mechanisms())[name]
    devices = MORE_DEVICES.get(name, DEVICES)
    p2, q2 = two_level_law(m)
    cases = _cases(name, m)
    drawn: dict[float | int, dict[int, np.ndarray]] = {}
    for value in {v for v, _, _ in cases}:
        targets = sorted({u for v, u, _ in cases if v == value})
        drawn[value] = draw_pairs(m, value, targets, seed=len(name) * 31 + int(value),
                                  devices=devices)
    for value, u, pi in cases:
        pairs = drawn[value][u].astype(np.float64)
        mu, cov, var_product = pair_law(pi, p2, q2)
        tolerance = Z * math.sqrt(var_product / devices)
        if not (name == "olh" and u != value):
            assert cov > 2 * tolerance  # independence (covariance 0) would fail
        got = float(np.cov(pairs[:, 0], pairs[:, 1])[0, 1])
        assert abs(got - cov) < tolerance, (name, value, u, got, cov, tolerance)
        mean_tolerance = Z * math.sqrt(mu * (1 - mu) / devices)
        assert abs(pairs[:, 0].mean() - mu) < mean_tolerance, (name, value, u)
