"""Selective intervals (``prefix_selection``): coverage given the selection X > c."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldp_core.mechanisms.prefix_selection import plain_interval, selective_interval


@pytest.mark.parametrize(("w", "draws"), [(1.0, 4000), (0.7, 1500)])
def test_selective_intervals_cover_given_the_selection_and_plain_ones_do_not(
    w: float, draws: int
) -> None:
    """mu one sd below the cut c; X ~ N(mu, s_x^2) kept only when X > c, T = w X + R
    with R ~ N((1 - w) mu, s_r^2).  Given the selection, the plain interval
    T -/+ 1.96 se covers mu about 0.84 of the time (w = 1: (Phi(1.96) - Phi(1)) /
    (1 - Phi(1))); the selective one 0.95 by construction.  Over ``draws`` kept
    draws, |coverage - 0.95| <= 5 sd of a binomial (FPR < 1e-6); the plain one
    must fall below 0.95 - 5 sd (0.847 and 0.863 on this seed: over 20 sd away).
    """
    rng = np.random.default_rng(3)
    s_x, c = 0.002, 0.01
    s_r = 0.0015 if w < 1 else 0.0
    mu = c - s_x
    se = math.sqrt((w * s_x) ** 2 + s_r**2)
    selective = plain = kept = 0
    while kept < draws:
        x = rng.normal(mu, s_x)
        if x <= c:
            continue
        kept += 1
        t = w * x + (1 - w) * mu + (rng.normal(0.0, s_r) if s_r else 0.0)
        lo, hi = selective_interval(t, w, s_x, s_r, c, 0.95)
        selective += lo <= mu <= hi
        p_lo, p_hi = plain_interval(t, se, 0.95)
        plain += p_lo <= mu <= p_hi
    sd = math.sqrt(0.95 * 0.05 / draws)
    assert abs(selective / draws - 0.95) <= 5 * sd, selective / draws
    assert plain / draws < 0.95 - 5 * sd, plain / draws


def test_far_above_the_cut_it_is_the_plain_interval() -> None:
    assert selective_interval(0.1, 0.8, 0.002, 0.001, 0.01, 0.95) == plain_interval(
        0.1, math.sqrt(0.0016**2 + 0.001**2), 0.95
    )
