"""Vectorised simulation: the tallies a collector would hold, without a fleet.

``tallies(m, true_values, seed)`` has the same distribution as summing the
counters of ``m.randomize(v)`` over the true values (the suite checks this
with a two-sample test against the device path).  It is what the demo, the
benchmarks and the statistical tests use for large n.  Each mechanism samples
itself (``Mechanism.simulate_tallies``: binomials where counters are
independent, a multinomial per distinct value or one vectorised draw per
report otherwise); numpy is imported lazily, so ldp_core still ships to
devices without it.

>>> from ldp_core import mechanism
>>> t, n = tallies(mechanism("grr", epsilon=1.0, domain_size=4), [0, 1, 1, 3], seed=0)
>>> int(t.sum()), n
(4, 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ldp_core.base import Mechanism

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["output_distribution", "tallies", "tallies_many"]


def tallies(
    m: Mechanism, true_values: Sequence[float] | npt.NDArray[Any], seed: int | None = 0
) -> tuple[npt.NDArray[np.int64], int]:
    """(tally vector, n) for one report per true value, as the collector would hold them."""
    many, n = tallies_many(m, true_values, trials=1, seed=seed)
    return many[0], n


def tallies_many(
    m: Mechanism,
    true_values: Sequence[float] | npt.NDArray[Any],
    trials: int,
    seed: int | None = 0,
) -> tuple[npt.NDArray[np.int64], int]:
    """``trials`` independent tally vectors, shape (trials, num_counters), and n."""
    import numpy as np

    values = np.asarray(true_values)
    return m.simulate_tallies(values, trials, np.random.default_rng(seed)), int(values.shape[0])


def output_distribution(m: Mechanism, value: int) -> npt.NDArray[np.float64]:
    """P[counter k is the one a report of ``value`` increments], for one-counter reports."""
    return m.output_distribution(value)
