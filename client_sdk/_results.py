"""What the SDK returns: record results, delivery counters, the privacy report.

>>> RecordResult("queued", "browser").ok
True
>>> RecordResult("over_budget", "browser").ok
False
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Counters", "LifetimeSpend", "PrivacyReport", "RecordResult", "RecordStatus",
           "UnitSpend"]

#: queued                the randomised report is in the queue (and, by default, the spool)
#: over_budget           refused: the unit (device, metric name, epoch) has no epsilon left
#: over_lifetime_budget  refused: a new permanent response would exceed the lifetime budget
#: spec_over_cap         refused: the spec's epsilon or epsilon_inf is above the device's
#:                       ``PrivacyCaps`` (logged once per metric at WARNING)
#: spec_conflict         refused: the spec changed under a (name, version) this device
#:                       already knew; no report until a new version (logged once)
#: held                  no spec for this name yet, before the first fetch of the specs:
#:                       the value is held in memory only (never on disk) and randomised
#:                       and queued when the specs arrive (see ``HoldConfig``)
#: unknown_metric        no spec for this name (after a fetch, or the hold is full)
#: invalid_value         refused: not a category of the domain (case matters), not a
#:                       boolean, not a finite number, a wrong type (logged once per
#:                       metric at WARNING, never with the value; ``strict=True`` raises)
#: sampled_out           skipped by ``sample_rate`` before randomising (no epsilon spent)
#: disabled              ``enabled=False``: nothing is collected
#: opted_out             ``opt_out()`` was called on this device
#: closed                the client was closed
#: storage_error         the spool could not be written (disk full ...); nothing spent
#: state_unavailable     the state folder could not be created or secured when the
#:                       Client started: it collects nothing (logged once at WARNING)
RecordStatus = Literal[
    "queued", "over_budget", "over_lifetime_budget", "spec_over_cap", "spec_conflict",
    "held", "unknown_metric", "invalid_value", "sampled_out", "disabled", "opted_out",
    "closed", "storage_error", "state_unavailable",
]


@dataclass(frozen=True, slots=True)
class RecordResult:
    """The outcome of one ``record`` call; it never contains the value."""

    status: RecordStatus
    metric: str
    epoch: int | None = None

    @property
    def ok(self) -> bool:
        """True when a randomised report was queued for delivery."""
        return self.status == "queued"


@dataclass(frozen=True)
class Counters:
    """Delivery counters of this process since the client started.

    queued      reports randomised and queued
    pending     reports waiting (in memory or in the spool) right now
    sent        reports the collector accepted
    duplicates  reports the collector had already (a re-send): delivered
    dropped     reports given up, by reason: a collector rejection code
                (``bad_token`` ...), a token issuer's refusal of the unit
                (``token_limit``, ``epoch_expired`` ...), a final HTTP error code (``invalid_key``,
                ``http_404`` ...), ``spool_full``, ``opt_out``, ``storage_error``
    refused     record calls refused locally, by status (``over_budget``,
                ``unknown_metric``, ``sampled_out`` ...)
    batches     HTTP batches answered 2xx
    retries     delivery attempts that will be retried (network, 408, 429, 5xx, and
                401/403 while the key is refused)
    clamped     numeric values outside [lo, hi] clamped to the nearest bound (queued)
    held        values held in memory right now, waiting for the first spec fetch
    config_errors  configuration errors seen, by kind (``invalid_key``: answers 401/403;
                ``issuer_key_unpinned``: the token issuer's key is not one the app
                pinned; either way the reports are kept and retried, ``flush()``
                returns False); ``bundled_spec_invalid``: specs of the app's catalog
                (``metrics=``) this SDK could not load, ``spec_unusable``: the
                collector's (each its metric stays unknown; logged once at WARNING);
                ``state_unavailable``: the state folder is unusable, nothing is collected;
                ``device_token_unavailable`` / ``device_token_refused``: the app's
                ``device_token`` gave no login token / the issuer refused it (reports kept)
    """

    queued: int = 0
    pending: int = 0
    sent: int = 0
    duplicates: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    retries: int = 0
    clamped: int = 0
    held: int = 0
    config_errors: dict[str, int] = field(default_factory=dict)

    @property
    def delivered(self) -> int:
        return self.sent + self.duplicates

    @property
    def refused_budget(self) -> int:
        return self.refused.get("over_budget", 0) + self.refused.get("over_lifetime_budget", 0)


@dataclass(frozen=True)
class UnitSpend:
    """Epsilon spent in one unit of privacy (this device, one metric name, one epoch),
    whatever spec versions the reports were made under."""

    metric: str
    epoch: int
    epoch_start: float | None
    unit: str
    reports: int
    spent: float
    budget: float | None
    adversary_accuracy: float


@dataclass(frozen=True)
class LifetimeSpend:
    """Lifetime epsilon of a memoised metric name: epsilon_inf per permanent response drawn
    (one per distinct value and mechanism fingerprint, and again after an opt-in);
    ``epsilon_inf`` is their mean, ``spent`` their sum.  ``budget`` is the cap on
    ``spent``: the app's ``lifetime_budgets`` entry (``inf``: none), else
    ``PrivacyCaps.lifetime_multiple`` x ``first_epsilon_inf``, the epsilon_inf of the
    name's first draw on this device (no later spec version moves it)."""

    metric: str
    memoised_values: int
    epsilon_inf: float
    spent: float
    budget: float
    first_epsilon_inf: float
    adversary_accuracy: float


@dataclass(frozen=True)
class PrivacyReport:
    """What this device has spent, per unit; no value appears in it."""

    units: tuple[UnitSpend, ...]
    lifetime: tuple[LifetimeSpend, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "units": [vars_of(u) for u in self.units],
            "lifetime": [vars_of(x) for x in self.lifetime],
        }

    def __str__(self) -> str:
        lines = [f"{'metric':<24} {'epoch':>7} {'reports':>7} {'epsilon':>9}"
                 f" {'budget':>8} {'adv.acc':>7}  unit"]
        for u in self.units:
            budget = "-" if u.budget is None else f"{u.budget:.4g}"
            lines.append(f"{u.metric:<24} {u.epoch:>7} {u.reports:>7}"
                         f" {u.spent:>9.4g} {budget:>8} {u.adversary_accuracy:>7.3f}  {u.unit}")
        for x in self.lifetime:
            lines.append(f"{x.metric:<24} lifetime: {x.memoised_values} memoised"
                         f" value(s) x eps_inf {x.epsilon_inf:.4g} = {x.spent:.4g}"
                         f" of cap {x.budget:.4g} (adv.acc {x.adversary_accuracy:.3f})")
        return "\n".join(lines)


def vars_of(obj: object) -> dict[str, Any]:
    from dataclasses import asdict, is_dataclass

    assert is_dataclass(obj) and not isinstance(obj, type)
    return asdict(obj)
