"""Drift of the latest epoch against the earlier ones, with thresholds that hold their
false-alarm rate by construction.

Two statistics, per value v of the k estimated shares:

- ``share_z`` (every mechanism): z_v = (f_latest - f_earlier) /
  sqrt(se_latest^2 + se_earlier^2).  Where counters are independent bits
  given the population (unary encodings, one-bit designs, CMS), thresholds of
  its maximum from a Monte Carlo test through those bits (``simulated_drift``);
  elsewhere, or past the cost caps, from the normal law with a Bonferroni
  correction over the k values (``normal_drift``).
- ``weighted_z`` (one-level frequency mechanisms whose report increments one
  counter: GRR, OLH, Hadamard, HCMS): the likelihood-ratio statistic for "MGA
  fakes of v were added".  The tally is the histogram of outputs; an MGA fake
  of v is uniform over the counters that support v (law F_v); the honest output
  law P0 is estimated from the earlier epochs.  Locally (few fakes) the most
  powerful statistic weighs each counter by F_v / P0 (Neyman-Pearson), and
  z_v = (N_latest / n_latest - N_earlier / n_earlier) . (F_v / P0) / sd.
  Where P0 is far from uniform (Hadamard over a skewed population) it sees
  more than the support count; for GRR it is the support count.

``calibrated_drift`` does not trust the normal law for the weighted statistic
(a weighted sum over small cells has a heavier tail: 1.27% of false alarms at a
nominal 0.9% on OLH and HCMS).  It is a Monte Carlo test through the exact
channel: B pairs (earlier*, latest*) are drawn from Multinomial(n, P0_hat) at the
window's own n (P0_hat: the earlier epochs' output law), the whole statistic is
recomputed on each (P0 re-estimated from earlier*, as on real data), and the
latest epoch is flagged when max_v z_v exceeds the r-th largest simulated maximum,
r = alpha (B + 1): the Monte Carlo p-value (1 + #{T* >= T}) / (B + 1) is <= alpha.
Under the simulated null the level is exactly r / (B + 1) (Barnard 1963; Dwass
1957), whatever the tail of the statistic and for the k values together (no
Bonferroni).  Two approximations remain, both measured in docs/poisoning.md: P0_hat
stands for P0 (the statistic is nearly pivotal), and a fixed population's tally
is a sum of one multinomial per value, slightly less variable than one
multinomial of the mixture (so the test errs on the safe side).

Two-level forms.  A device memoises its permanent response, so every epoch
re-randomises the same permanent responses: given them, epochs are i.i.d. and
the permanent level's noise cancels in latest - earlier.  The null simulated is
that memoised population (permanent responses in the proportions estimated from
the earlier epochs by inverting the instantaneous channel, re-randomised in each
simulated epoch): for GRR, OLH and Hadamard with the weighted statistic
(``aggregator.drift_memo.memoised_drift``), for SUE, OUE and binary RR with bits
kept with k (``_bit_law``).  Exact given the population.  The composed channel
(p*, q*) with independent epochs adds the spread of P[c | u] across devices: on
the safe side, but on Hadamard (d = 32, eps = 1, eps_inf = 4) it flagged 3.3% of
honest epochs at a 10-11% budget and saw a third of the memoised test's attacks
at 2% fakes (docs/poisoning.md).  Both assume the latest epoch's devices are the earlier ones'.

>>> import numpy as np
>>> from ldp_core import mechanism
>>> from ldp_core.simulate import tallies
>>> from aggregator.attacks import mga_tallies
>>> m = mechanism("hadamard", epsilon=1.0, domain_size=4)
>>> before = tallies(m, [0, 1, 2, 3] * 5000, seed=1)
>>> t, n = tallies(m, [0, 1, 2, 3] * 500, seed=2)
>>> d = calibrated_drift(m, (t, n), before, 0.009, 0.0005, 1999)
>>> d.method, bool(d.z.max() < d.rise_threshold)
('likelihood ratio, Monte Carlo (1999 draws)', True)
>>> fakes = mga_tallies(m, (3,), 200, np.random.default_rng(0))
>>> d = calibrated_drift(m, (t + fakes, n + 200), before, 0.009, 0.0005, 1999)
>>> int(d.z.argmax()), bool(d.z[3] > d.rise_threshold)
(3, True)
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any

import numpy as np

from aggregator._drift_bits import bit_rows as bit_rows
from aggregator._drift_bits import simulated_drift
from aggregator._drift_likelihood import LR_MAX_CELLS as LR_MAX_CELLS
from aggregator._drift_likelihood import (
    calibrated_drift,
    fake_laws,
    likelihood_drift,
    mga_laws,
    support_rows,
    weighted_z,
)
from aggregator._drift_monte_carlo import CHUNK as CHUNK
from aggregator._drift_monte_carlo import MC_MAX_DRAWS as MC_MAX_DRAWS
from aggregator._drift_monte_carlo import MC_MAX_WORK, Drift
from aggregator._drift_monte_carlo import Floats as Floats
from aggregator._drift_monte_carlo import Tally as Tally

# The tests live in the private modules above; this module keeps their public names.
# ``X as X``: names importable from here before the split, though not in __all__.
__all__ = [
    "MC_MAX_WORK",
    "Drift",
    "calibrated_drift",
    "fake_laws",
    "likelihood_drift",
    "mga_laws",
    "normal_drift",
    "simulated_drift",
    "support_rows",
    "weighted_z",
]


def normal_drift(now: Any, before: Any, alpha_rise: float, alpha_fall: float) -> Drift:
    """The difference of shares (``aggregator.poisoning.Shares``) with Bonferroni normal
    thresholds: a rise above Phi^-1(1 - alpha_rise/k), a fall below
    -Phi^-1(1 - alpha_fall/k)."""
    z = (now.value - before.value) / np.sqrt(now.stderr**2 + before.stderr**2)
    k = len(z)
    normal = NormalDist()
    return Drift(
        z=np.asarray(z, dtype=np.float64),
        rise_threshold=-normal.inv_cdf(alpha_rise / k),
        fall_threshold=normal.inv_cdf(alpha_fall / k),
        method="difference of shares, normal (Bonferroni)",
    )
