"""The metric spec: what is measured, under which mechanism, per which unit.

A metric is immutable; changing any field is a new version.  The JSON form
(POST /v1/metrics) uses the field names below; the collector adds ``version``
and the resolved mechanism parameters.

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
import re
import unicodedata
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ldp_core.base import Kind, Mechanism
from ldp_core.epsilon import check_epsilon
from ldp_core.mechanisms._alphabet import Alphabet
from ldp_core.mechanisms.mean import check_bounds
from ldp_core.registry import NAMES, longitudinal, mechanism, names_for, resolve_auto

__all__ = ["EPOCH_SECONDS", "STATISTICS", "MetricKind", "MetricSpec", "SpecError"]

MetricKind = Literal["boolean", "categorical", "numeric", "string"]
EPOCH_SECONDS = {"hour": 3600, "day": 86400}
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MAX_CATEGORIES = 1 << 16
#: The largest epsilon a spec may ask per report, and over a lifetime.  At eps = 10
#: one report already lets an observer guess a yes/no answer right 99.995% of the
#: time: past it the randomisation is a formality.  (Devices cap lower by default.)
MAX_SPEC_EPSILON = 10.0
MAX_SPEC_EPSILON_INF = 20.0
#: Counters one report may set on average: beyond it a 1 MiB batch merges millions of
#: increments (an OUE report over 65,536 values sets ~18,000); olh and hadamard fit.
MAX_COUNTERS_PER_REPORT = 1024
#: Counters x epochs of one metric over 31 days (hourly OLH at d = 65,536 is 73M).
MAX_COUNTER_EPOCHS = 1 << 24

#: What a numeric metric can serve; ``DISTRIBUTIONAL`` ones need ``DISTRIBUTION_MECHANISM``.
STATISTICS = ("mean", "distribution", "quantiles")
DISTRIBUTIONAL = frozenset({"distribution", "quantiles"})
DISTRIBUTION_MECHANISM = "square_wave"

#: The estimate each metric kind asks of its mechanism.
_KIND: dict[str, Kind] = {
    "boolean": "binary", "categorical": "frequency", "numeric": "mean", "string": "string",
}
_ALLOWED: dict[str, tuple[str, ...]] = {
    metric_kind: (*names_for(kind), "auto") for metric_kind, kind in _KIND.items()
}


class SpecError(ValueError):
    """A bad metric spec; ``errors`` maps each bad field to what is wrong with it."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def _check_cost(built: Mechanism, epoch: str) -> None:
    """SpecError for a mechanism too costly to keep (see the MAX_* bounds above)."""
    law = built.tally_sum_law()
    if law is not None and law[0] > MAX_COUNTERS_PER_REPORT:
        raise SpecError({"mechanism": (
            f"{built.name} sets {law[0]:.0f} counters per report on average over "
            f"{built.domain_size} values (at most {MAX_COUNTERS_PER_REPORT}); "
            "olh or hadamard keep a large domain cheap"
        )})
    epochs = 31 * 86400 // EPOCH_SECONDS[epoch]
    if built.num_counters * epochs > MAX_COUNTER_EPOCHS:
        raise SpecError({"epoch": (
            f"{built.num_counters} counters x {epochs} epochs a month is over "
            f"{MAX_COUNTER_EPOCHS}; use a daily epoch or a smaller domain"
        )})


def _statistics(kind: str | None, raw: object, errors: dict[str, str]) -> tuple[str, ...]:
    """A numeric metric's statistics (default ("mean",)); a named error otherwise."""
    if kind != "numeric":
        if raw is not None:
            errors["statistics"] = "only a numeric metric serves statistics"
        return ()
    if raw is None:
        return ("mean",)
    if (not isinstance(raw, list) or not raw
            or not all(isinstance(x, str) and x in STATISTICS for x in raw)):
        errors["statistics"] = (
            f"must be a non-empty list drawn from {', '.join(STATISTICS)}, got {raw!r}"
        )
        return ()
    if len(set(raw)) != len(raw):
        errors["statistics"] = "statistics must be distinct"
        return ()
    return tuple(raw)


#: Unicode categories a label may not hold: controls (NUL included), format
#: characters (the bidi overrides and isolates, zero-width joiners), surrogates,
#: private use, unassigned, and line or paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def unprintable(text: str) -> bool:
    r"""Whether ``text`` holds a character that can hide or reorder what is shown.

    >>> unprintable("chrome"), unprintable("evil\u202eexe.txt"), unprintable("a\x00")
    (False, True, True)
    """
    return any(unicodedata.category(ch) in _UNPRINTABLE for ch in text)


def _text(value: object) -> str | None:
    """A JSON string field, or None for anything else (lists and objects included)."""
    return value if isinstance(value, str) else None


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
        except (TypeError, ValueError) as exc:  # a shape the checks below did not foresee
            raise SpecError({"": str(exc)}) from None

    @classmethod
    def _from_json(cls, data: dict[str, Any]) -> MetricSpec:
        errors: dict[str, str] = {}
        known = {
            "name",
            "kind",
            "domain",
            "lo",
            "hi",
            "epsilon",
            "mechanism",
            "epoch",
            "unit",
            "longitudinal",
            "min_reports",
            "version",
            "params",
            "max_length",
            "alphabet",
            "casefold",
            "statistics",
        }
        for key in data:
            if key not in known:
                errors[key] = "unknown field"
        name = data.get("name")
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            errors["name"] = f"must match {NAME_PATTERN.pattern}, got {name!r}"
        kind = _text(data.get("kind"))
        if kind not in _ALLOWED:
            errors["kind"] = (
                f"must be one of boolean, categorical, numeric, string, got {data.get('kind')!r}"
            )
        try:
            epsilon = check_epsilon(data.get("epsilon"))  # type: ignore[arg-type]
            if epsilon > MAX_SPEC_EPSILON:
                raise ValueError(f"epsilon must be at most {MAX_SPEC_EPSILON:g}, got {epsilon}")
        except ValueError as exc:
            errors["epsilon"] = str(exc)
            epsilon = 1.0
        mech = _text(data.get("mechanism", "auto"))
        if mech not in NAMES:
            errors["mechanism"] = f"unknown mechanism {data.get('mechanism')!r}"
        elif kind in _ALLOWED and mech not in _ALLOWED[kind]:
            errors["mechanism"] = f"{mech!r} does not fit a {kind} metric"
        domain: tuple[str, ...] = ()
        lo = hi = None
        if kind == "categorical":
            raw = data.get("domain")
            if (
                not isinstance(raw, list)
                or not 2 <= len(raw) <= MAX_CATEGORIES
                or not all(isinstance(x, str) and 0 < len(x) <= 200 for x in raw)
            ):
                errors["domain"] = f"must be a list of 2 to {MAX_CATEGORIES} non-empty strings"
            elif len(set(raw)) != len(raw):
                errors["domain"] = "categories must be distinct"
            elif (bad := next((i for i, x in enumerate(raw) if unprintable(x)), None)) is not None:
                errors["domain"] = (
                    f"category {bad} holds a control, format (bidi) or unassigned character"
                )
            else:
                domain = tuple(raw)
        elif kind == "numeric":
            try:
                lo, hi = check_bounds(data.get("lo"), data.get("hi"))
            except ValueError as exc:
                errors["lo" if "lo" in str(exc).split()[0] else "hi"] = str(exc)
        max_length, alphabet, casefold = data.get("max_length"), data.get("alphabet"), True
        if kind == "string":
            max_length = data.get("max_length", 8)
            alphabet = data.get("alphabet", "a-z")
            casefold = data.get("casefold", True)
            if not isinstance(casefold, bool):
                errors["casefold"] = f"must be true or false, got {casefold!r}"
            else:
                try:
                    Alphabet.parse(alphabet, max_length, casefold)
                except ValueError as exc:
                    errors["max_length" if "max_length" in str(exc) else "alphabet"] = str(exc)
        elif any(key in data for key in ("max_length", "alphabet", "casefold")):
            errors["kind"] = "max_length, alphabet and casefold belong to a string metric"
        statistics = _statistics(kind, data.get("statistics"), errors)
        if (DISTRIBUTIONAL & set(statistics) and "mechanism" not in errors
                and mech not in ("auto", DISTRIBUTION_MECHANISM)):
            errors["mechanism"] = (
                f"{mech!r} serves only the mean; a distribution or quantiles need "
                f"{DISTRIBUTION_MECHANISM!r} (or 'auto')"
            )
        epoch = _text(data.get("epoch", "day"))
        if epoch not in EPOCH_SECONDS:
            errors["epoch"] = f"must be 'hour' or 'day', got {data.get('epoch')!r}"
        unit = data.get("unit", "device")
        if not isinstance(unit, str) or not 0 < len(unit) <= 64 or unprintable(unit):
            errors["unit"] = f"must be a short text such as 'device', got {unit!r}"
        epsilon_inf = None
        longitudinal = data.get("longitudinal")
        if longitudinal is not None:
            if not isinstance(longitudinal, dict) or set(longitudinal) != {"epsilon_inf"}:
                errors["longitudinal"] = 'must be {"epsilon_inf": <number>} or absent'
            else:
                try:
                    epsilon_inf = check_epsilon(longitudinal["epsilon_inf"], "epsilon_inf")
                    if epsilon_inf > MAX_SPEC_EPSILON_INF:
                        raise ValueError(
                            f"epsilon_inf must be at most {MAX_SPEC_EPSILON_INF:g}, "
                            f"got {epsilon_inf}"
                        )
                    if epsilon_inf <= epsilon:
                        errors["longitudinal"] = (
                            f"epsilon_inf {epsilon_inf} must exceed the per-report "
                            f"epsilon {epsilon}"
                        )
                except ValueError as exc:
                    errors["longitudinal"] = str(exc)
        min_reports = data.get("min_reports", 100)
        if isinstance(min_reports, bool) or not isinstance(min_reports, int) or min_reports < 0:
            errors["min_reports"] = f"must be an integer >= 0, got {min_reports!r}"
        version = data.get("version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            errors["version"] = f"must be an integer >= 1, got {version!r}"
        if errors:
            raise SpecError(errors)
        spec = cls(
            name=name,  # type: ignore[arg-type]
            kind=kind,  # type: ignore[arg-type]
            epsilon=epsilon,
            mechanism=str(mech),
            domain=domain,
            lo=lo,
            hi=hi,
            epoch=epoch,  # type: ignore[arg-type]
            unit=unit,
            epsilon_inf=epsilon_inf,
            min_reports=min_reports,
            version=version,
            max_length=max_length if kind == "string" else None,
            alphabet=alphabet if kind == "string" else None,
            casefold=casefold,
            statistics=statistics,
        )
        try:
            built = spec.build()
        except ValueError as exc:
            raise SpecError({"mechanism": str(exc)}) from None
        _check_cost(built, spec.epoch)
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
        kind = _KIND[self.kind]
        levels = 1 if self.epsilon_inf is None else 2
        name = resolve_auto(self.mechanism, kind, self.epsilon, self.domain_size, levels,
                            self.epsilon_inf)
        d = self.domain_size if kind == "frequency" else None
        if kind == "string" and self.epsilon_inf is not None:
            return longitudinal(name, epsilon=self.epsilon, epsilon_inf=self.epsilon_inf,
                                max_length=self.max_length, alphabet=self.alphabet,
                                casefold=self.casefold)
        if kind == "string":
            return mechanism(name, epsilon=self.epsilon, max_length=self.max_length,
                             alphabet=self.alphabet, casefold=self.casefold)
        if self.epsilon_inf is not None:
            return longitudinal(
                name, epsilon=self.epsilon, epsilon_inf=self.epsilon_inf,
                domain_size=d, lo=self.lo, hi=self.hi,
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
