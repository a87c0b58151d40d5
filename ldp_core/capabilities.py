"""Capabilities only some mechanisms have, as protocols (checked with isinstance).

>>> from ldp_core import mechanism
>>> isinstance(mechanism("one_bit_mean", epsilon=1.0, lo=0.0, hi=1.0), Bounded)
True
>>> isinstance(mechanism("grr", epsilon=1.0, domain_size=4), Hashed)
False
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ldp_core._rng import Rng
from ldp_core.base import Mechanism, Report

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["Bounded", "Hashed", "Memoisable", "Numeric", "WindowedNumeric"]


@runtime_checkable
class Bounded(Protocol):
    """A numeric mechanism over [lo, hi] whose P[report = 1] is linear in the value."""

    @property
    def lo(self) -> float: ...

    @property
    def hi(self) -> float: ...

    def one_probability(self, value: float) -> Fraction: ...


@runtime_checkable
class Hashed(Protocol):
    """A mechanism whose reports carry a public hash seed (OLH and its two-level form)."""

    @property
    def g(self) -> int: ...

    @property
    def num_seeds(self) -> int: ...

    def bucket(self, seed: int, value: int) -> int: ...


@runtime_checkable
class Memoisable(Protocol):
    """A two-level mechanism: a permanent response memoised per (secret, context, key),
    the key being the value or the point it is rounded to (``memo_key``).

    ``permanent`` is the permanent level's one-level mechanism, whose channel
    (p1, q1) gives the within-device correlation of a window
    (``aggregator.estimate.window_count_variance``).
    """

    @property
    def epsilon_inf(self) -> float: ...

    @property
    def permanent(self) -> Mechanism: ...

    def memo_key(self, value: object, secret: bytes, context: str) -> int | float: ...

    def permanent_response(self, value: object, secret: bytes, context: str) -> Report: ...

    def randomize_memoised(
        self, value: object, secret: bytes, context: str, rng: Rng | None = None
    ) -> Report: ...


@runtime_checkable
class Numeric(Protocol):
    """A mean mechanism whose report is one cell standing for an unbiased value of x.

    The mean is ``tallies @ report_values() / n``; ``mean_variance`` estimates its
    variance from the same tallies; ``value_variance`` is the exact per-report
    variance for a known true value (tests, benchmarks).
    """

    @property
    def lo(self) -> float: ...

    @property
    def hi(self) -> float: ...

    def report_values(self) -> tuple[float, ...]: ...

    def value_variance(self, value: float) -> float: ...

    def mean_variance(self, tallies: Sequence[int] | npt.NDArray[np.int64], n: int) -> float: ...


@runtime_checkable
class WindowedNumeric(Numeric, Protocol):
    """A memoised ``Numeric`` mean: one device's reports in a window are correlated.

    ``window_mean_variance`` bounds the variance of the mean of tallies summed over
    ``epochs`` epochs (``aggregator.estimate``), whatever the participation.
    """

    def window_mean_variance(
        self, tallies: Sequence[int] | npt.NDArray[np.int64], n: int, epochs: int
    ) -> float: ...
