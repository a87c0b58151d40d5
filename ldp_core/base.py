"""The shape every mechanism shares: an immutable spec with its channel.

A mechanism is built from (epsilon, domain) and holds, in one frozen object:

- its randomiser (``randomize``: the device path, OS CSPRNG by default),
- its channel in the "pure protocol" form of Wang et al. (2017): a report
  *supports* a value; P[supports the true value] = p*, P[supports another
  value] = q*, independently across reports,
- its tally layout (``num_counters``; ``counters(report)`` are the counters a
  report increments) and the map from tallies to support counts,
- the derivation of its epsilon, as a comment beside the thresholds.

The generic debiasing of support counts lives in ``aggregator.estimate``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar, Literal

from ldp_core._rng import Rng, resolve

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["Family", "Kind", "Mechanism", "Payload", "Report"]

#: binary: a proportion of 1s; frequency: a histogram over the domain;
#: mean: the mean of a number in [lo, hi].
Kind = Literal["binary", "frequency", "mean"]
Family = Literal["direct", "unary", "hashed", "binary", "mean"]

#: A randomised report as the device holds it (the mechanism says which).
Report = int | tuple[int, ...]

#: A report as JSON on the wire.
Payload = int | str | list[int]


@dataclass(frozen=True)
class Mechanism(ABC):
    """Base class of every mechanism; see the module docstring."""

    name: ClassVar[str]
    kind: ClassVar[Kind]
    #: How ``ldp_core.simulate`` samples tallies: direct (GRR-like), unary, hashed
    #: (OLH-like: needs ``hashing`` and ``bucket_keep``), binary, or mean.
    family: ClassVar[Family]
    #: 1 for a one-shot mechanism, 2 for a memoised (longitudinal) one.
    levels: ClassVar[int] = 1

    @property
    @abstractmethod
    def epsilon(self) -> float:
        """The declared guarantee: an upper bound on ``epsilon_actual``."""

    @property
    @abstractmethod
    def domain_size(self) -> int:
        """How many distinct values the estimator resolves (2 for binary and mean)."""

    @property
    @abstractmethod
    def channel(self) -> tuple[Fraction, Fraction]:
        """(p*, q*) exactly, as implemented by the integer thresholds."""

    @property
    @abstractmethod
    def epsilon_actual(self) -> float:
        """Epsilon of the channel as implemented, rounded up; <= ``epsilon``."""

    @property
    @abstractmethod
    def num_counters(self) -> int:
        """Length of the tally vector the collector keeps."""

    @abstractmethod
    def counters(self, report: Report) -> tuple[int, ...]:
        """Indices of the counters that ``report`` increments."""

    @abstractmethod
    def encode(self, report: Report) -> Payload:
        """The wire form of a report."""

    @abstractmethod
    def decode(self, payload: object) -> Report:
        """A report from its wire form; ``ReportError`` if no device could send it."""

    @abstractmethod
    def _perturb(self, value: int | float, rng: Rng) -> Report:
        """Randomise an already validated value.  Never call with unchecked input."""

    @abstractmethod
    def check_value(self, value: object) -> int | float:
        """The value in canonical form, or a ValueError that names it."""

    # -- shared behaviour ----------------------------------------------------------

    def randomize(self, value: object, rng: Rng | None = None) -> Report:
        """The device path: validate ``value``, randomise it, return only the report.

        ``rng`` defaults to the OS CSPRNG; pass a seeded ``random.Random`` only in
        tests and simulations.
        """
        return self._perturb(self.check_value(value), resolve(rng))

    @property
    def p_star(self) -> float:
        """P[a report supports the true value]."""
        return float(self.channel[0])

    @property
    def q_star(self) -> float:
        """P[a report supports a given other value]."""
        return float(self.channel[1])

    @property
    def report_bits(self) -> float:
        """Information-theoretic size of one report, in bits."""
        return math.log2(self.domain_size)

    def count_variance(self, n: int, c: float) -> float:
        """Exact Var[c_hat] for a value held by ``c`` of ``n`` reports (item term included).

        C(v) = Bin(c, p*) + Bin(n - c, q*), so
        Var[c_hat] = [c p*(1-p*) + (n-c) q*(1-q*)] / (p*-q*)^2
                   = n q*(1-q*)/(p*-q*)^2 + c (1-p*-q*)/(p*-q*).
        """
        p, q = self.p_star, self.q_star
        return n * q * (1 - q) / (p - q) ** 2 + c * (1 - p - q) / (p - q)

    def unit_variance(self) -> float:
        """Var[f_hat] * n for a rare value (f -> 0): the figure ``auto`` compares."""
        p, q = self.p_star, self.q_star
        return q * (1 - q) / (p - q) ** 2

    def support_counts(self, tallies: Sequence[int] | npt.NDArray[np.int64]) -> list[int]:
        """C(v) for every v in the domain, from the summed tally vector."""
        if len(tallies) != self.num_counters:
            raise ValueError(
                f"tally vector has {len(tallies)} counters, {self.name} needs {self.num_counters}"
            )
        return [int(t) for t in tallies]

    def describe(self) -> dict[str, object]:
        """The resolved parameters, as the collector records them."""
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "epsilon_actual": self.epsilon_actual,
            "domain_size": self.domain_size,
            "p_star": self.p_star,
            "q_star": self.q_star,
            "num_counters": self.num_counters,
        }


def check_domain_size(domain_size: object) -> int:
    """``domain_size`` if it is an int >= 2, else a ValueError naming it."""
    if isinstance(domain_size, bool) or not isinstance(domain_size, int) or domain_size < 2:
        raise ValueError(f"domain_size must be an integer >= 2, got {domain_size!r}")
    return domain_size


def check_index(value: object, domain_size: int) -> int:
    """``value`` if it is an int in [0, domain_size), else a ValueError naming it."""
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, int) or not 0 <= value < domain_size:
        raise ValueError(f"value {value!r} is not in the domain [0, {domain_size})")
    return value


def int_payload(payload: object, upper: int, code: str) -> int:
    """An int in [0, upper) from the wire, else ``ReportError(code)``."""
    from ldp_core.errors import ReportError

    if isinstance(payload, bool) or not isinstance(payload, int):
        raise ReportError(
            "payload_type", f"payload must be an integer, got {type(payload).__name__}"
        )
    if not 0 <= payload < upper:
        raise ReportError(code, f"payload {payload} not in [0, {upper})")
    return payload
