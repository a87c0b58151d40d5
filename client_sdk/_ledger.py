"""The budget ledger: check and charge a unit of privacy in one step.

A charge asks for one report of metric ``metric`` at wall-clock time ``now``:

1. the (name, version) must keep the mechanism fingerprint it was first charged
   with (else ``spec_conflict``: the spec changed under its version);
2. the epoch is that of max(now, the name's high-water mark): epochs only move
   forward, so a clock set back lands in the latest epoch already used;
3. the per-epoch budget of the *name* must hold the report's epsilon
   (else ``over_budget``);
4. a memoised value whose permanent response was never drawn (its HMAC key is
   new) costs epsilon_inf, within the lifetime budget of the name
   (else ``over_lifetime_budget``): the app's explicit one, else the default
   ``lifetime_multiple`` x the epsilon_inf of the name's *first* draw on this
   device (``lifetime_cap``);
5. ``make(epoch)`` randomises (and spools) the report; only if it returns are
   the charges written.

``SqliteLedger`` (a ``Client``) runs the five steps in one ``BEGIN IMMEDIATE``
transaction of the state folder's sqlite file: whatever holds the file (two
Clients, a forked child, another process), one unit is spent once.
``MemoryLedger`` (a ``Fleet`` device, which lives in one process) runs them under
a lock.

>>> ledger = MemoryLedger()
>>> ask = Ask("m", 1, "f" * 64, 86400, 1e9, 1.0, 1.0, None, 0.0, None)
>>> ledger.charge(ask, lambda epoch: epoch)
11574
>>> ledger.charge(ask, lambda epoch: epoch)
Refusal(status='over_budget', epoch=11574)

Why the first draw anchors the default lifetime cap: a cap that follows the
catalog is no cap.  Were it ``4 x`` the current version's epsilon_inf, or the
largest seen, one version at a high epsilon_inf would raise it for every later
draw.  Fixed at the first draw (kept in the ledger, across opt-out), no later
version moves it: whatever versions follow, the name's lifetime total on this
device stays at most ``lifetime_multiple x`` that first epsilon_inf, itself
within ``PrivacyCaps.epsilon_inf``.  A version that lowers epsilon_inf buys
more draws of the same total, one that raises it fewer:

>>> first = ask._replace(value_key="k1", epsilon_inf=1.0, budget=9.0)
>>> lifetime_cap(first, None), lifetime_cap(first._replace(epsilon_inf=8.0), 1.0)
(4.0, 4.0)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from fractions import Fraction
from typing import NamedTuple, TypeVar

from client_sdk._store import Store

__all__ = ["LIFETIME_MULTIPLE", "Ask", "Ledger", "MemoryLedger", "Refusal", "Spend",
           "SqliteLedger", "lifetime_cap"]

T = TypeVar("T")

#: Relative slack when comparing a sum of float epsilons with a budget: one report
#: of exactly the budget fits, a second never does.
BUDGET_SLACK = 1e-9
#: The default lifetime budget of a memoised name, in epsilon_inf of its first draw.
LIFETIME_MULTIPLE = 4.0


class Ask(NamedTuple):
    """One report's charge (no value in it: a memoised value only by its HMAC key)."""

    metric: str
    version: int
    fingerprint: str
    period: int                   # the epoch length in seconds
    now: float                    # the wall clock
    charge: float                 # epsilon of one report
    budget: float                 # epsilon per (name, epoch)
    value_key: str | None         # memoised: HMAC key of (fingerprint, value)
    epsilon_inf: float            # memoised: cost of a new permanent response
    lifetime_budget: float | None  # the app's cap (math.inf: none); None: the default
    lifetime_multiple: float = LIFETIME_MULTIPLE  # the default: this x the first draw's


class Refusal(NamedTuple):
    status: str
    epoch: int | None


class Spend(NamedTuple):
    """What the ledger holds: per (name, epoch) and per name's lifetime."""

    units: list[tuple[str, int, float, int]]      # metric, epoch, spent, reports
    # metric, permanent responses, epsilon, epsilon_inf of the first draw
    lifetime: list[tuple[str, int, float, float]]


def epoch_of(ask: Ask, high_water: float | None) -> int:
    """The epoch of max(now, high-water mark), in the ask's epoch length."""
    now = ask.now if high_water is None else max(ask.now, high_water)
    return int(now // ask.period)


def fits(spent: float, cost: float, budget: float) -> bool:
    return spent + cost <= budget * (1 + BUDGET_SLACK)


def lifetime_cap(ask: Ask, first: float | None) -> float:
    """The lifetime budget of ``ask``'s name: the app's, else ``lifetime_multiple`` x
    ``first`` (the epsilon_inf of the name's first draw; ``None``: this is it),
    rounded down (never above the exact product)."""
    if ask.lifetime_budget is not None:
        return ask.lifetime_budget
    anchor = ask.epsilon_inf if first is None else first
    cap = ask.lifetime_multiple * anchor
    if math.isfinite(cap) and Fraction(cap) > Fraction(ask.lifetime_multiple) * Fraction(anchor):
        cap = math.nextafter(cap, 0.0)
    return cap


def add_up(a: float, b: float) -> float:
    """a + b rounded outward (never below the exact sum)."""
    total = a + b
    return math.nextafter(total, math.inf) if a else total


class Ledger:
    """The interface shared by both ledgers."""

    def charge(self, ask: Ask, make: Callable[[int], T]) -> T | Refusal:
        raise NotImplementedError

    def spend(self) -> Spend:
        raise NotImplementedError


#: One statement for the common case: the spent epsilon is read for the wall clock's
#: epoch ?4; only a clock behind the high-water mark needs a second look (``_SPENT``).
_READ = """SELECT
    (SELECT fingerprint FROM versions WHERE metric = ?1 AND version = ?2),
    (SELECT high_water FROM names WHERE metric = ?1),
    EXISTS (SELECT 1 FROM lifetime WHERE metric = ?1 AND value_key = ?3),
    (SELECT spent FROM budget WHERE metric = ?1 AND epoch = ?4)"""
_SPENT = "SELECT spent FROM budget WHERE metric = ? AND epoch = ?"
_LIFE = ("SELECT total(epsilon_inf), (SELECT epsilon_inf FROM lifetime_first WHERE metric = ?1)"
         " FROM lifetime WHERE metric = ?1")
_CHARGE = ("INSERT INTO budget (metric, epoch, spent, reports) VALUES (?1, ?2, ?3, 1)"
           " ON CONFLICT (metric, epoch) DO UPDATE SET spent = ?3, reports = reports + 1")
_MEMO = "INSERT INTO lifetime (metric, value_key, epsilon_inf) VALUES (?, ?, ?)"
_FIRST = "INSERT OR IGNORE INTO lifetime_first (metric, epsilon_inf) VALUES (?, ?)"
_HIGH = ("INSERT INTO names (metric, high_water) VALUES (?1, ?2)"
         " ON CONFLICT (metric) DO UPDATE SET high_water = max(high_water, ?2)")
_VERSION = "INSERT OR IGNORE INTO versions (metric, version, fingerprint) VALUES (?, ?, ?)"


class SqliteLedger(Ledger):
    """The ledger in the tables of a ``Store`` file (see ``client_sdk._store``)."""

    __slots__ = ("store",)

    def __init__(self, store: Store) -> None:
        self.store = store

    def charge(self, ask: Ask, make: Callable[[int], T]) -> T | Refusal:
        key = ask.value_key
        now_epoch = epoch_of(ask, None)
        with self.store.transaction() as conn:
            known, high_water, drawn, spent = conn.execute(
                _READ, (ask.metric, ask.version, key or "", now_epoch)).fetchone()
            if known is not None and known != ask.fingerprint:
                return Refusal("spec_conflict", None)
            epoch = epoch_of(ask, high_water)
            if epoch != now_epoch:
                row = conn.execute(_SPENT, (ask.metric, epoch)).fetchone()
                spent = None if row is None else row[0]
            spent = 0.0 if spent is None else float(spent)
            if not fits(spent, ask.charge, ask.budget):
                return Refusal("over_budget", epoch)
            new_memo = key is not None and not drawn
            if new_memo:
                life, first = conn.execute(_LIFE, (ask.metric,)).fetchone()
                if not fits(float(life), ask.epsilon_inf, lifetime_cap(ask, first)):
                    return Refusal("over_lifetime_budget", epoch)
            made = make(epoch)
            conn.execute(_CHARGE, (ask.metric, epoch, add_up(spent, ask.charge)))
            if new_memo:
                conn.execute(_MEMO, (ask.metric, key, ask.epsilon_inf))
                conn.execute(_FIRST, (ask.metric, ask.epsilon_inf))
            start = float(epoch * ask.period)
            if high_water is None or start > high_water:
                conn.execute(_HIGH, (ask.metric, start))
            if known is None:
                conn.execute(_VERSION, (ask.metric, ask.version, ask.fingerprint))
            return made

    def spend(self) -> Spend:
        units = self.store.query(
            "SELECT metric, epoch, spent, reports FROM budget ORDER BY metric, epoch")
        lifetime = self.store.query(
            "SELECT l.metric, COUNT(*), total(l.epsilon_inf), f.epsilon_inf FROM lifetime l"
            " LEFT JOIN lifetime_first f USING (metric) GROUP BY l.metric ORDER BY l.metric")
        return Spend([(str(m), int(e), float(s), int(r)) for m, e, s, r in units],
                     [(str(m), int(n), float(s), float(s / n if f is None else f))
                      for m, n, s, f in lifetime])


class MemoryLedger(Ledger):
    """The same ledger in memory, for a ``Fleet`` device (one process, no files)."""

    __slots__ = ("_budget", "_drawn", "_first", "_high", "_lock", "_versions")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._budget: dict[tuple[str, int], tuple[float, int]] = {}
        self._drawn: dict[tuple[str, str], float] = {}
        self._first: dict[str, float] = {}
        self._high: dict[str, float] = {}
        self._versions: dict[tuple[str, int], str] = {}

    def charge(self, ask: Ask, make: Callable[[int], T]) -> T | Refusal:
        key = ask.value_key
        with self._lock:
            known = self._versions.get((ask.metric, ask.version))
            if known is not None and known != ask.fingerprint:
                return Refusal("spec_conflict", None)
            high_water = self._high.get(ask.metric)
            epoch = epoch_of(ask, high_water)
            spent, reports = self._budget.get((ask.metric, epoch), (0.0, 0))
            if not fits(spent, ask.charge, ask.budget):
                return Refusal("over_budget", epoch)
            new_memo = key is not None and (ask.metric, key) not in self._drawn
            if new_memo:
                life = sum(e for (m, _), e in self._drawn.items() if m == ask.metric)
                cap = lifetime_cap(ask, self._first.get(ask.metric))
                if not fits(life, ask.epsilon_inf, cap):
                    return Refusal("over_lifetime_budget", epoch)
            made = make(epoch)
            self._budget[(ask.metric, epoch)] = (add_up(spent, ask.charge), reports + 1)
            if new_memo:
                assert key is not None
                self._drawn[(ask.metric, key)] = ask.epsilon_inf
                self._first.setdefault(ask.metric, ask.epsilon_inf)
            start = float(epoch * ask.period)
            if high_water is None or start > high_water:
                self._high[ask.metric] = start
            self._versions.setdefault((ask.metric, ask.version), ask.fingerprint)
            return made

    def spend(self) -> Spend:
        with self._lock:
            units = [(m, e, s, r) for (m, e), (s, r) in sorted(self._budget.items())]
            life: dict[str, tuple[int, float]] = {}
            for (metric, _), eps in self._drawn.items():
                n, total = life.get(metric, (0, 0.0))
                life[metric] = (n + 1, total + eps)
            first = dict(self._first)
        return Spend(units, [(m, n, t, first[m]) for m, (n, t) in sorted(life.items())])
