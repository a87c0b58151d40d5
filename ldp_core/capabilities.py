"""Capabilities only some mechanisms have, as protocols (checked with isinstance).

>>> from ldp_core import mechanism
>>> isinstance(mechanism("one_bit_mean", epsilon=1.0, lo=0.0, hi=1.0), Bounded)
True
>>> isinstance(mechanism("grr", epsilon=1.0, domain_size=4), Hashed)
False
"""

from __future__ import annotations

from fractions import Fraction
from typing import Protocol, runtime_checkable

from ldp_core._rng import Rng
from ldp_core.base import Report

__all__ = ["Bounded", "Hashed", "Memoisable"]


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
    """A two-level mechanism: a permanent response memoised per (secret, context, value)."""

    @property
    def epsilon_inf(self) -> float: ...

    def permanent_response(self, value: object, secret: bytes, context: str) -> Report: ...

    def randomize_memoised(
        self, value: object, secret: bytes, context: str, rng: Rng | None = None
    ) -> Report: ...
