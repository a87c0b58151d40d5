"""Hierarchical histogram (Cormode, Kulkarni and Srivastava, VLDB 2019) on a grid.

The value in [lo, hi] is first rounded at random to one of D = B**h grid points
j = 0..D-1 (unbiased; ``ldp_core.mechanisms._grid`` with k = D - 1 steps).  The
grid points are the leaves of a complete B-ary tree; level l (1..h) cuts them
into B**l nodes of B**(h - l) consecutive points, so j lies in node j // B**(h-l).
The device picks one level uniformly (one uniform integer in [0, h) from the
OS CSPRNG) and reports its node on that level through the level's frequency
oracle, with the whole epsilon.  Each level's oracle is the one-counter oracle
of lower count variance over its B**l nodes:

    GRR: ((d - 2 + e^eps) / (e^eps - 1)^2)    Hadamard response: ((e^eps + 1)/(e^eps - 1))^2

(GRR for few nodes or a large eps, HR for many nodes at a small eps; OUE would
set d counters per report).  A report is one cell of the concatenated outputs
of the levels, so the tally is M = sum of the levels' outputs counters, flat
in n, and each report increments one counter.

Epsilon.  P[cell c | j] = (1/h) P_l[c | node_l(j)] for the one level l that owns c,
so the ratio of two inputs' probabilities on any cell is a ratio of one
level's oracle: eps_actual = the largest of the levels' (each <= eps by its
integer threshold).  The level draw and the rounding do not depend on any
other person's data and add nothing.

The exact channel is the D x M matrix ``transition()``; the server reads the
grid masses from the tallies by an unbiased linear inverse with the levels'
variances as weights (``aggregator.distribution``), which is the consistency
step of Hay et al. (2010) done in one solve; the same inverse makes every cell
an unbiased value of x, so the report answers the mean too (``report_values``).

Measured against Square Wave (docs/numeric.md): its
unbiased CDF is 30-45% more precise at eps <= 1 (n = 10^5), so range-share
intervals are 2.3-3.2 times narrower; but 16 grid points bias the CDF read
between them by O(h^2 f'), which the intervals do not hold: 95% intervals
covered 0.38-0.81 of bimodal range shares at eps <= 1, and less at eps = 4.  Its
Wasserstein-1 ties Square Wave + EMS at eps = 0.5 and loses above.  So a
``distribution`` metric is served by Square Wave only (``ldp_core.metric``);
this class is registered for its exact, audited channel and unbiased mean,
and the benchmark compares it.

>>> import random
>>> m = HierarchicalHistogram(epsilon=1.0, lo=0.0, hi=100.0)
>>> m.branching, m.depth, m.leaves, [lvl.name for lvl in m.oracles]
(2, 4, 16, ['grr', 'grr', 'grr', 'hadamard'])
>>> m.num_counters                      # 2 + 4 + 8 GRR cells, 32 Hadamard outputs
46
>>> 0 <= m.randomize(42.0, rng=random.Random(0)) < m.num_counters
True
>>> m.epsilon_actual <= 1.0
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import Rng
from ldp_core.base import Design, IntReport, Kind, Mechanism, need
from ldp_core.epsilon import check_mechanism_epsilon
from ldp_core.mechanisms._grid import round_inputs, rounded, up_probability
from ldp_core.mechanisms.grr import GRR
from ldp_core.mechanisms.hadamard import HadamardResponse
from ldp_core.mechanisms.mean import check_bounds

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "BRANCHING", "DEPTH", "MECHANISMS", "HierarchicalHistogram", "level_oracle", "linear_inverse",
]

#: The tree: B = 2, h = 4, so D = 16 leaves.  Chosen by a sweep of (B, h) in
#: {(2, 3), (2, 4), (2, 5), (4, 2), (4, 3)} on W1 at eps <= 1
#: (``benchmarks/bench_distribution.py --sweep``: shapes and seeds apart from the
#: reported table): finer trees lose more to variance than they gain in resolution.
BRANCHING = 2
DEPTH = 4

Oracle = GRR | HadamardResponse


def level_oracle(epsilon: float, nodes: int) -> Oracle:
    """The one-counter oracle of lower count variance over ``nodes`` values.

    >>> level_oracle(1.0, 4).name, level_oracle(0.5, 16).name, level_oracle(4.0, 64).name
    ('grr', 'hadamard', 'grr')
    """
    e = math.exp(epsilon)
    grr = (nodes - 2 + e) / (e - 1) ** 2
    hadamard = ((e + 1) / (e - 1)) ** 2
    if grr <= hadamard:
        return GRR(epsilon, nodes)
    return HadamardResponse(epsilon, nodes)


def _exact_row(oracle: Oracle, node: int) -> list[Fraction]:
    """P[output | node] of one level's oracle, exactly."""
    p, q = oracle.channel
    if isinstance(oracle, GRR):
        return [p if y == node else q for y in range(oracle.num_counters)]
    width = oracle.num_counters
    return [2 * p / width if oracle.supports(y, node) else 2 * (1 - p) / width
            for y in range(width)]


@dataclass(frozen=True, init=False)
class HierarchicalHistogram(IntReport):
    """A hierarchical histogram over [lo, hi]: distribution, quantiles and mean."""

    name: ClassVar[str] = "hierarchical"
    kind: ClassVar[Kind] = "mean"
    #: ``auto`` for a mean prefers Piecewise/Hybrid; a distribution is Square Wave's.
    auto_candidate: ClassVar[bool] = False
    declared_epsilon: float
    lo: float
    hi: float
    branching: int
    depth: int
    oracles: tuple[Oracle, ...] = field(repr=False)

    def __init__(self, epsilon: float, lo: float, hi: float, branching: int = BRANCHING,
                 depth: int = DEPTH) -> None:
        eps = check_mechanism_epsilon(epsilon)
        low, high = check_bounds(lo, hi)
        for what, given, top in (("branching", branching, 16), ("depth", depth, 12)):
            if isinstance(given, bool) or not isinstance(given, int) or not 2 <= given <= top:
                raise ValueError(f"{what} must be an integer in [2, {top}], got {given!r}")
        if branching**depth > 1024:
            raise ValueError(f"{branching}**{depth} leaves is over 1024")
        oracles = tuple(level_oracle(eps, branching**level) for level in range(1, depth + 1))
        fields: tuple[tuple[str, object], ...] = (
            ("declared_epsilon", eps), ("lo", low), ("hi", high), ("branching", branching),
            ("depth", depth), ("oracles", oracles))
        for key, value in fields:
            object.__setattr__(self, key, value)

    @classmethod
    def create(cls, params: dict[str, Any]) -> HierarchicalHistogram:
        epsilon, lo, hi = (need(params, what, cls.name) for what in ("epsilon", "lo", "hi"))
        return cls(epsilon, lo, hi)

    # -- the tree ----------------------------------------------------------------------

    @property
    def leaves(self) -> int:
        """D = B**h grid points."""
        return int(self.branching**self.depth)

    @property
    def k(self) -> int:
        """Grid steps: the leaves are the k + 1 points lo, lo + (hi - lo)/k, ..., hi."""
        return self.leaves - 1

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        """The first counter of each level's outputs, and the total last."""
        out = [0]
        for oracle in self.oracles:
            out.append(out[-1] + oracle.num_counters)
        return tuple(out)

    def node(self, level: int, j: int) -> int:
        """The node of grid point j on level ``level`` (0-based: level 0 has B nodes)."""
        return j // int(self.branching ** (self.depth - 1 - level))

    # -- the channel -------------------------------------------------------------------

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def epsilon_actual(self) -> float:
        return max(oracle.epsilon_actual for oracle in self.oracles)

    @property
    def domain_size(self) -> int:
        return 2

    @property
    def num_counters(self) -> int:
        return self.offsets[-1]

    @property
    def report_bits(self) -> float:
        return math.log2(self.num_counters)

    def exact_row(self, j: int) -> tuple[Fraction, ...]:
        """P[cell | grid point j], exactly (each level's row over the depth)."""
        if not 0 <= j <= self.k:
            raise ValueError(f"grid point {j} is not in [0, {self.k}]")
        share = Fraction(1, self.depth)
        return tuple(share * p for level, oracle in enumerate(self.oracles)
                     for p in _exact_row(oracle, self.node(level, j)))

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        """(the largest, the smallest) probability of a cell given a grid point."""
        cells = {p for j in (0, self.k) for p in self.exact_row(j)}
        return max(cells), min(cells)

    def check_value(self, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"value {value!r} is not a number in [{self.lo}, {self.hi}]")
        if not (math.isfinite(value) and self.lo <= value <= self.hi):
            raise ValueError(f"value {value!r} is not in [{self.lo}, {self.hi}]")
        return float(value)

    def _perturb(self, value: int | float, rng: Rng) -> int:
        j = rounded(float(value), self.lo, self.hi, self.k, rng)
        level = rng.randrange(self.depth)
        inner = self.oracles[level]._perturb(self.node(level, j), rng)
        return self.offsets[level] + int(inner)

    # -- drivers -----------------------------------------------------------------------

    def _checked(self, values: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        import numpy as np

        x = np.asarray(values, dtype=np.float64)
        if len(x) and (not np.all(np.isfinite(x)) or x.min() < self.lo or x.max() > self.hi):
            raise ValueError(f"true values must lie in [{self.lo}, {self.hi}]")
        return x

    def sample_grid(self, j: npt.NDArray[np.int64], gen: Any) -> npt.NDArray[np.int64]:
        """Reports of a batch of grid points: a uniform level each, then its oracle."""
        import numpy as np

        level = gen.integers(0, self.depth, size=len(j), dtype=np.int64)
        out = np.empty(len(j), dtype=np.int64)
        for index, oracle in enumerate(self.oracles):
            mine = level == index
            nodes = j[mine] // self.branching ** (self.depth - 1 - index)
            out[mine] = self.offsets[index] + oracle.sample(nodes, gen)
        return out

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.int64]:
        j = round_inputs(self._checked(values), self.lo, self.hi, self.k, gen)
        return self.sample_grid(j, gen)

    def grid_counts(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.int64]:
        """How many of ``values`` the random rounding puts on each grid point."""
        import numpy as np

        j = round_inputs(self._checked(values), self.lo, self.hi, self.k, gen)
        return np.bincount(j, minlength=self.k + 1)

    @cached_property
    def _transition(self) -> npt.NDArray[np.float64]:
        import numpy as np

        rows = np.array([[float(p) for p in self.exact_row(j)] for j in range(self.k + 1)])
        rows.setflags(write=False)
        return rows

    def transition(self) -> npt.NDArray[np.float64]:
        """The D x M matrix P[cell | grid point]."""
        return self._transition.copy()

    def simulate_tallies(
        self, values: npt.NDArray[Any], trials: int, gen: Any
    ) -> npt.NDArray[np.int64]:
        """Round each value, then one multinomial per grid point over its exact row."""
        import numpy as np

        x = self._checked(values)
        rows = self._transition
        out = np.zeros((trials, self.num_counters), dtype=np.int64)
        for t in range(trials):
            counts = self.grid_counts(x, gen)
            for j in np.flatnonzero(counts):
                out[t] += gen.multinomial(int(counts[j]), rows[j])
        return out

    def output_distribution(self, value: float) -> npt.NDArray[np.float64]:
        j, f = up_probability(self.check_value(value), self.lo, self.hi, self.k)
        rows = self._transition
        return (1 - f) * rows[j] + (f * rows[j + 1] if f else 0.0)  # type: ignore[no-any-return]

    def audit_design(self) -> Design:
        # x = hi (last grid point), x' = lo (grid point 0): different nodes on every
        # level.  E = the cells of the level with the largest epsilon that are more
        # likely under x (GRR: x's node; Hadamard: in C_x and not in C_x'), so
        # P[E | x] / P[E | x'] is that oracle's own ratio, e^eps_actual.
        level = max(range(self.depth), key=lambda i: self.oracles[i].epsilon_actual)
        top, bottom = self.exact_row(self.k), self.exact_row(0)
        cells = [c for c in range(self.offsets[level], self.offsets[level + 1])
                 if top[c] > bottom[c]]
        event = frozenset(cells)

        def batch_event(batch: Any) -> Any:
            import numpy as np

            return np.isin(batch, cells)

        return Design(self.hi, self.lo, lambda r: isinstance(r, int) and r in event,
                      batch_event, (sum((top[c] for c in cells), Fraction(0)),
                                    sum((bottom[c] for c in cells), Fraction(0))))

    # -- the mean (``Numeric``): each cell stands for an unbiased value ---------------

    @cached_property
    def _values(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per cell: an unbiased value of x, and an unbiased value of the grid value's square."""
        import numpy as np

        grid = np.linspace(self.lo, self.hi, self.k + 1)
        inverse = linear_inverse(self._transition)
        return (tuple(float(v) for v in inverse @ grid),
                tuple(float(v) for v in inverse @ (grid * grid)))

    def report_values(self) -> tuple[float, ...]:
        return self._values[0]

    def value_variance(self, value: float) -> float:
        import numpy as np

        y = np.asarray(self._values[0])
        return float(self.output_distribution(value) @ (y * y) - value * value)

    def mean_variance(self, tallies: Sequence[int] | npt.NDArray[np.int64], n: int) -> float:
        """Var of the mean, estimated from the tallies.

        Var[y | v] = E[y^2 | v] - v^2, and E[y^2 - z | v] = E[y^2 | v] - E[t_J^2 | v]
        (z: the cell's unbiased value of the rounded value's square) falls short of it by
        the rounding's variance f (1 - f) h^2 <= h^2 / 4, added as that bound: an
        unbiased sum over the reports, conservative by at most h^2/4 per report.
        """
        import numpy as np

        counts = np.asarray(tallies, dtype=np.float64)
        if counts.shape != (self.num_counters,):
            raise ValueError(f"tally vector has {counts.shape} counters, need {self.num_counters}")
        y, z = (np.asarray(v) for v in self._values)
        h = (self.hi - self.lo) / self.k
        per_report = counts @ (y * y - z) / n + h * h / 4
        return float(max(per_report, 0.0) / n)

    def describe(self) -> dict[str, object]:
        # The levels' oracles in order, each with its integer threshold: a report is
        # offsets[level] + that oracle's report of node_level(j).
        return {**super().describe(), "branching": self.branching, "depth": self.depth,
                "levels": [oracle.describe() for oracle in self.oracles],
                "offsets": list(self.offsets)}


def linear_inverse(transition: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """P (M x D): x_hat = s P is unbiased for x whenever E[s] = x T and x sums to 1.

    s is the tally share per cell (it sums to 1).  Among the linear unbiased
    estimators, P has the least variance when the cell shares' covariance is
    diag(pi0) (pi0 = the cells' law under a uniform x): weighted least squares
    for the D - 1 free coordinates of x (x = x0 + U z, U a basis of the sum-zero
    vectors), made linear in s by s 1 = 1.  Its estimate sums to exactly 1.

    >>> import numpy as np
    >>> t = np.array([[0.7, 0.3], [0.3, 0.7]])
    >>> (np.array([0.55, 0.45]) @ linear_inverse(t)).round(3).tolist()
    [0.625, 0.375]
    """
    import numpy as np

    d, cells = transition.shape
    x0 = np.full(d, 1.0 / d)
    r = x0 @ transition
    basis = np.vstack([np.eye(d - 1), -np.ones((1, d - 1))])  # D x (D-1), columns sum to 0
    g = basis.T @ transition
    weighted = g / np.maximum(r, 1e-300)
    solve = weighted.T @ np.linalg.inv(weighted @ g.T)  # M x (D-1)
    centred = solve - np.outer(np.ones(cells), r @ solve)
    return centred @ basis.T + np.outer(np.ones(cells), x0)  # type: ignore[no-any-return]


MECHANISMS: tuple[type[Mechanism], ...] = (HierarchicalHistogram,)
