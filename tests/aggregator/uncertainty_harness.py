"""Repeated populations: does every served uncertainty describe its number? (issue 40)

One replicate draws n users from a law, randomises their values through the
exact simulation (``ldp_core.simulate.tallies``: the same law as the devices'
path) and estimates with the served code.  Over R replicates, per cell and
target, it measures the interval's coverage, the served stderr against the
actual error's sd (``ratio`` = sd(error) / rms(stderr), over the replicates that
serve a stderr), and the bias.  The truth is the users' own statistic for
``target="reporters"`` and the law's for ``target="population"``.
tests/aggregator/test_uncertainty.py runs it small in ``make test``;
benchmarks/bench_uncertainty.py runs it at R >= 1000 for docs/numeric.md.

>>> LAWS["beta"].quantile(0.5).round(3)
np.float64(26.445)
>>> round(LAWS["beta"].mean, 4), round(float(LAWS["bimodal"].cdf(np.array([50.0]))[0]), 3)
(28.5714, 0.609)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from aggregator.distribution import DistributionEstimate, estimate_distribution
from aggregator.estimate import FrequencyEstimate, ScalarEstimate, estimate
from aggregator.quantiles import Bootstrap
from ldp_core import mechanism
from ldp_core.simulate import tallies

Floats = npt.NDArray[np.float64]
TARGETS = ("reporters", "population")
LO, HI = 0.0, 100.0
QUANTILES = (0.1, 0.5, 0.9, 0.99)
BUCKETS = ((0.0, 25.0), (25.0, 50.0), (50.0, 75.0), (90.0, 100.0))
#: A categorical law over 6 values (the frequency cells).
CATEGORIES = np.array([0.4, 0.25, 0.15, 0.1, 0.07, 0.03])


@dataclass(frozen=True)
class Law:
    """A law on [0, 100]: a sampler and its CDF (exact), read on a fine grid."""

    name: str
    draw: Callable[[np.random.Generator, int], Floats]
    cdf: Callable[[Floats], Floats]

    @cached_property
    def _table(self) -> tuple[Floats, Floats]:
        grid = np.linspace(LO, HI, 1_000_001)
        return grid, self.cdf(grid)

    def quantile(self, q: float) -> np.float64:
        grid, f = self._table
        return np.float64(np.interp(q, f, grid))

    @cached_property
    def mean(self) -> float:
        # E[X] = hi - integral of F over [lo, hi] (trapezoid on the fine grid).
        grid, f = self._table
        return float(HI - np.sum((f[1:] + f[:-1]) / 2 * np.diff(grid)))

    def share(self, a: float, b: float) -> float:
        fa, fb = self.cdf(np.array([a, b]))
        return float(fb - fa)


def _beta_cdf(x: Floats) -> Floats:
    u = np.clip(x / HI, 0.0, 1.0)   # Beta(2, 5): 1 - (1-u)^6 - 6u(1-u)^5
    out: Floats = 1 - (1 - u) ** 6 - 6 * u * (1 - u) ** 5
    return out


#: The bimodal law: 0.6 N(25, 6) + 0.4 N(70, 10), clipped into [0, 100].
MIX = ((0.6, 25.0, 6.0), (0.4, 70.0, 10.0))


def _mix_cdf(x: Floats) -> Floats:
    x = np.asarray(x, dtype=np.float64)
    f = sum(w * 0.5 * (1 + _erf((x - mu) / (sd * math.sqrt(2)))) for w, mu, sd in MIX)
    out: Floats = np.where(x >= HI, 1.0, np.where(x < LO, 0.0, np.asarray(f)))
    return out


def _erf(x: Floats) -> Floats:
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x), dtype=np.float64)


def _mix_draw(gen: np.random.Generator, n: int) -> Floats:
    first = gen.random(n) < MIX[0][0]
    x = np.where(first, gen.normal(MIX[0][1], MIX[0][2], n), gen.normal(MIX[1][1], MIX[1][2], n))
    return np.clip(x, LO, HI)


LAWS = {
    "beta": Law("beta", lambda g, n: g.beta(2, 5, n) * HI, _beta_cdf),
    "bimodal": Law("bimodal", _mix_draw, _mix_cdf),
}


@dataclass
class Cell:
    """The errors, stderrs (NaN: not served) and coverage of one statistic and target."""

    errors: list[float] = field(default_factory=list)
    stderrs: list[float] = field(default_factory=list)
    covered: list[bool] = field(default_factory=list)
    widths: list[float] = field(default_factory=list)

    def add(self, value: float, stderr: float | None, low: float, high: float,
            truth: float) -> None:
        self.errors.append(value - truth)
        self.stderrs.append(math.nan if stderr is None else stderr)
        self.covered.append(low <= truth <= high)
        self.widths.append(high - low)

    @property
    def r(self) -> int:
        return len(self.errors)

    @property
    def coverage(self) -> float:
        return float(np.mean(self.covered))

    @property
    def served(self) -> float:
        """The share of replicates that serve a stderr."""
        return float(np.mean(np.isfinite(self.stderrs)))

    @property
    def ratio(self) -> float:
        """sd(error) / rms(stderr) over the replicates that serve one (NaN: fewer than 2)."""
        s = np.asarray(self.stderrs)
        keep = np.isfinite(s)
        if keep.sum() < 2:
            return math.nan
        e = np.asarray(self.errors)[keep]
        return float(np.std(e, ddof=1) / math.sqrt(np.mean(s[keep] ** 2)))

    @property
    def bias(self) -> float:
        return float(np.mean(self.errors))

    @property
    def bias_se(self) -> float:
        return float(np.std(self.errors, ddof=1) / math.sqrt(self.r))

    @property
    def width(self) -> float:
        return float(np.mean(self.widths))


Key = tuple[str, ...]


def _add_scalar(cells: dict[Key, Cell], key: Key, e: ScalarEstimate, truth: float) -> None:
    cells.setdefault(key, Cell()).add(e.value, e.stderr, e.ci_low, e.ci_high, truth)


def run_means(laws: Iterable[str], epsilons: Iterable[float], n: int, replicates: int,
              seed: int, cells: dict[Key, Cell]) -> None:
    """Piecewise and 1BitMean means of each law."""
    for law_name in laws:
        law = LAWS[law_name]
        for eps in epsilons:
            gen = np.random.default_rng([seed, int(eps * 10), len(law_name)])
            for name in ("piecewise", "one_bit_mean"):
                m = mechanism(name, epsilon=eps, lo=LO, hi=HI)
                for _ in range(replicates):
                    values = law.draw(gen, n)
                    t, _n = tallies(m, values, seed=int(gen.integers(2**63)))
                    for target, truth in zip(TARGETS, (float(values.mean()), law.mean),
                                             strict=True):
                        e = estimate(m, t, n, target=target)
                        assert isinstance(e, ScalarEstimate)
                        _add_scalar(cells, ("mean", name, law_name, f"{eps:g}", "-", target),
                                    e, truth)


def run_frequencies(epsilons: Iterable[float], n: int, replicates: int, seed: int,
                    cells: dict[Key, Cell]) -> None:
    """GRR and OUE frequencies of ``CATEGORIES`` (value 0 and value 3)."""
    d = len(CATEGORIES)
    for eps in epsilons:
        gen = np.random.default_rng([seed, int(eps * 10), 99])
        for name in ("grr", "oue"):
            m = mechanism(name, epsilon=eps, domain_size=d)
            for _ in range(replicates):
                values = gen.choice(d, size=n, p=CATEGORIES)
                t, _n = tallies(m, values, seed=int(gen.integers(2**63)))
                own = np.bincount(values, minlength=d) / n
                for target, truth in zip(TARGETS, (own, CATEGORIES), strict=True):
                    e = estimate(m, t, n, target=target)
                    assert isinstance(e, FrequencyEstimate)
                    for v in (0, 3):
                        cells.setdefault(("frequency", name, "categorical", f"{eps:g}", f"v{v}",
                                          target), Cell()).add(
                            float(e.value[v]), float(e.stderr[v]), float(e.ci_low[v]),
                            float(e.ci_high[v]), float(truth[v]))


def _no_shape(m: object, t: Floats, n: int, target: str) -> DistributionEstimate:
    """A DistributionEstimate without EMS, for its range shares (which do not read it)."""
    from aggregator.distribution import DEFAULT_QUANTILES

    k = m.k  # type: ignore[attr-defined]
    return DistributionEstimate(
        m=m, share=np.asarray(t, dtype=np.float64) / n, n=n,  # type: ignore[arg-type]
        masses=np.full(k + 1, 1 / (k + 1)), iterations=0, confidence=0.95,
        edges=np.linspace(LO, HI, 2), quantiles_asked=DEFAULT_QUANTILES, target=target)


def _own_share(values: Floats, a: float, b: float) -> float:
    return float(np.mean((values >= a) & (values < b)))


def run_buckets(laws: Iterable[str], epsilons: Iterable[float], n: int, replicates: int,
                seed: int, cells: dict[Key, Cell]) -> None:
    """Square Wave bucket shares (``BUCKETS``)."""
    for law_name in laws:
        law = LAWS[law_name]
        for eps in epsilons:
            gen = np.random.default_rng([seed, int(eps * 10), len(law_name), 7])
            m = mechanism("square_wave", epsilon=eps, lo=LO, hi=HI)
            for _ in range(replicates):
                values = law.draw(gen, n)
                t, _n = tallies(m, values, seed=int(gen.integers(2**63)))
                for target in TARGETS:
                    d = _no_shape(m, t, n, target)
                    for a, b in BUCKETS:
                        truth = _own_share(values, a, b) if target == "reporters" else \
                            law.share(a, b)
                        iv = d.range_share(a, b)
                        cells.setdefault(("bucket", "square_wave", law_name, f"{eps:g}",
                                          f"{a:g}-{b:g}", target), Cell()).add(
                            iv.value, iv.stderr, iv.ci_low, iv.ci_high, truth)


def run_quantiles(laws: Iterable[str], epsilons: Iterable[float], n: int, replicates: int,
                  seed: int, cells: dict[Key, Cell], boot: int = 1000,
                  qs: Sequence[float] = QUANTILES,
                  targets: Sequence[str] = TARGETS) -> None:
    """Square Wave quantiles, served with ``boot`` bootstrap tallies; also the shape's
    own quantile (``smoothed``) with the same interval, as a "smoothed" cell."""
    for law_name in laws:
        law = LAWS[law_name]
        truths = {q: float(law.quantile(q)) for q in qs}
        for eps in epsilons:
            gen = np.random.default_rng([seed, int(eps * 10), len(law_name), 3])
            m = mechanism("square_wave", epsilon=eps, lo=LO, hi=HI)
            for _ in range(replicates):
                values = law.draw(gen, n)
                t, _n = tallies(m, values, seed=int(gen.integers(2**63)))
                first = estimate_distribution(m, t, n, quantiles=qs,
                                              bootstrap=Bootstrap(boot))
                for target in targets:
                    d = first if target == "reporters" else DistributionEstimate(
                        **{**first.__dict__, "target": target})
                    for q, iv in zip(qs, d.quantile_intervals(qs), strict=True):
                        truth = float(np.quantile(values, q)) if target == "reporters" \
                            else truths[q]
                        key = ("quantile", "square_wave", law_name, f"{eps:g}", f"p{100 * q:g}",
                               target)
                        cells.setdefault(key, Cell()).add(iv.value, iv.stderr, iv.ci_low,
                                                          iv.ci_high, truth)
                        assert iv.smoothed is not None
                        cells.setdefault((*key[:-1], target + " (smoothed)"), Cell()).add(
                            iv.smoothed, None, iv.ci_low, iv.ci_high, truth)


def rows(cells: dict[Key, Cell]) -> list[list[str]]:
    """One table row per cell: the key, R, coverage, served share, ratio, bias."""
    out = []
    for key, c in cells.items():
        unit = 100.0 if key[0] in ("frequency", "bucket") else 1.0
        out.append([*key, str(c.r), f"{c.coverage:.3f}", f"{c.served:.2f}",
                    "-" if math.isnan(c.ratio) else f"{c.ratio:.3f}",
                    f"{c.bias * unit:+.3g}", f"{c.bias / c.width:+.3f}"])
    return out


HEADER = ["statistic", "mechanism", "law", "eps", "at", "target", "R", "coverage",
          "stderr served", "sd(err)/stderr", "bias", "bias/width"]
