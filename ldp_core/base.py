"""The shape every mechanism shares: an immutable spec with its channel and its hooks.

A mechanism is built from (epsilon, domain) and holds, in one frozen object:

- its randomiser (``randomize``: the device path, OS CSPRNG by default),
- its channel in the "pure protocol" form of Wang et al. (2017): a report
  *supports* a value; P[supports the true value] = p*, P[supports another
  value] = q*, independently across reports,
- its tally layout (``num_counters``; ``counters(report)`` are the counters a
  report increments) and the map from tallies to support counts,
- the derivation of its epsilon, as a comment beside the thresholds,
- the hooks the drivers call, so that no driver switches on a family:
  ``sample`` (vectorised randomiser, numpy) and ``simulate_tallies``
  (``ldp_core.simulate``), ``audit_design`` (``ldp_core.audit``),
  ``max_set_bits`` and ``tally_sum_law`` (the collector's plausibility check),
  ``count_variance`` (``aggregator.estimate``).

Capabilities that only some mechanisms have are protocols
(``ldp_core.capabilities``: ``Bounded``, ``Hashed``, ``Memoisable``).

>>> from ldp_core import mechanism
>>> m = mechanism("grr", epsilon=1.0, domain_size=4)
>>> m.max_set_bits(), m.direct_payload
(None, 4)
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ldp_core._rng import Rng, resolve

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Design",
    "IntReport",
    "Kind",
    "Mechanism",
    "OverIndices",
    "Payload",
    "Report",
]

#: binary: a proportion of 1s; frequency: a histogram over the domain;
#: mean: the mean of a number in [lo, hi]; string: the heavy strings of an open domain.
Kind = Literal["binary", "frequency", "mean", "string"]

#: A randomised report as the device holds it (the mechanism says which).
Report = int | tuple[int, ...]

#: A report as JSON on the wire.
Payload = int | str | list[int]

#: A vectorised batch of reports (numpy arrays; the mechanism says which).
Batch = Any

#: Reports are simulated in chunks of this many, to bound memory.
CHUNK = 1 << 20


@dataclass(frozen=True)
class Design:
    """The audit's neighbouring inputs x, x' and its most powerful event E.

    ``event`` reads one device report; ``batch_event`` the same event over a
    vectorised batch from ``Mechanism.sample``.  ``probabilities`` are
    (P[E | x], P[E | x']) from the mechanism's declared channel.
    """

    x: int | float
    x_prime: int | float
    event: Callable[[Report], bool]
    batch_event: Callable[[Batch], Any]
    probabilities: tuple[Fraction, Fraction]


@dataclass(frozen=True)
class Mechanism(ABC):
    """Base class of every mechanism; see the module docstring."""

    name: ClassVar[str]
    kind: ClassVar[Kind]
    #: 1 for a one-shot mechanism, 2 for a memoised (longitudinal) one.
    levels: ClassVar[int] = 1
    #: Whether ``mechanism("auto")`` weighs this mechanism (frequency only).
    auto_candidate: ClassVar[bool] = False

    # -- construction from a spec's parameters (the registry calls this) -----------

    @classmethod
    @abstractmethod
    def create(cls, params: dict[str, Any]) -> Mechanism:
        """Build from the parameters given to ``mechanism()`` (``epsilon``, ``domain_size``,
        ``lo``, ...; each class takes what it needs); a ValueError names a bad one."""

    # -- the channel ------------------------------------------------------------------

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

    # -- hooks of the drivers (numpy, imported lazily by the server side) ------------

    @abstractmethod
    def sample(self, values: npt.NDArray[Any], gen: Any) -> Batch:
        """Vectorised ``randomize`` of checked ``values`` with a numpy Generator.

        Same law as the device path, decided from the same integer thresholds.
        """

    @abstractmethod
    def audit_design(self) -> Design:
        """The most powerful distinguishing test (``ldp_core.audit``)."""

    def batch_counters(self, batch: Batch) -> npt.NDArray[np.int64]:
        """The one counter each report of a batch increments (one-counter layouts)."""
        raise ValueError(f"{self.name} reports increment several counters")

    def output_distribution(self, value: int) -> npt.NDArray[np.float64]:
        """P[a report of ``value`` increments counter k], for one-counter layouts."""
        raise ValueError(f"{self.name} reports increment several counters")

    def simulate_tallies(
        self, values: npt.NDArray[Any], trials: int, gen: Any
    ) -> npt.NDArray[np.int64]:
        """``trials`` tally vectors for one report per value, shape (trials, counters).

        Default: one multinomial per distinct value over ``output_distribution``
        when that table is small, else ``sample`` per report in chunks; families
        with independent counters override it with binomials.
        """
        import numpy as np

        index = self._check_indices(values)
        counts = np.bincount(index, minlength=self.domain_size)
        distinct = np.flatnonzero(counts)
        cells = len(distinct) * self.num_counters * trials
        # A multinomial per distinct value costs ~ cells; a draw per report ~ n trials.
        per_report = trials == 1 and len(index) * 0.5 < cells
        if cells <= 20_000_000 and not per_report:
            out = np.zeros((trials, self.num_counters), dtype=np.int64)
            for v in distinct:
                out += gen.multinomial(counts[v], self.output_distribution(int(v)), size=trials)
            return out
        out = np.zeros((trials, self.num_counters), dtype=np.int64)
        for trial in range(trials):
            for start in range(0, len(index), CHUNK):
                batch = self.sample(index[start : start + CHUNK], gen)
                out[trial] += np.bincount(self.batch_counters(batch), minlength=self.num_counters)
        return out

    def _check_indices(self, values: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        import numpy as np

        index = np.asarray(values).astype(np.int64)
        if len(index) and (index.min() < 0 or index.max() >= self.domain_size):
            raise ValueError(f"true values must lie in [0, {self.domain_size})")
        return index

    def max_set_bits(self, alpha: float = 1e-9) -> int | None:
        """Most counters an honest report sets but with probability <= alpha; None: no
        per-report limit (every well-formed report is a possible honest one)."""
        return None

    def tally_sum_law(self) -> tuple[float, float] | None:
        """(mean, variance) of the counters one honest report sets, whatever its value;
        None when the sum carries no information (one counter per report)."""
        return None

    @property
    def direct_payload(self) -> int | None:
        """B when a payload is an int in [0, B) whose only counter is itself, else None
        (lets the collector check such reports without building them)."""
        return None

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

    def count_variance(self, n: int, c: Any) -> Any:
        """Exact Var[c_hat] for a value held by ``c`` of ``n`` reports (item term included).

        C(v) = Bin(c, p*) + Bin(n - c, q*), so
        Var[c_hat] = [c p*(1-p*) + (n-c) q*(1-q*)] / (p*-q*)^2
                   = n q*(1-q*)/(p*-q*)^2 + c (1-p*-q*)/(p*-q*).
        ``c`` may be a float or a numpy array (one variance per value).
        """
        p, q = self.p_star, self.q_star
        return n * q * (1 - q) / (p - q) ** 2 + c * (1 - p - q) / (p - q)

    def unit_variance(self) -> float:
        """Var[f_hat] * n for a rare value (f -> 0): the figure ``auto`` compares."""
        p, q = self.p_star, self.q_star
        return q * (1 - q) / (p - q) ** 2

    def average_variance(self) -> float:
        """The variance ``auto`` breaks near ties with (means: over uniform values)."""
        return self.unit_variance()

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


class IntReport(Mechanism):
    """A report that is one int in [0, num_counters), its own (only) counter.

    ``decode_code`` is the reason given for an int out of range.
    """

    decode_code: ClassVar[str] = "bucket_out_of_range"

    @property
    def direct_payload(self) -> int:
        return self.num_counters

    def counters(self, report: Report) -> tuple[int, ...]:
        assert isinstance(report, int)
        return (report,)

    def encode(self, report: Report) -> int:
        assert isinstance(report, int)
        return report

    def decode(self, payload: object) -> int:
        return int_payload(payload, self.num_counters, self.decode_code)

    def batch_counters(self, batch: Batch) -> npt.NDArray[np.int64]:
        return batch.astype("int64")  # type: ignore[no-any-return]


class OverIndices(Mechanism):
    """A one-level mechanism built from (epsilon, domain_size) over [0, domain_size).

    Its dataclass declares the fields ``declared_epsilon`` and ``size``.
    """

    declared_epsilon: float
    size: int

    @classmethod
    def create(cls, params: dict[str, Any]) -> Mechanism:
        return cls(need(params, "epsilon", cls.name), need(params, "domain_size", cls.name))  # type: ignore[call-arg]

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def domain_size(self) -> int:
        return self.size

    def check_value(self, value: object) -> int:
        return check_index(value, self.size)


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


def need(params: dict[str, Any], what: str, name: str) -> Any:
    """``params[what]``, or a ValueError saying mechanism ``name`` needs it."""
    value = params.get(what)
    if value is None:
        raise ValueError(f"mechanism {name!r} needs {what}=")
    return value
