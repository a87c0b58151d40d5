"""The metric spec: what is measured, under which mechanism, per which unit.

A metric is immutable; changing any field is a new version.  The JSON form
(POST /v1/metrics) uses the field names below; the collector adds ``version``
and the resolved mechanism parameters.  Each raw field is checked in
``ldp_core._spec_parse``, which holds the vocabulary and the limits of a spec.

>>> spec = MetricSpec.from_json({"name": "browser", "kind": "categorical",
...     "domain": ["firefox", "chrome", "safari"], "epsilon": 1.0, "mechanism": "auto"})
>>> spec.mechanism, spec.index_of("chrome")
('grr', 1)
>>> spec.unit_text()
'per device, per metric, per day'

A numeric metric says which statistics it serves; a distribution or quantiles
need Square Wave, which ``auto`` then resolves to:

>>> latency = MetricSpec.from_json({"name": "latency", "kind": "numeric", "lo": 0,
...     "hi": 500, "epsilon": 1.0, "statistics": ["mean", "quantiles"]})
>>> latency.mechanism, latency.statistics
('square_wave', ('mean', 'quantiles'))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ldp_core._spec_parse import DISTRIBUTION_MECHANISM as DISTRIBUTION_MECHANISM
from ldp_core._spec_parse import DISTRIBUTIONAL as DISTRIBUTIONAL
from ldp_core._spec_parse import (
    EPOCH_SECONDS,
    KIND_ESTIMATE,
    STATISTICS,
    MetricKind,
    SpecError,
    check_cost,
    parse_fields,
)
from ldp_core._spec_parse import MAX_CATEGORIES as MAX_CATEGORIES
from ldp_core._spec_parse import MAX_COUNTER_EPOCHS as MAX_COUNTER_EPOCHS
from ldp_core._spec_parse import MAX_COUNTERS_PER_REPORT as MAX_COUNTERS_PER_REPORT
from ldp_core._spec_parse import MAX_SPEC_EPSILON as MAX_SPEC_EPSILON
from ldp_core._spec_parse import MAX_SPEC_EPSILON_INF as MAX_SPEC_EPSILON_INF
from ldp_core._spec_parse import NAME_PATTERN as NAME_PATTERN
from ldp_core._spec_parse import unprintable as unprintable
from ldp_core.base import Mechanism
from ldp_core.registry import longitudinal, mechanism, resolve_auto

__all__ = ["EPOCH_SECONDS", "STATISTICS", "MetricKind", "MetricSpec", "SpecError"]


@dataclass(frozen=True)
class MetricSpec:
    """One version of one metric."""

    name: str
    kind: MetricKind
    epsilon: float
    mechanism: str
    domain: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | None = None
    epoch: Literal["hour", "day"] = "day"
    unit: str = "device"
    epsilon_inf: float | None = None
    min_reports: int = 100
    version: int = 1
    #: A string metric: at most ``max_length`` symbols of ``alphabet`` ("a-z", or
    #: "bytes" of UTF-8) after NFC and, when ``casefold``, case folding.
    max_length: int | None = None
    alphabet: str | None = None
    casefold: bool = True
    #: A numeric metric's statistics (subset of ``STATISTICS``); () for other kinds.
    statistics: tuple[str, ...] = ()
    _built: dict[str, Mechanism] = field(default_factory=dict, repr=False, compare=False)

    # -- construction ----------------------------------------------------------------

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MetricSpec:
        """Validate a JSON spec; ``SpecError`` names every bad field at once.

        The one validation of a spec: whatever JSON value comes in, the only
        error is SpecError (the collector answers it 422 invalid_spec).
        """
        if not isinstance(data, dict):
            raise SpecError({"": "the spec must be a JSON object"})
        try:
            return cls._from_json(data)
        except SpecError:
            raise
        except ArithmeticError:  # e.g. epsilon = 1e308: exp() overflows building the mechanism
            raise SpecError({"epsilon": "too large: the mechanism's parameters overflow"}) from None
        except (TypeError, ValueError) as exc:  # a shape parse_fields did not foresee
            raise SpecError({"": str(exc)}) from None

    @classmethod
    def _from_json(cls, data: dict[str, Any]) -> MetricSpec:
        spec = cls(**parse_fields(data))
        try:
            built = spec.build()
        except ValueError as exc:
            raise SpecError({"mechanism": str(exc)}) from None
        check_cost(built, spec.epoch)
        return replace(spec, mechanism=built.name)

    def to_json(self) -> dict[str, Any]:
        """The JSON form, with the resolved mechanism parameters under ``params``."""
        out: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "kind": self.kind,
            "epsilon": self.epsilon,
            "mechanism": self.mechanism,
            "epoch": self.epoch,
            "unit": self.unit,
            "min_reports": self.min_reports,
        }
        if self.kind == "categorical":
            out["domain"] = list(self.domain)
        if self.kind == "numeric":
            out["lo"], out["hi"] = self.lo, self.hi
        if self.kind == "string":
            out["max_length"], out["alphabet"] = self.max_length, self.alphabet
            out["casefold"] = self.casefold
        if self.statistics:  # a numeric metric's
            out["statistics"] = list(self.statistics)
        if self.epsilon_inf is not None:
            out["longitudinal"] = {"epsilon_inf": self.epsilon_inf}
        out["params"] = self.build().describe()
        return out

    # -- what the parts use ------------------------------------------------------------

    @property
    def serves_distribution(self) -> bool:
        """Whether the metric answers a distribution or quantiles (not only the mean)."""
        return bool(DISTRIBUTIONAL & set(self.statistics))

    @property
    def domain_size(self) -> int:
        return len(self.domain) if self.kind == "categorical" else 2

    def build(self) -> Mechanism:
        """The mechanism object (built once, then cached)."""
        if "m" not in self._built:
            self._built["m"] = self._make()
        return self._built["m"]

    def _make(self) -> Mechanism:
        if self.mechanism == "auto" and self.serves_distribution:  # auto means Square Wave
            return replace(self, mechanism=DISTRIBUTION_MECHANISM)._make()
        kind = KIND_ESTIMATE[self.kind]
        levels = 1 if self.epsilon_inf is None else 2
        name = resolve_auto(
            self.mechanism, kind, self.epsilon, self.domain_size, levels, self.epsilon_inf
        )
        d = self.domain_size if kind == "frequency" else None
        if kind == "string" and self.epsilon_inf is not None:
            return longitudinal(
                name,
                epsilon=self.epsilon,
                epsilon_inf=self.epsilon_inf,
                max_length=self.max_length,
                alphabet=self.alphabet,
                casefold=self.casefold,
            )
        if kind == "string":
            return mechanism(
                name,
                epsilon=self.epsilon,
                max_length=self.max_length,
                alphabet=self.alphabet,
                casefold=self.casefold,
            )
        if self.epsilon_inf is not None:
            return longitudinal(
                name,
                epsilon=self.epsilon,
                epsilon_inf=self.epsilon_inf,
                domain_size=d,
                lo=self.lo,
                hi=self.hi,
            )
        return mechanism(name, epsilon=self.epsilon, domain_size=d, lo=self.lo, hi=self.hi)

    def index_of(self, value: object) -> int | float:
        """The mechanism's input for a user value (category -> index; bool -> 0/1).

        Raises a ValueError that names the value when it is outside the domain.
        """
        if self.kind == "categorical":
            try:
                return self.domain.index(value)
            except ValueError:
                raise ValueError(
                    f"value {value!r} is not a category of metric {self.name!r}"
                ) from None
        if self.kind == "string":
            try:
                return self.build().check_value(value)
            except ValueError as exc:
                raise ValueError(f"{exc} (metric {self.name!r})") from None
        if self.kind == "boolean":
            if value in (True, False, 0, 1) and not isinstance(value, float):
                return int(value)
            raise ValueError(f"value {value!r} is not a boolean for metric {self.name!r}")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"value {value!r} is not a number for metric {self.name!r}")
        assert self.lo is not None and self.hi is not None
        if not self.lo <= value <= self.hi:
            raise ValueError(
                f"value {value!r} is outside [{self.lo}, {self.hi}] of metric {self.name!r}"
            )
        return float(value)

    @property
    def epoch_seconds(self) -> int:
        return EPOCH_SECONDS[self.epoch]

    def epoch_at(self, unix_seconds: float) -> int:
        """The epoch number that contains a moment: floor(t / epoch length)."""
        return int(unix_seconds // self.epoch_seconds)

    def unit_text(self) -> str:
        """The unit of privacy in words, e.g. 'per device, per metric, per day'."""
        return f"per {self.unit}, per metric, per {self.epoch}"
