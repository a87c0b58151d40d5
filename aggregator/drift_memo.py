"""The drift test of two-level GRR, OLH and Hadamard: a memoised population as the null.

A two-level device draws its permanent response u once (``ldp_core.memo``)
and every report is a fresh instantaneous randomisation of u.  So across
epochs the same population re-randomises the same permanent responses:
given the permanent histogram U (how many devices hold each u), the epochs
are independent and identically distributed, and the permanent level's noise
is the same in every epoch.  It cancels in the difference latest - earlier;
only the instantaneous noise is left.  This is the null simulated here
(``memoised_drift``):

1. The instantaneous channel of the three designs has one shape: with
   probability lam the report is a uniform one of the counters that carry u
   (GRR, Hadamard: the counter u itself; OLH: (s, h_s(u)) for a uniform seed
   s), else a uniform counter (``InstantChannel``).
2. The permanent law pi is estimated from the pooled earlier epochs by
   inverting that channel (unbiased, least squares for OLH), clipped into
   [0, 1] and renormalised.
3. B pairs (latest*, earlier*) are drawn from populations of n_latest and
   n_earlier devices holding the permanent responses in proportions pi
   (largest remainders), each report drawn through the instantaneous channel
   (OLH's earlier*: one multinomial of the composed law, which errs on the
   safe side by the spread below over the h earlier epochs: nothing
   measurable, at half the cost of placing ~10^5 kept reports per draw);
   the weighted likelihood-ratio statistic of ``aggregator.drift`` (MGA fakes
   of v on the wire: uniform over the counters supporting v) is recomputed on
   each, and the latest epoch is flagged past the r-th largest simulated
   maximum, r = alpha (B + 1), as ``drift.calibrated_drift``.

Why not the composed channel (p*, q*) with independent epochs (the one-level
simulation, Multinomial(n, P0) per epoch)?  Per counter and report, that law's
variance is the instantaneous variance plus the spread of P[c | u] across
devices; under the memoised null the second term is the same in every epoch
and cancels.  The composed simulation is on the safe side for a stable
population, by that term: at d = 32, eps = 1, eps_inf = 4 it adds 29% of
variance on Hadamard (k = 0.48), ~1% on GRR, nothing measurable on OLH.  The
memoised null is exact given U, so it spends the whole budget: on Hadamard
10% of honest epochs flagged at a 10-11% budget (composed: 3.3%) and nearly
three times the detections at 2% fakes (docs/poisoning.md, "Two-level forms").  What it
assumes, like every drift test here: the devices of the latest epoch are
those of the earlier ones.  A population that churns brings permanent-level
noise back (a new device is a new draw of u) and raises false alarms; the
composed simulation has the same weakness (it too treats the pooled earlier
epochs as independent reports).

>>> import numpy as np
>>> from ldp_core import longitudinal
>>> m = longitudinal("hadamard", epsilon=1.0, epsilon_inf=4.0, domain_size=4)
>>> c = instant_channel(m)
>>> round(c.lam, 3), c.places.shape           # kept with 0.479, else uniform over K = 8
(0.479, (8, 1))
>>> law = m.permanent.output_distribution(2) @ c.matrix()
>>> bool(np.allclose(law, m.output_distribution(2)))   # permanent, then instantaneous
True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from aggregator._drift_likelihood import mga_laws, weighted_z
from aggregator._drift_monte_carlo import (
    MC_MAX_DRAWS,
    MC_MAX_WORK,
    Drift,
    Tally,
    _monte_carlo,
    _seed,
)
from ldp_core import Mechanism
from ldp_core._rng import WORD
from ldp_core.mechanisms.grr import LongitudinalGRR
from ldp_core.mechanisms.hadamard import LongitudinalHadamard
from ldp_core.mechanisms.olh_memo import LongitudinalOLH

__all__ = ["InstantChannel", "instant_channel", "memoised_drift", "permanent_law"]

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class InstantChannel:
    """P[counter c | permanent u] = lam / L [c in places[u]] + (1 - lam) / C.

    ``places[u]``: the L counters that carry u (each equally likely); C counters.
    """

    lam: float
    places: Ints
    counters: int

    def matrix(self) -> Floats:
        """Permanent responses x counters: the law of one report given u."""
        rows, width = self.places.shape
        out = np.full((rows, self.counters), (1.0 - self.lam) / self.counters)
        for j in range(width):
            out[np.arange(rows), self.places[:, j]] += self.lam / width
        return out


@lru_cache(maxsize=16)
def instant_channel(m: Mechanism) -> InstantChannel | None:
    """The instantaneous channel of two-level GRR, OLH or Hadamard; None for others.

    GRR keeps u with P2 = keep / 2**32, else a uniform other of d: lam = P2 - q2,
    q2 = (1 - P2)/(d - 1).  Hadamard keeps u with k, else a uniform output of K:
    lam = k.  OLH: a uniform seed s, then h_s(u) kept with P2, else a uniform other
    of g buckets: lam = P2 - q2 over the places (s, h_s(u)).
    """
    if isinstance(m, LongitudinalGRR):
        p2 = m.keep / WORD
        lam = p2 - (1 - p2) / (m.domain_size - 1)
        return InstantChannel(lam, np.arange(m.domain_size)[:, None], m.num_counters)
    if isinstance(m, LongitudinalHadamard):
        return InstantChannel(m.keep / WORD, np.arange(m.width)[:, None], m.num_counters)
    if isinstance(m, LongitudinalOLH):
        p2 = m.keep / WORD
        lam = p2 - (1 - p2) / (m.g - 1)
        seeds = np.arange(m.num_seeds)
        places = np.array(
            [seeds * m.g + m.family.buckets_of(u) for u in range(m.domain_size)], dtype=np.int64
        )
        return InstantChannel(lam, places, m.num_counters)
    return None


@lru_cache(maxsize=16)
def _inverse(m: Mechanism) -> Floats:
    """counters x permanent responses: pi = x @ this solves x = pi P (P: places matrix)."""
    channel = instant_channel(m)
    assert channel is not None
    place = (channel.matrix() - (1 - channel.lam) / channel.counters) / channel.lam
    return np.asarray(np.linalg.pinv(place), dtype=np.float64)


def permanent_law(m: Mechanism, tally: npt.NDArray[Any], n: int) -> Floats:
    """pi: the estimated share of devices holding each permanent response, from a tally
    of n reports (unbiased before clipping into [0, 1] and renormalising)."""
    channel = instant_channel(m)
    if channel is None:
        raise ValueError(f"{m.name!r} (levels={m.levels}) has no instantaneous channel here")
    mean = np.asarray(tally, dtype=np.float64) / n
    x = (mean - (1 - channel.lam) / channel.counters) / channel.lam
    pi = np.clip(x @ _inverse(m), 0.0, None)
    total = pi.sum()
    return np.asarray(pi / total if total > 0 else np.full(len(pi), 1 / len(pi)), dtype=np.float64)


def _devices(pi: Floats, n: int) -> Ints:
    """n devices split in proportions pi (largest remainders)."""
    raw = pi * n
    counts = np.floor(raw).astype(np.int64)
    counts[np.argsort(counts - raw, kind="stable")[: n - int(counts.sum())]] += 1
    return counts


def _draw(
    channel: InstantChannel, devices: Ints, size: int, gen: np.random.Generator, exact: bool = True
) -> Floats:
    """``size`` tallies of one epoch of the population ``devices`` (count per u): per u,
    Bin(U_u, lam) reports kept on a uniform one of u's places, the rest uniform.
    ``exact=False``: one multinomial of the composed law (the population's mixture),
    more variable by the spread of P[c | u] across devices."""
    rows, width = channel.places.shape
    n = int(devices.sum())
    if not exact:
        law = devices @ channel.matrix() / n
        return gen.multinomial(n, law / law.sum(), size=size).astype(np.float64)
    kept = gen.binomial(devices, channel.lam, size=(size, rows))
    out = gen.multinomial(
        n - kept.sum(axis=1), np.full(channel.counters, 1.0 / channel.counters)
    ).astype(np.float64)
    if width == 1:
        out[:, channel.places[:, 0]] += kept  # distinct places: no repeated index
        return out
    flat_places = (np.arange(size)[:, None] * channel.counters).repeat(rows * width, axis=1)
    if channel.lam * n > 4 * rows * width:  # a multinomial over u's places per (draw, u)
        spread = gen.multinomial(kept, np.full(width, 1.0 / width)).reshape(size, -1)
        flat = flat_places + channel.places.ravel()[None, :]
        return out + np.bincount(
            flat.ravel(), weights=spread.ravel(), minlength=size * channel.counters
        ).reshape(size, -1)
    owner = np.repeat(np.arange(size * rows), kept.ravel())  # one place per kept report
    place = channel.places[owner % rows, gen.integers(0, width, size=len(owner))]
    flat = (owner // rows) * channel.counters + place
    return out + np.bincount(flat, minlength=size * channel.counters).reshape(size, -1)


def memoised_drift(
    m: Mechanism, latest: Tally, earlier: Tally, alpha_rise: float, alpha_fall: float, draws: int
) -> Drift | None:
    """The weighted drift of a two-level GRR, OLH or Hadamard metric with thresholds from
    a memoised population (module docstring); None for other mechanisms or past the
    cost caps of ``aggregator.drift`` (then the caller falls back).

    >>> from ldp_core import longitudinal
    >>> from aggregator.attacks import mga_tallies
    >>> m = longitudinal("grr", epsilon=1.0, epsilon_inf=4.0, domain_size=4)
    >>> gen = np.random.default_rng(3)
    >>> devices = m.permanent.sample(np.repeat(np.arange(4), 500), gen)
    >>> def epoch(times):
    ...     reports = m._instant_batch(np.tile(devices, times), gen)
    ...     return np.bincount(reports, minlength=4), 2000 * times
    >>> before, (t, n) = epoch(10), epoch(1)
    >>> d = memoised_drift(m, (t, n), before, 0.009, 0.0005, 1999)
    >>> d.method, bool(d.z.max() < d.rise_threshold)
    ('likelihood ratio, memoised Monte Carlo (1999 draws)', True)
    >>> d = memoised_drift(m, (t + mga_tallies(m, (3,), 60, gen), n + 60), before,
    ...                    0.009, 0.0005, 1999)
    >>> int(d.z.argmax()), bool(d.z[3] > d.rise_threshold)
    (3, True)
    """
    channel = instant_channel(m)
    if channel is None or latest[1] <= 0 or earlier[1] <= 0:
        return None
    rows, width = channel.places.shape
    if (
        draws * m.num_counters * m.domain_size > MC_MAX_WORK
        or draws * max(m.num_counters, rows * width) > MC_MAX_DRAWS
    ):
        return None  # before mga_laws: over the caps its table would serve nothing
    laws = mga_laws(m)
    if laws is None:
        return None
    now_t = np.asarray(latest[0], dtype=np.int64)
    before_t = np.asarray(earlier[0], dtype=np.int64)
    n_now, n_before = int(latest[1]), int(earlier[1])
    pi = permanent_law(m, before_t, n_before)
    now_devices, before_devices = _devices(pi, n_now), _devices(pi, n_before)
    gen = np.random.default_rng(_seed(now_t, before_t, np.array([n_now, n_before, 2])))

    def pair(size: int) -> tuple[Floats, Floats]:
        return (
            _draw(channel, now_devices, size, gen),
            _draw(channel, before_devices, size, gen, exact=width == 1),
        )

    def stat(now: Floats, before: Floats) -> Floats:
        return weighted_z(laws, now, n_now, before, n_before)

    z = stat(now_t[None, :].astype(np.float64), before_t[None, :].astype(np.float64))[0]
    return _monte_carlo(
        z,
        pair,
        stat,
        alpha_rise,
        alpha_fall,
        draws,
        f"likelihood ratio, memoised Monte Carlo ({draws} draws)",
    )
